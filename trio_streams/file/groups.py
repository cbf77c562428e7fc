"""The tools of the consumer groups of a stream file: list them, move one, reset one, delete one.

A group keeps its state beside the file, in ``<file>.groups/<group>/`` (see
:mod:`.group_store`). These functions read and change it from outside the group's members, for
an operator (``trio-streams file stat``, ``trio-streams file group ...``, ``trio-streams top``)
or a script:

- :func:`list_groups` reports every group: where it stands, how far behind the writer it is,
  its members (alive or not), what they hold and what waits to be retried. It reads the state
  under the group's lock for the instant of the read (or, if a frozen member holds the lock,
  without it: a slot being rewritten does not decode and the other is read), so it holds up
  no member; a group whose state cannot be read is reported with the reason, never left out.
- :func:`move_group` sets the group's position for all of its members, as a Redis
  ``XGROUP SETID`` does: what members took and have not settled, and the retries that wait,
  stay as they are. It is refused while a member is live: its process holds its life lock
  and its lease has not run out.
- :func:`reset_group` moves the group and forgets what it held: taken and unsettled messages,
  waiting retries, and the members that are gone. It needs every member process gone.
- :func:`delete_group` removes the group's directory (the files the group keeps there, nothing
  else). It needs every member process gone too.

The changing ones hold the group's lock for the whole change and write the state synced, so a
member that starts meanwhile waits, then sees the new state. They are synchronous and block
(the lock, the file reads): call them from a thread in an async program.

A position is shown as the group message at it, ``"orders:41"`` (seq 41 of stream ``orders``:
the next message the group handles), or as ``"byte 1234"`` when no message of the group's keys
follows it yet (the end of the file).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import final

from ..core.group_moves import GroupMove, GroupNotFound, PositionRefused
from ..core.positions import Position
from ..core.transport import SeekRefused
from .errors import SeekError, StreamFileError, StreamFileNotFoundError
from .format import HEADER_SIZE
from .group import seek_key
from .group_state import Batch, GroupState
from .group_store import (
    GroupLockedError,
    GroupStateError,
    GroupStore,
    check_group_name,
    groups_directory,
)
from .reader import FileReader

__all__ = [
    "FileGroupNotFound",
    "GroupInfo",
    "GroupReset",
    "MemberInfo",
    "delete_group",
    "list_groups",
    "move_group",
    "reset_group",
]

#: Messages read per batch while counting.
_BATCH = 4096
#: The files a group keeps in its directory, and in its ``members`` directory (by suffix):
#: what :func:`delete_group` removes, and all it removes.
_GROUP_FILES = ("state.1.json", "state.0.json", "state.1.json.tmp", "lock", "bell")
_MEMBER_SUFFIXES = (".lock", ".runs")


class FileGroupNotFound(GroupNotFound):
    """The stream file has no consumer group of that name (or the group has no state yet); the
    message names the file, the group and the groups the file has."""

    def hint(self) -> str:
        return "a group of a stream file is created by its first member's start"


@final
@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A member of a group, as its state names it.

    ``alive``: its process still holds its life lock (the kernel drops it when the process dies,
    however it dies). ``held``: the messages it took and has not settled. ``lease_until_ms``:
    when its lease runs out (Unix ms) unless it renews it; a member whose process is alive but
    whose lease ran out is treated as gone by the others.
    """

    id: str
    pid: int
    host: str
    alive: bool
    held: int
    lease_until_ms: int


