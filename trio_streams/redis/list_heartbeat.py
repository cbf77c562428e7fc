"""A reliable list consumer's name, kept alive: its heartbeat and its place among consumers.

The consumer keeps ``{key}:heartbeat:<consumer>`` alive with a TTL (``heartbeat`` s), renewed
every third of it by a task of the subscription, and is listed in ``{key}:consumers``. What it
writes into the heartbeat is a token of this subscription, so a renewal that finds another's
token knows the name was taken over (:class:`~.lists.ConsumerNameInUse`). A reaper takes the
processing list of a consumer whose heartbeat expired (:mod:`.list_reaper`).
"""

from __future__ import annotations

import logging
import secrets

import trio

from ..core.host import SubscriptionHost
from .client import RedisClient
from .client.errors import RedisError
from .list_scripts import RENEW
from .lists import ConsumerNameInUse, consumers_key, heartbeat_key

__all__ = ["ListHeartbeat"]

_log = logging.getLogger("trio_streams.redis")

#: Beyond a renewal period (a third of the heartbeat), how long a consumer opening under a
#: name whose heartbeat lives watches for a renewal before it takes the name over (s).
_RENEWAL_SLACK = 0.25


class ListHeartbeat:
    """The heartbeat of consumer ``consumer`` of list ``key`` (see the module docstring)."""

    def __init__(
        self, client: RedisClient, key: str, consumer: str, *, heartbeat: float, label: str
    ) -> None:
        self._client = client
        self._list = key
        self._consumer = consumer
        self._label = label
        self.key = heartbeat_key(key, consumer)
        self.consumers = consumers_key(key)
        self.ttl_ms = max(10, round(heartbeat * 1000))
        #: What this subscription writes into its heartbeat: whose the name is now.
        self.token = f"{consumer}:{secrets.token_hex(8)}"

    async def claim_name(self) -> None:
        """Take this consumer's name: its heartbeat, with this subscription's token.

        Held by nobody: taken at once. Held (the heartbeat lives): either a consumer of that
        name died without a word, less than a heartbeat ago — restarting under its name, this
        one takes over its processing list — or another live consumer goes by it. Watches the
        heartbeat for a renewal period: renewed, the name is in use
        (:class:`~.lists.ConsumerNameInUse`); not renewed, its holder is dead, and the name is
        taken over at once, before the heartbeat would have expired."""
        client, key, ttl = self._client, self.key, self.ttl_ms
        if await client.execute("SET", key, self.token, "NX", "PX", ttl) is not None:
            await self._listed()
            return
        watch = ttl / 3000 + _RENEWAL_SLACK
        last = int(await client.execute("PTTL", key))
        with trio.move_on_after(watch):
            while True:
                await trio.sleep(max(0.005, ttl / 30000))
                if await client.execute("SET", key, self.token, "NX", "PX", ttl) is not None:
                    await self._listed()  # it expired meanwhile
                    return
                now = int(await client.execute("PTTL", key))
                if now > last:
                    raise ConsumerNameInUse(
                        f"{self._label}: another live consumer of list {self._list!r} goes by "
                        f"the name {self._consumer!r} (its heartbeat {key!r} is being renewed); "
                        "give each consumer its own name, or leave consumer= out"
                    )
                last = now
        _log.warning(
            "%s: taking over consumer %r of list %r: its heartbeat was not renewed for %.1f s, "
            "so its last holder is gone",
            self._label, self._consumer, self._list, watch,
        )  # fmt: skip
        await client.execute("SET", key, self.token, "PX", ttl)
        await self._listed()

    async def _listed(self) -> None:
        await self._client.execute("SADD", self.consumers, self._consumer)

    async def _beat(self) -> None:
        """Renew the heartbeat; :class:`~.lists.ConsumerNameInUse` if another consumer took
        the name over (this one stalled past a renewal period and was taken for dead, or
        another goes by the same name)."""
        renewed = await self._client.execute(
            "EVAL", RENEW, 2, self.key, self.consumers, self.token, self.ttl_ms, self._consumer,
        )  # fmt: skip
        if not renewed:
            raise ConsumerNameInUse(
                f"{self._label}: consumer name {self._consumer!r} of list {self._list!r} was "
                "taken over by another consumer (this one stalled past its heartbeat's renewal "
                "period, or another goes by the same name); give each consumer its own name"
            )

    async def run(self, host: SubscriptionHost) -> None:
        """Renew the heartbeat every third of its TTL (and stay listed: a reaper that took this
        consumer for dead removed it); a failure is the fault ``heartbeat``. Cancelled with the
        subscription: the heartbeat expires by itself unless ``aclose`` removes it first."""
        while True:
            await trio.sleep(self.ttl_ms / 3000)
            try:
                await self._beat()
            except RedisError as exc:
                host.report_fault("heartbeat", f"renewing {self.key!r}: {exc}", error=exc)
            else:
                host.clear_fault("heartbeat")
