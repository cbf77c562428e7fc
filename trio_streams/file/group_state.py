"""The state of a consumer group on a stream file: who holds what, where new work starts, what
waits to be retried. Pure data and its transitions, no I/O (:mod:`.group_store` reads and writes
it under the group's lock).

A group's messages are named by their frame offsets in the file, which never change: the file is
only ever appended to. The state holds:

- ``cursors``: for each stream key the group reads, the offset where its unclaimed messages
  begin. Without ``ordered`` every key moves together (a claim reads the file in order); with
  it each key moves when its holder claims more of it.
- ``batches``: what members have taken and not settled. A batch is a range of the file
  (``start``-``end``) of the group's ``keys`` there, or an explicit list of ``offsets``; its
  ``done`` offsets are settled, ``runs`` counts the handler runs of the others (an attempt is a
  handler run: a claim counts nothing). A batch whose ``member`` is None was handed back (by a
  graceful stop, or taken from a dead member) and is the next thing any member takes.
- ``delayed``: ``retry_after`` retries, each with the instant it is due and its runs so far.
- ``members``: the members that have joined and not left, with the instant their lease ends.

With ``ordered``, a stream key is held by the member whose batches name it: no other member
claims that key's messages until those batches are settled, so each key is handled in order
across the group, and keys move between members only between batches.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

__all__ = [
    "FORMAT",
    "Batch",
    "Delayed",
    "GroupState",
    "Member",
    "decode_state",
    "encode_state",
]

#: Version of the state's layout.
FORMAT = 1


class Batch(msgspec.Struct, kw_only=True):
    """Messages one member took at once (or, ``member`` None, waiting to be taken again)."""

    id: int
    member: str | None
    #: The stream keys it covers (with ``ordered``, the keys its member holds through it).
    keys: list[str]
    #: Offset of its first message, and the offset right after its last frame.
    start: int
    end: int
    #: How many messages it holds.
    count: int
    #: Its messages, when not every message of ``keys`` in ``start``-``end`` (sorted).
    offsets: list[int] | None = None
    #: Offsets of its messages that are settled.
    done: list[int] = msgspec.field(default_factory=list)
    #: Handler runs of its messages not settled, by offset (runs so far, never fewer).
    runs: dict[int, int] = msgspec.field(default_factory=dict)

    @property
    def left(self) -> int:
        return self.count - len(self.done)


class Delayed(msgspec.Struct, kw_only=True):
    """A ``retry_after`` retry: the message at ``offset`` (of ``key``), due at ``due_ms``."""

    offset: int
    key: str
    due_ms: int
    runs: int


class Member(msgspec.Struct, kw_only=True):
    """A member that joined: its process and host, and until when its lease runs."""

    id: str
    pid: int
    host: str
    joined_ms: int
    lease_until_ms: int


class GroupState(msgspec.Struct, kw_only=True):
    """Everything a group keeps beside the file (see the module docstring)."""

    #: Bumped at every write: the slot it is written to, and which of the two is newer.
    version: int = 0
    format: int = FORMAT
    group: str
    #: The stream file's creation instant (its header): a state of another file is refused.
    file_created_at_ms: int
    keys: list[str]
    ordered: bool
    cursors: dict[str, int]
    batches: list[Batch] = msgspec.field(default_factory=list)
    delayed: list[Delayed] = msgspec.field(default_factory=list)
    members: dict[str, Member] = msgspec.field(default_factory=dict)
    next_batch: int = 1

    # ---- reading -----------------------------------------------------------------------------

    def position(self) -> int:
        """The offset before which every message of the group is settled (or delayed, kept
        one by one): where a restart of the whole group resumes."""
        candidates = list(self.cursors.values())
        candidates += [batch.start for batch in self.batches]
        return min(candidates) if candidates else 0

    def held(self, member: str | None = None) -> int:
        """Messages taken and not settled (by ``member``, or by anyone; free batches too)."""
        return sum(b.left for b in self.batches if member is None or b.member == member)

    def batches_of(self, member: str | None) -> list[Batch]:
        return [batch for batch in self.batches if batch.member == member]

    def keys_held_by_others(self, member: str) -> set[str]:
        """Keys that batches of other members, or batches waiting to be taken, hold."""
        return {key for batch in self.batches if batch.member != member for key in batch.keys}

    def batch(self, batch_id: int) -> Batch | None:
        for batch in self.batches:
            if batch.id == batch_id:
                return batch
        return None

    # ---- changing ----------------------------------------------------------------------------

    def add_batch(
        self,
        member: str,
        keys: Iterable[str],
        start: int,
        end: int,
        count: int,
        offsets: list[int] | None = None,
        runs: dict[int, int] | None = None,
    ) -> Batch:
        batch = Batch(
            id=self.next_batch,
            member=member,
            keys=sorted(keys),
            start=start,
            end=end,
            count=count,
            offsets=offsets,
            runs=dict(runs or {}),
        )
        self.next_batch += 1
        self.batches.append(batch)
        return batch

    def settle(self, batch: Batch, offsets: Iterable[int]) -> None:
        """Mark ``offsets`` of ``batch`` settled; a batch all settled goes."""
        done = set(batch.done)
        for offset in offsets:
            if offset not in done:
                done.add(offset)
                batch.runs.pop(offset, None)
        batch.done = sorted(done)
        if batch.left <= 0:
            self.batches.remove(batch)

    def count_runs(self, batch: Batch, offset: int, runs: int) -> None:
        """``offset`` of ``batch`` has been run ``runs`` times so far (never counted down)."""
        if offset not in batch.done and runs > batch.runs.get(offset, 0):
            batch.runs[offset] = runs

    def free(self, member: str) -> list[Batch]:
        """``member`` is gone (left, dead, or its lease ran out): its batches wait to be taken
        again, and it leaves."""
        freed = self.batches_of(member)
        for batch in freed:
            batch.member = None
        self.members.pop(member, None)
        return freed


def encode_state(state: GroupState) -> bytes:
    return _encoder.encode(state) + b"\n"


def decode_state(data: bytes) -> GroupState:
    """The state in ``data``; ``msgspec.ValidationError``/``DecodeError`` if it is not one."""
    state = _decoder.decode(data)
    if state.format != FORMAT:
        raise msgspec.ValidationError(f"not a format {FORMAT} group state (format {state.format})")
    return state


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(GroupState)
