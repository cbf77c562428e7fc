"""How a ``RedisBroker`` trims the streams it publishes to, and what each form may cut.

``XACK`` never deletes a stream entry, so a stream grows until trimmed; ``maxlen=`` /
``minid=`` bound it. A plain ``XADD … MAXLEN``/``MINID`` removes the oldest entries whether
or not a consumer group has read them: a group that falls behind loses entries it never saw.
``trim=`` says what a trim may cut:

- ``"safe"`` (the default): only what every consumer group has acknowledged, by the bound
  computed from the groups (``"groups"``), on every server.
- ``"acked"``: the server's own ``XADD … ACKED MAXLEN|MINID = …``, chosen by name; refused at
  connect by a server without it (read from its ``COMMAND DOCS``). Always exact (``=``): the
  approximate form deletes nothing on some servers that take ``ACKED`` (Redis 8.2.0 to 8.2.3
  and 8.4.0). Not the default, because of a server defect: on Redis 8.2.3, once an ``ACKED``
  trim was held back by a group that is then destroyed, the server's cached bound is not
  updated and ``ACKED`` trims nothing more (the stream grows without bound until the server
  restarts).
- ``"groups"``: the bound computed from the groups themselves, on any server
  (:mod:`.trim_script`): the lowest of each group's oldest pending entry and first unread
  entry; the trim goes no further than it, nor further than ``maxlen``/``minid`` allow.
- ``"unsafe"``: the plain trim on every ``XADD``, as ``maxlen``/``minid`` say. **Can lose
  entries a group has not read or not acknowledged.**

The safe forms trim on the first publish to a stream and then every ``trim_every``-th
(default 100, or 1 with ``exact_trim=True``), each time in the same one command as the
``XADD`` (so no extra round trip): between two trims a stream may hold up to
``trim_every - 1`` entries more than the bound, as an approximate (``~``) trim may.

A stream with no consumer group has nothing to protect: every form trims it as
``maxlen``/``minid`` say. A group created later starts from what is left. A stream whose group
stopped reading (or whose consumer died holding entries nobody reclaims) is not trimmed past
that group's position: it grows until the group moves or is deleted (``XGROUP DESTROY``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, final, get_args

from ..core.errors import ConfigurationError, UnsupportedError
from ..core.positions import InvalidPosition, Position
from .client import RedisClient
from .client.errors import ReplyError
from .trim_script import ADD_THEN_TRIM

__all__ = ["DEFAULT_TRIM_EVERY", "Trim", "TrimPolicy", "Trimmer"]

#: What ``trim=`` takes (see the module docstring).
Trim = Literal["safe", "acked", "groups", "unsafe"]
_TRIMS: Final = get_args(Trim)
#: Publishes to one stream between two safe trims of it, unless ``trim_every=`` says.
DEFAULT_TRIM_EVERY: Final = 100
#: The groups script by its digest: sent whole only to a server that has not seen it.
_SCRIPT_SHA: Final = hashlib.sha1(ADD_THEN_TRIM.encode()).hexdigest()
#: Streams whose publish count a transport keeps; one forgotten is trimmed at its next publish.
_COUNTED_STREAMS: Final = 10_000


@final
@dataclass(frozen=True, slots=True)
class TrimPolicy:
    """A broker's trim, checked: ``strategy`` and ``threshold`` as ``XADD`` takes them."""

    strategy: Literal["MAXLEN", "MINID"]
    threshold: int | str
    exact: bool
    trim: Trim
    every: int

    @classmethod
    def from_options(
        cls,
        *,
        maxlen: object,
        minid: object,
        exact_trim: object,
        trim: object,
        trim_every: object,
    ) -> TrimPolicy | None:
        """The policy of a ``RedisBroker``'s options, or None when it trims nothing.

        Raises :class:`~trio_streams.ConfigurationError`, naming the option, for a value of
        the wrong kind, both bounds, or ``trim=``/``trim_every=`` with nothing to trim.
        """
        if maxlen is not None and (isinstance(maxlen, bool) or not isinstance(maxlen, int)):
            raise ConfigurationError(f"maxlen takes an int, not {maxlen!r}")
        if isinstance(maxlen, int) and maxlen < 0:
            raise ConfigurationError(f"maxlen must be >= 0, got {maxlen}")
        if minid is not None:
            minid = _normal_minid(minid)
        if maxlen is not None and minid is not None:
            raise ConfigurationError("trim by maxlen or by minid, not both")
        if not isinstance(exact_trim, bool):
            raise ConfigurationError(f"exact_trim is True or False, not {exact_trim!r}")
        if trim is not None and trim not in _TRIMS:
            raise ConfigurationError(
                f"trim takes one of {', '.join(map(repr, _TRIMS))}, not {trim!r}"
            )
        if trim_every is not None and (
            isinstance(trim_every, bool) or not isinstance(trim_every, int) or trim_every < 1
        ):
            raise ConfigurationError(f"trim_every takes an int >= 1, not {trim_every!r}")
        if maxlen is None and minid is None:
            for name, value in (("trim", trim), ("trim_every", trim_every)):
                if value is not None:
                    raise ConfigurationError(
                        f"{name}={value!r} says how maxlen= or minid= trims; give one of them"
                    )
            return None
        mode: Trim = "safe" if trim is None else trim  # type: ignore[assignment]
        if mode == "unsafe" and trim_every is not None:
            raise ConfigurationError(
                "trim_every paces the safe trims; trim='unsafe' trims with every XADD"
            )
        every = trim_every if isinstance(trim_every, int) else (1 if exact_trim else None)
        if maxlen is not None:
            return cls("MAXLEN", maxlen, exact_trim, mode, every or DEFAULT_TRIM_EVERY)
        assert isinstance(minid, str)
        return cls("MINID", minid, exact_trim, mode, every or DEFAULT_TRIM_EVERY)

    @property
    def operator(self) -> str:
        return "=" if self.exact else "~"

    @property
    def loses_unread(self) -> bool:
        """Whether this trim can remove entries a group has not read or acknowledged."""
        return self.trim == "unsafe"