@final
@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One group of a stream file (see :func:`list_groups`).

    ``position`` is the offset before which every message of the group is settled (or waits as
    a retry): where the group resumes when all its members restart. ``first_unsettled`` is the
    first message from there that is not settled, ``(stream key, seq)``, None when there is
    none. ``lag_messages`` counts the messages of the group's keys not settled from the position
    to the end of the file (taken and unsettled ones included, settled ones and waiting retries
    not); ``lag_bytes`` is the bytes from the position to the end. ``lag_counted`` is False when
    the count stopped at the reading budget given to :func:`list_groups`: ``lag_messages`` is
    then a lower bound. ``held`` counts the messages taken and not settled (by members, or handed
    back and waiting to be taken again), ``delayed`` the retries that wait, ``next_due_ms`` when
    the first of them is due (Unix ms).

    ``error`` says why the group's state could not be read (unreadable, of another file): the
    other fields are then empty.
    """

    name: str
    keys: tuple[str, ...] = ()
    ordered: bool = False
    position: int = 0
    first_unsettled: tuple[str, int] | None = None
    lag_messages: int = 0
    lag_bytes: int = 0
    members: tuple[MemberInfo, ...] = ()
    held: int = 0
    delayed: int = 0
    next_due_ms: int | None = None
    lag_counted: bool = True
    error: str | None = None


@final
@dataclass(frozen=True, slots=True)
class GroupReset:
    """What :func:`reset_group` did: the move, then what it forgot: ``held`` messages taken and
    not settled, ``delayed`` retries, and the ``members`` that were gone."""

    move: GroupMove
    held: int
    delayed: int
    members: tuple[str, ...]


# ---- listing ---------------------------------------------------------------------------------


def list_groups(path: str | os.PathLike[str], *, scan_budget: int | None = None) -> list[GroupInfo]:
    """Every group of the stream file at ``path``, by name (see the module docstring).

    Counting a group's lag reads the file from the group's position to its end; ``scan_budget``
    (bytes) bounds that read per group, for a view refreshed often (``GroupInfo.lag_counted``
    says when it stopped short). A group whose state cannot be read is reported with its
    ``error``. :class:`~trio_streams.file.errors.StreamFileNotFoundError` if there is no stream
    file at ``path``; a damaged stream file raises the error its reading meets.
    """
    path = os.fspath(path)
    with FileReader(path) as reader:
        created_at_ms = reader.header.created_at_ms
    found = []
    for name in _group_names(path):
        store = GroupStore(path, name)
        try:
            found.append(_info(store, created_at_ms, scan_budget))
        except (GroupStateError, OSError) as exc:
            found.append(GroupInfo(name, error=_reason(exc)))
        finally:
            store.close()
    return found


def _group_names(path: str) -> list[str]:
    """The names of the group directories beside ``path`` (what is not a group's is passed
    over: a file, a directory whose name no group can have)."""
    directory = groups_directory(path)
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise GroupStateError(f"cannot list the groups: {exc.strerror}", path=directory) from exc
    names = []
    for entry in entries:
        with contextlib.suppress(ValueError, OSError):
            if entry.is_dir(follow_symlinks=False):
                names.append(check_group_name(entry.name))
    return names


def _info(store: GroupStore, created_at_ms: int, scan_budget: int | None) -> GroupInfo:
    state = store.load_outside()
    if state is None:
        return GroupInfo(
            store.group,
            error="no state yet (a group being created, or what a cut-short delete left)",
        )
    _check_file(state, created_at_ms, store)
    members = tuple(
        MemberInfo(
            member.id,
            member.pid,
            member.host,
            store.member_alive(member.id),
            state.held(member.id),
            member.lease_until_ms,
        )
        for member in sorted(state.members.values(), key=lambda member: member.id)
    )
    position = max(state.position(), HEADER_SIZE)
    with FileReader(store.stream_path, keys=state.keys, on_eos="include") as reader:
        counted = _count_unsettled(reader, state, position, scan_budget)
        size = reader.file_size()
    return GroupInfo(
        name=store.group,
        keys=tuple(state.keys),
        ordered=state.ordered,
        position=position,
        first_unsettled=counted.first,
        lag_messages=counted.count,
        lag_bytes=max(0, size - position),
        members=members,
        held=state.held(),
        delayed=len(state.delayed),
        next_due_ms=min((d.due_ms for d in state.delayed), default=None),
        lag_counted=counted.complete,
    )


@dataclass
class _Counted:
    count: int = 0
    first: tuple[str, int] | None = None
    complete: bool = True


def _count_unsettled(
    reader: FileReader, state: GroupState, position: int, budget: int | None
) -> _Counted:
    """The messages of the group not settled from ``position`` on: those past their key's
    cursor (not taken yet), and those before it that a batch holds and has not settled (what
    is before a cursor and in no batch was settled, or waits as a retry)."""
    cursors = state.cursors
    batches = [_Held(batch) for batch in state.batches]
    counted = _Counted()
    reader.rewind_to(position)
    stop = None if budget is None else position + budget
    # A call reads chunks until it has this many messages: fewer at a time keep to the budget.
    batch = _BATCH if budget is None else 256
    while True:
        if stop is not None and reader.offset >= stop:
            # Read past the budget: stop, unless that was the end.
            counted.complete = reader.offset >= reader.file_size()
            break
        messages = reader.read_messages(batch)
        for message in messages:
            if message.is_eos:
                continue
            offset = message.offset
            key = message.stream_key
            if offset >= cursors.get(key, 0) or any(held.holds(key, offset) for held in batches):
                counted.count += 1
                if counted.first is None:
                    counted.first = (key, message.seq)
        if not messages and _at_end(reader):
            break
    return counted


class _Held:
    """The unsettled messages of one batch, for membership tests."""

    def __init__(self, batch: Batch) -> None:
        self.start, self.end, self.keys = batch.start, batch.end, frozenset(batch.keys)
        self.offsets = None if batch.offsets is None else frozenset(batch.offsets)
        self.done = frozenset(batch.done)

    def holds(self, key: str, offset: int) -> bool:
        if offset in self.done or not self.start <= offset < self.end:
            return False
        return key in self.keys if self.offsets is None else offset in self.offsets


# ---- changing ---------------------------------------------------------------------------------


def move_group(
    path: str | os.PathLike[str], group: str, position: Position, *, dry_run: bool = False
) -> GroupMove:
    """Move ``group`` of the stream file at ``path`` to ``position``, for all its members (or,
    with ``dry_run``, only say what the move would do).

    ``position`` is :meth:`Position.beginning() <trio_streams.core.positions.Position.beginning>`,
    :meth:`~trio_streams.core.positions.Position.end` (the tip now), a sequence number (the
    first message of its stream with that seq or more) or an instant (the first message strictly
    later); the last two must name one of the group's streams when it reads several. Every
    cursor of the group is set to the offset found: the group handles what follows it, in file
    order. What members took and have not settled, and the retries that wait, stay as they are
    (a move back delivers again what it passes; a held message it passes may be handled twice).

    Refused with :class:`FileGroupNotFound` (no such group),
    :class:`~trio_streams.core.group_moves.PositionRefused` (a Redis entry id, no stream named
    where several are read, a position past what the file holds),
    :class:`~trio_streams.file.group_store.GroupLockedError` while a member is live (its process
    holds its life lock and its lease has not run out), a dry run included, and
    :class:`~trio_streams.file.group_store.GroupStateError` for a state that cannot be read or
    is of another file. Refused, nothing is changed. The ``skipped`` or ``replayed`` count of
    the :class:`~trio_streams.core.group_moves.GroupMove` is of the group's messages between the
    old position and the new one; ``pending`` is what members hold.
    """
    path = os.fspath(path)
    store = _existing(path, group)
    try:
        with store.locked_sync():
            state = _load(store, path)
            with FileReader(path, keys=state.keys, on_eos="include") as reader:
                _check_file(state, reader.header.created_at_ms, store)
                _refuse_live(store, state, "a move")
                target = _seek(reader, state, position, path, group)
                move = _describe_move(reader, state, path, group, target, moved=not dry_run)
            if not dry_run:
                _set_cursors(state, target)
                store.save(state, sync=True)
                store.ring()
    finally:
        store.close()
    return move


def reset_group(
    path: str | os.PathLike[str], group: str, position: Position | None = None
) -> GroupReset:
    """Move ``group`` of the stream file at ``path`` to ``position`` (None: where it stands,
    its first unsettled message) and forget what it held: the messages its members took and
    did not settle (from the new position on they are delivered again), the retries that wait
    (never run), and its members, which must all be gone (no process holds a member's life
    lock: :class:`~trio_streams.file.group_store.GroupLockedError` otherwise). Their run journals
    are removed with them. Refused as :func:`move_group` is otherwise; refused, nothing is
    changed. A state that cannot be read cannot be reset: :func:`delete_group` removes it."""
    path = os.fspath(path)
    store = _existing(path, group)
    try:
        with store.locked_sync():
            state = _load(store, path, resetting=True)
            with FileReader(path, keys=state.keys, on_eos="include") as reader:
                _check_file(state, reader.header.created_at_ms, store)
                _refuse_running(store, state.members, "a reset")
                if position is None:
                    target = max(state.position(), HEADER_SIZE)
                else:
                    target = _seek(reader, state, position, path, group)
                move = _describe_move(reader, state, path, group, target, moved=True)
            gone = tuple(sorted(state.members))
            reset = GroupReset(move, state.held(), len(state.delayed), gone)
            _set_cursors(state, target)
            state.batches.clear()
            state.delayed.clear()
            state.members.clear()
            store.save(state, sync=True)
            for member in _member_files(store):
                store.remove_member_files(member)
            store.ring()
    finally:
        store.close()
    return reset


def delete_group(path: str | os.PathLike[str], group: str) -> None:
    """Remove ``group`` of the stream file at ``path``: the files it keeps in its directory
    (its state, lock, bell, and its members' life locks and run journals), then the directory.
    Anything else found there is left, and said (a
    :class:`~trio_streams.file.errors.StreamFileError` raised once the group's own files are
    gone). The group starts anew at its next member's start, as a group never seen. Its state
    need not be readable.

    Refused with :class:`~trio_streams.file.group_store.GroupLockedError` while a member's
    process runs (holds its life lock), and with
    :class:`FileGroupNotFound` if there is no such group."""
    path = os.fspath(path)
    store = _existing(path, group)
    try:
        with store.locked_sync():
            members = _member_files(store)
            _refuse_running(store, members, "deleting it")
            for name in _GROUP_FILES[:3]:  # the state first: from here on the group is gone
                _unlink(os.path.join(store.directory, name))
            for member in members:
                if store.member_alive(member):
                    raise GroupLockedError(
                        f"member {member!r} of group {group!r} started while the group was "
                        "being deleted; its state is gone, its directory stays",
                        path=path,
                    )
                store.remove_member_files(member)
            for name in _GROUP_FILES[3:]:
                _unlink(os.path.join(store.directory, name))
            left = _remove_directories(store)
    finally:
        store.close()
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        raise StreamFileError(
            f"group {group!r} is deleted, but its directory {store.directory} holds files that "
            f"are not the group's ({shown}): they are left as they are",
            path=path,
        )


# ---- the parts ---------------------------------------------------------------------------------


def _existing(path: str, group: str) -> GroupStore:
    """The store of ``group``; :class:`FileGroupNotFound` naming the groups there are, if none
    (:class:`~trio_streams.file.errors.StreamFileNotFoundError` if there is no file either)."""
    store = GroupStore(path, group)
    if not os.path.isdir(store.directory):
        if not os.path.lexists(path):
            raise StreamFileNotFoundError("no such stream file", path=path)
        names = ", ".join(repr(name) for name in _group_names(path)) or "none"
        raise FileGroupNotFound(f"{path} has no consumer group {group!r} (its groups: {names})")
    return store


def _load(store: GroupStore, path: str, *, resetting: bool = False) -> GroupState:
    try:
        state = store.load()
    except GroupStateError as exc:
        if not resetting:
            raise
        raise GroupStateError(f"{exc.reason}, and cannot be reset", path=exc.path) from None
    if state is None:
        raise FileGroupNotFound(
            f"consumer group {store.group!r} of {path} has no state yet (being created, or "
            "what a cut-short delete left)"
        )
    return state


def _check_file(state: GroupState, created_at_ms: int, store: GroupStore) -> None:
    """Refuse a state written for another file of the same name (the file was replaced)."""
    if state.file_created_at_ms != created_at_ms:
        raise GroupStateError(
            f"the state of group {store.group!r} is of another file (created at "
            f"{state.file_created_at_ms} ms; this one was created at {created_at_ms} ms)",
            path=store.directory,
        )


def _refuse_live(store: GroupStore, state: GroupState, what: str) -> None:
    """Refuse while a member is live: its process holds its life lock and its lease runs."""
    now_ms = int(time.time() * 1000)
    live = [
        member
        for member in sorted(state.members.values(), key=lambda member: member.id)
        if member.lease_until_ms > now_ms and store.member_alive(member.id)
    ]
    if live:
        shown = ", ".join(f"{m.id!r} (pid {m.pid} on {m.host})" for m in live[:5])
        more = f" and {len(live) - 5} more" if len(live) > 5 else ""
        raise GroupLockedError(
            f"group {store.group!r} has live members: {shown}{more}; {what} needs them stopped",
            path=store.stream_path,
        )


def _refuse_running(store: GroupStore, members: Iterable[str], what: str) -> None:
    """Refuse while a member's process runs (holds its life lock), whatever its lease says."""
    running = sorted({member for member in members if store.member_alive(member)})
    running += [m for m in _member_files(store) if m not in running and store.member_alive(m)]
    if running:
        shown = ", ".join(repr(member) for member in running[:5])
        more = f" and {len(running) - 5} more" if len(running) > 5 else ""
        raise GroupLockedError(
            f"group {store.group!r} has running members: {shown}{more}; {what} needs every "
            "member process stopped",
            path=store.stream_path,
        )


def _member_files(store: GroupStore) -> list[str]:
    """The members that left a life lock or a run journal in the group's directory."""
    try:
        names = os.listdir(store.members_directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise GroupStateError(
            f"cannot list the members of group {store.group!r}: {exc.strerror}",
            path=store.members_directory,
        ) from exc
    found = {
        name[: -len(suffix)]
        for name in names
        for suffix in _MEMBER_SUFFIXES
        if name.endswith(suffix) and len(name) > len(suffix)
    }
    return sorted(found)


def _seek_key(position: Position, keys: Sequence[str], label: str) -> str | None:
    """The stream a seek to ``position`` reads (as a subscription's seek finds it)."""
    try:
        return seek_key(label, keys, position, streams="the group's streams", reader="the group")
    except SeekRefused as exc:
        raise PositionRefused(str(exc)) from None


def _seek(reader: FileReader, state: GroupState, position: Position, path: str, group: str) -> int:
    label = f"group {group!r} of {path}"
    key = _seek_key(position, state.keys, label)
    try:
        return reader.seek(position, key=key, shard=position.shard)
    except SeekError as exc:
        raise PositionRefused(f"{label}: {exc.reason}") from None


def _set_cursors(state: GroupState, offset: int) -> None:
    for key in {*state.keys, *state.cursors}:
        state.cursors[key] = offset


def _describe_move(
    reader: FileReader, state: GroupState, path: str, group: str, target: int, *, moved: bool
) -> GroupMove:
    """The record of moving ``state`` from its position to ``target``: the group's messages
    between the two, counted with ``reader`` (which reads the group's keys)."""
    was = max(state.position(), HEADER_SIZE)
    low, high = sorted((was, target))
    count, first, last = 0, None, None
    reader.rewind_to(low)
    while reader.offset < high:
        messages = reader.read_messages(_BATCH)
        for message in messages:
            if message.offset >= high:
                break
            if message.is_eos:
                continue
            count += 1
            last = f"{message.stream_key}:{message.seq}"
            first = first or last
        if not messages and _at_end(reader):
            break
    return GroupMove(
        stream=path,
        group=group,
        was=_position_text(reader, was),
        now=_position_text(reader, target),
        skipped=count if target > was else 0,
        replayed=count if target < was else 0,
        first=first,
        last=last,
        entries_read=None,
        pending=state.held(),
        consumers=tuple(sorted(state.members)),
        moved=moved,
    )


def _position_text(reader: FileReader, offset: int) -> str:
    """``"orders:41"``: the first group message at or after ``offset``; ``"byte N"`` if none."""
    reader.rewind_to(offset)
    while True:
        messages = [m for m in reader.read_messages(1) if not m.is_eos]
        if messages:
            return f"{messages[0].stream_key}:{messages[0].seq}"
        if _at_end(reader):
            return f"byte {offset}"


def _at_end(reader: FileReader) -> bool:
    """Whether ``reader`` (which reads through end-of-stream messages) read all there is."""
    return reader.at_eof or reader.eos is not None


def _remove_directories(store: GroupStore) -> list[str]:
    """Remove the group's directories, if empty now; the names of what else is there."""
    left = []
    for directory in (store.members_directory, store.directory):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:
            with contextlib.suppress(OSError):
                inside = sorted(os.listdir(directory))
                prefix = "members/" if directory == store.members_directory else ""
                left += [prefix + name for name in inside if name != "members"]
    return left


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, StreamFileError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    return str(exc)
