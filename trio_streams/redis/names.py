"""Consumer names that survive restarts, and that two live processes never share.

A group member's default name is stable: ``<host>:<app>/<subscription>:<slot>``, where the slot
is the worker slot ``trio-streams run --workers N`` gives each worker (``TRIO_STREAMS_WORKER``),
or, in a process outside a supervisor, the lowest slot no live process on the host holds. A
process restarted on the same host (and slot) therefore comes back under the name it had,
and its first read takes back its own pending entries at once.

A name is held through a lease: a key in the stream's cluster slot,
``<stream>:consumer:<group>:<name>``, holding the holder's token with a TTL of :data:`LEASE_TTL`,
renewed every third of it by a task of the subscription. Opening under a name whose lease
lives, a consumer watches it for a renewal period: renewed, the name is another live
process's (:class:`~.lists.ConsumerNameInUse` for a name given or a worker slot; the next slot
for a name chosen here); not renewed, its holder died less than a TTL ago, and the name is taken
over. A graceful close deletes the lease, so a restart takes the name at once.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket

import trio

from .client import RedisClient
from .client.errors import RedisError
from .client.scripts import Script
from .companions import companion_key
from .lists import ConsumerNameInUse

__all__ = ["LEASE_TTL", "ConsumerLease", "lease_key", "worker_slot"]

_log = logging.getLogger("trio_streams.redis")

#: How long a consumer name's lease lives without a renewal (s); renewed every third of it.
LEASE_TTL = 6.0
#: Beyond a renewal period, how long a consumer watches a held lease for a renewal (s).
_RENEWAL_SLACK = 0.25
#: Seconds a stop waits for the server to delete a lease; past it, the lease expires by itself.
_RELEASE_TIMEOUT = 2.0
#: The most slots a process outside a supervisor looks at for a free name.
_MAX_SLOTS = 64

#: Renew a lease unless another holder has it now. KEYS: lease. ARGV: token, TTL ms. 1 or 0.
_RENEW = Script(
    """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
""",
    purpose="renew a consumer name's lease",
)

#: Delete a lease if it is still this holder's. KEYS: lease. ARGV: token.
_RELEASE = Script(
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
""",
    purpose="release a consumer name's lease",
)

#: Names this process holds now, by lease key: another subscription of this process never
#: waits a renewal period to find them taken.
_held_here: set[str] = set()


def worker_slot() -> int | None:
    """This process's worker slot under ``trio-streams run --workers N`` (None outside one)."""
    raw = os.environ.get("TRIO_STREAMS_WORKER", "")
    return int(raw) if raw.isdigit() else None


def lease_key(stream_key: str, group: str, name: str) -> str:
    """The lease of consumer ``name`` of ``group`` on ``stream_key``, in the stream's slot."""
    return companion_key(stream_key, f"consumer:{group}:{name}")


class ConsumerLease:
    """The lease on one consumer name of one group (see the module docstring)."""

    def __init__(self, client: RedisClient, stream_key: str, group: str, *, label: str) -> None:
        self._client = client
        self._stream_key = stream_key
        self._group = group
        self._label = label
        self._ttl_ms = round(LEASE_TTL * 1000)
        self._token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        #: The name held (set by :meth:`claim`).
        self.name = ""
        self._key = ""

    async def claim(self, given: str | None, base: str) -> str:
        """Take a name: ``given`` (refused if a live process holds it), else ``base:<slot>``
        for the worker slot (refused likewise), else the lowest free ``base:<n>``."""
        if given is not None:
            await self._take(given, refuse=True)
            return given
        slot = worker_slot()
        if slot is not None:
            name = f"{base}:{slot}"
            await self._take(name, refuse=True)
            return name
        for n in range(_MAX_SLOTS):
            name = f"{base}:{n}"
            if await self._take(name, refuse=False):
                return name
        raise ConsumerNameInUse(
            f"{self._label}: every consumer name {base}:0 to {base}:{_MAX_SLOTS - 1} of group "
            f"{self._group!r} is held by a live process; give consumer= explicitly"
        )

    async def _take(self, name: str, *, refuse: bool) -> bool:
        key = lease_key(self._stream_key, self._group, name)
        if key in _held_here:
            if refuse:
                raise self._in_use(name, "another subscription of this process")
            return False
        client, ttl = self._client, self._ttl_ms
        if await client.execute("SET", key, self._token, "NX", "PX", ttl) is None:
            watch = ttl / 3000 + _RENEWAL_SLACK
            last = int(await client.execute("PTTL", key))
            taken = False
            with trio.move_on_after(watch):
                while True:
                    await trio.sleep(max(0.005, ttl / 30000))
                    if await client.execute("SET", key, self._token, "NX", "PX", ttl) is not None:
                        taken = True  # it expired meanwhile
                        break
                    now = int(await client.execute("PTTL", key))
                    if now > last:  # renewed: a live process holds it
                        if refuse:
                            raise self._in_use(name, "another live process (its lease is renewed)")
                        return False
                    last = now
            if not taken:
                _log.warning(
                    "%s: taking over consumer name %r of group %r: its lease was not renewed "
                    "for %.1f s, so its last holder is gone",
                    self._label, name, self._group, watch,
                )  # fmt: skip
                await client.execute("SET", key, self._token, "PX", ttl)
        self.name, self._key = name, key
        _held_here.add(key)
        return True

    def _in_use(self, name: str, holder: str) -> ConsumerNameInUse:
        return ConsumerNameInUse(
            f"{self._label}: consumer name {name!r} of group {self._group!r} on stream "
            f"{self._stream_key!r} is held by {holder}; give each process its own name (leave "
            "consumer= out, or run the processes as `trio-streams run --workers N`)"
        )

    async def renew(self) -> None:
        """Renew the lease; :class:`~.lists.ConsumerNameInUse` if another holder took it (this
        process stalled past a TTL and was taken for dead)."""
        renewed = await self._client.execute(
            "EVAL", _RENEW, 1, self._key, self._token, self._ttl_ms
        )
        if not renewed:
            raise ConsumerNameInUse(
                f"{self._label}: consumer name {self.name!r} of group {self._group!r} was "
                "taken over by another process (this one stalled past its lease's "
                f"{LEASE_TTL:g} s); give each process its own name"
            )

    async def renew_loop(self) -> None:
        """Renew every third of the TTL; a failed renewal is retried at the next one."""
        while True:
            await trio.sleep(LEASE_TTL / 3)
            try:
                await self.renew()
            except RedisError:
                continue  # the lease lasts a TTL: the next renewal tries again

    async def release(self) -> None:
        """Delete the lease if it is still ours (shielded): a restart takes the name at once."""
        if not self._key:
            await trio.lowlevel.checkpoint()
            return
        _held_here.discard(self._key)
        # Shielded so a stop's cancellation does not cut it short, but bounded: a server that
        # never answers (and a client without a command timeout) must not hold the stop forever.
        with trio.move_on_after(_RELEASE_TIMEOUT, shield=True) as releasing:
            try:
                await self._client.execute("EVAL", _RELEASE, 1, self._key, self._token)
            except RedisError as exc:
                _log.debug("%s: could not release lease %r: %s", self._label, self._key, exc)
        if releasing.cancelled_caught:
            _log.debug(
                "%s: releasing lease %r got no answer within %ss; it expires within %ss",
                self._label,
                self._key,
                _RELEASE_TIMEOUT,
                LEASE_TTL,
            )