def _normal_minid(minid: object) -> str:
    """``minid`` as ``<ms>-<seq>`` in plain decimal; refused, naming ``minid``, if it is not
    an entry id (``<ms>`` or ``<ms>-<seq>``)."""
    if isinstance(minid, str):
        try:
            position = Position.entry(minid if "-" in minid else f"{minid}-0")
        except InvalidPosition:
            pass
        else:
            return position.entry_id
    raise ConfigurationError(f"minid takes an entry id, <ms> or <ms>-<seq>, not {minid!r}")


class Trimmer:
    """The ``XADD`` of one transport's stream publishes, trimmed as its policy says.

    Each publish is one command: a plain ``XADD`` between two safe trims, ``XADD … ACKED``
    or the groups script (:data:`~.trim_script.ADD_THEN_TRIM`) when one is due. Cancellation
    is that of the one command.
    """

    def __init__(self, client: RedisClient, policy: TrimPolicy | None) -> None:
        self.client = client
        self.policy = policy
        self._counts: OrderedDict[str, int] = OrderedDict()

    def check_server(self) -> None:
        """Refuse ``trim="acked"`` on a server whose ``XADD`` does not take ``ACKED``
        (:class:`~trio_streams.UnsupportedError`, naming the server)."""
        policy = self.policy
        if policy is not None and policy.trim == "acked" and not self._acked():
            raise UnsupportedError(
                f"trim='acked' needs XADD … ACKED, which {self.client.commands.source} does "
                "not take (Redis 8.2 or later has it); use trim='safe', which computes the "
                "same protection from the groups on any server"
            )

    def _acked(self) -> bool:
        return self.client.commands.takes("xadd", "ACKED")

    def form(self) -> Trim | None:
        """Which trim a due trim runs now: ``"acked"``, ``"groups"``, ``"unsafe"``, or None."""
        policy = self.policy
        if policy is None:
            return None
        return "groups" if policy.trim == "safe" else policy.trim

    def _due(self, key: str) -> bool:
        assert self.policy is not None
        count = self._counts.pop(key, 0)
        self._counts[key] = count + 1
        if len(self._counts) > _COUNTED_STREAMS:
            self._counts.popitem(last=False)
        return count % self.policy.every == 0

    async def add(self, key: str, fields: Sequence[Any]) -> Any:
        """``XADD key * fields``, trimmed if a trim is due; the new entry's id."""
        policy = self.policy
        form = self.form()
        if policy is None or form is None:
            return await self.client.execute("XADD", key, "*", *fields)
        bound = (policy.strategy, policy.threshold)
        if form == "unsafe":
            return await self.client.execute("XADD", key, bound[0], policy.operator, bound[1],
                                             "*", *fields)  # fmt: skip
        if not self._due(key):
            return await self.client.execute("XADD", key, "*", *fields)
        if form == "acked":
            return await self.client.execute(
                "XADD", key, "ACKED", bound[0], "=", bound[1], "*", *fields
            )
        arguments = (1, key, bound[0], policy.operator, bound[1], *fields)
        try:
            return await self.client.execute("EVALSHA", _SCRIPT_SHA, *arguments)
        except ReplyError as exc:
            if exc.code != "NOSCRIPT":
                raise
        # Not in this server's script cache yet (or flushed, or another node): send it whole.
        return await self.client.execute("EVAL", ADD_THEN_TRIM, *arguments)
