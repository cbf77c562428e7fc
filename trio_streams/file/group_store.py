"""Where a consumer group of a stream file keeps its state, and how it is read and written.

``<file>.groups/<group>/`` holds (see :mod:`.group_state` for what the state means):

- ``lock``: ``flock``-ed for every transaction (read the state, change it, write it), which
  lasts microseconds to a few milliseconds. A member never waits for it blocked: it tries, and
  sleeps a little if another process holds it.
- ``state.0.json`` and ``state.1.json``: the state, in two slots. Each transaction writes the
  whole state into the slot the older one is in (its ``version``, which leads the text, says
  which is newer), so a process killed in the middle of a write leaves the newer slot whole:
  a slot that does not decode is passed over for the other one, the last whole transaction
  (at worst the group goes back one transaction: messages handled again, never skipped). Writing
  in place, not a temporary file renamed, keeps a transaction to a few system calls. **fsync
  policy**: the transaction that creates a group (written whole, synced, then renamed into its
  slot), one that moves or resets it, and a member's last one are synced; the others are not. A
  process crash loses nothing (the page cache has every write); a power loss can take the group
  back to an earlier state, whose messages are then handled again (at-least-once). If neither
  slot decodes (both damaged, hand-edited) the group is refused with
  :class:`GroupStateError`, naming its directory: never read as an empty group.
- ``bell``: touched when something others wait for appears (work handed back, a retry due);
  members watch it with inotify, as they watch the stream file.
- ``members/<id>.lock``: ``flock``-ed by a live member for its whole life. The kernel drops a
  dead process's locks however it died, so another member that can take the lock knows the
  member is dead, at once, without waiting for its lease.
- ``members/<id>.runs``: the member's run journal (:class:`RunJournal`).

**A local filesystem only.** ``flock`` on NFS, SMB, FUSE and other network or user-space
filesystems is emulated, partial or absent, and a group there could hand one message to two
members. :func:`check_local_filesystem` reads the type of the filesystem that holds the state
from ``/proc/self/mountinfo`` and refuses those with :class:`UntrustedFilesystemError`
(``TRIO_STREAMS_TRUST_FILESYSTEM=1`` accepts it anyway). Where there is no ``/proc`` (not
Linux) nothing is checked.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import re
import struct
import time
from collections.abc import Iterator

import msgspec
import trio

from ..core.errors import ConfigurationError
from .errors import StreamFileError
from .group_state import GroupState, decode_state, encode_state

__all__ = [
    "GroupLockedError",
    "GroupStateError",
    "GroupStore",
    "RunJournal",
    "UntrustedFilesystemError",
    "check_group_name",
    "check_local_filesystem",
    "groups_directory",
]

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
#: Filesystems whose locks cannot be trusted across processes (a ``fuse.*`` type is refused too).
UNTRUSTED_FILESYSTEMS = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "afs",
        "gfs2", "ocfs2", "sshfs", "davfs", "ncpfs", "coda", "vboxsf", "vmhgfs",
    }
)  # fmt: skip
TRUST_VARIABLE = "TRIO_STREAMS_TRUST_FILESYSTEM"


class GroupStateError(StreamFileError):
    """A group's state cannot be used: unreadable, of another file, or of other keys."""

    advice = (
        "the group's state beside the file is kept, untouched: `trio-streams file stat FILE` "
        "shows it, `trio-streams file group delete FILE GROUP` removes it (the group then "
        "starts anew)"
    )


class GroupLockedError(GroupStateError):
    """A group operation that needs its members stopped found one live."""

    advice = (
        "stop the group's members first: `trio-streams file stat FILE` lists them (a member "
        "whose process is gone never counts as live)"
    )


class UntrustedFilesystemError(StreamFileError, ConfigurationError):
    """The group's state would live on a filesystem whose locks cannot be trusted."""


def check_group_name(name: object) -> str:
    """A group's name becomes a directory name: 1-200 characters of ``[A-Za-z0-9._-]``, not
    starting with ``.``."""
    if not isinstance(name, str) or len(name) > 200 or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"group name {name!r} must be 1-200 characters of [A-Za-z0-9._-], not starting with '.'"
        )
    return name


def groups_directory(stream_path: str) -> str:
    """Where the groups of the stream file at ``stream_path`` keep their state."""
    return stream_path + ".groups"


def filesystem_type(path: str, mountinfo: str | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (which must exist), from ``mountinfo`` (the
    text of ``/proc/self/mountinfo``, read when not given); None where that cannot be read."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as file:
                mountinfo = file.read()
        except OSError:
            return None
    lines = mountinfo.splitlines()
    target = os.path.realpath(path)
    best, best_type = -1, None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= best:
            kinds = right.split()
            best, best_type = len(mount), kinds[0] if kinds else None
    return best_type


def check_local_filesystem(path: str, mountinfo: str | None = None) -> None:
    """Refuse (:class:`UntrustedFilesystemError`) a group state directory at ``path`` on a
    filesystem whose locks cannot be trusted; see the module docstring."""
    if os.environ.get(TRUST_VARIABLE) == "1":
        return
    kind = filesystem_type(path, mountinfo)
    if kind is None:
        return
    if kind in UNTRUSTED_FILESYSTEMS or kind.startswith(("fuse", "nfs")):
        raise UntrustedFilesystemError(
            f"a consumer group keeps its state under flock, which a {kind} filesystem does not "
            f"guarantee between processes: keep the stream file on a local filesystem (set "
            f"{TRUST_VARIABLE}=1 to accept this one anyway)",
            path=path,
        )


class GroupStore:
    """The directory of one group of one stream file (see the module docstring)."""

    def __init__(self, stream_path: str, group: str) -> None:
        self.group = check_group_name(group)
        self.stream_path = stream_path
        self.directory = os.path.join(groups_directory(stream_path), group)
        #: The state's two slots: each write goes to the one the older state is in.
        self.slot_paths = (
            os.path.join(self.directory, "state.0.json"),
            os.path.join(self.directory, "state.1.json"),
        )
        self.members_directory = os.path.join(self.directory, "members")
        self.bell_path = os.path.join(self.directory, "bell")
        self._lock_fd = -1
        self._slots: list[int] = []
        #: The state as last read or written.
        self._cached: GroupState | None = None

    def exists(self) -> bool:
        return os.path.exists(self.slot_paths[0])

    def create_directory(self) -> None:
        """Make the directories (checking the filesystem first) and the bell."""
        try:
            os.makedirs(self.members_directory, exist_ok=True)
        except OSError as exc:
            raise GroupStateError(
                f"cannot make the state directory of group {self.group!r}: {exc.strerror}",
                path=self.directory,
            ) from exc
        check_local_filesystem(self.directory)
        if not os.path.exists(self.bell_path):
            with open(self.bell_path, "ab"):
                pass

    # ---- the lock ----------------------------------------------------------------------------

    def _open_lock(self) -> int:
        if self._lock_fd < 0:
            try:
                self._lock_fd = os.open(
                    os.path.join(self.directory, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                )
            except OSError as exc:
                raise GroupStateError(
                    f"cannot open the lock of group {self.group!r}: {exc.strerror}",
                    path=self.directory,
                ) from exc
        return self._lock_fd

    def try_lock(self) -> bool:
        """Take the group's lock if nobody holds it; False if someone does."""
        try:
            fcntl.flock(self._open_lock(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock(self) -> None:
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    async def lock(self) -> None:
        """Take the group's lock, sleeping 0.5 ms doubling to 50 ms while another process holds
        it (never blocking Trio's thread). Cancelled, it holds nothing."""
        delay = 0.0005
        while not self.try_lock():
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            self.unlock()
            raise

    def load_outside(self) -> GroupState | None:
        """The state, for a reader outside the group (a tool): under the lock when it can be
        had within about a second (a member holds it for microseconds), else without it; a
        slot being rewritten meanwhile does not decode, and the other one is read."""
        for _ in range(100):
            if self.try_lock():
                try:
                    return self.load()
                finally:
                    self.unlock()
            time.sleep(0.01)
        return self.load()

    @contextlib.contextmanager
    def locked_sync(self) -> Iterator[None]:
        """Hold the lock for a synchronous block, waiting for it blocked (tools, not apps)."""
        fcntl.flock(self._open_lock(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            self.unlock()

    def close(self) -> None:
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            os.close(fd)
        slots, self._slots = self._slots, []
        for fd in slots:
            os.close(fd)
        self._cached = None

    # ---- the state ----------------------------------------------------------------------------

    def _slot_fds(self) -> list[int]:
        if not self._slots:
            try:
                self._slots = [os.open(path, os.O_RDWR | os.O_CLOEXEC) for path in self.slot_paths]
            except OSError as exc:
                for fd in self._slots:
                    os.close(fd)
                self._slots = []
                raise GroupStateError(
                    f"cannot open the state of group {self.group!r}: {exc.strerror}",
                    path=self.directory,
                ) from exc
        return self._slots

    def load(self) -> GroupState | None:
        """The state (under the lock), or None if the group has none yet.

        Both slots are read (a few bytes each when nothing changed: the version leads the
        text), and the newer one that decodes wins. A slot cut by a writer that died mid-write
        does not decode, and the other one, the last whole transaction, is used; if neither
        decodes, :class:`GroupStateError`."""
        if not self._slots and not os.path.exists(self.slot_paths[1]):
            if os.path.exists(self.slot_paths[0]):
                raise GroupStateError(
                    f"the state of group {self.group!r} has lost its second slot "
                    f"({self.slot_paths[1]}); it is left as it is",
                    path=self.slot_paths[0],
                )
            return None
        fds = self._slot_fds()
        cached = self._cached
        found: list[tuple[int, int]] = []
        for slot, fd in enumerate(fds):
            match = _VERSION.match(os.pread(fd, 32, 0))
            if match is not None:
                found.append((int(match.group(1)), slot))
        found.sort(reverse=True)
        if cached is not None and found and found[0] == (cached.version, cached.version % 2):
            return cached
        errors = []
        for version, slot in found:
            try:
                state = decode_state(_read_all(fds[slot]))
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                errors.append(f"{os.path.basename(self.slot_paths[slot])}: {exc}")
                continue
            if state.version != version or version % 2 != slot:
                errors.append(f"{os.path.basename(self.slot_paths[slot])}: not its version")
                continue
            self._cached = state
            return state
        raise GroupStateError(
            f"the state of group {self.group!r} is unreadable in both of its slots "
            f"({'; '.join(errors) or 'neither holds a state'}); it is left as it is",
            path=self.directory,
        )

    def save(self, state: GroupState, *, sync: bool = False) -> None:
        """Write the state (under the lock) into the slot the older one is in, so the newer
        one stays whole until this one is (see the module docstring for when it is synced).
        A group's first state is written whole under a temporary name and renamed into its
        slot, so a group exists only once it has a state."""
        state.version += 1
        data = encode_state(state)
        slot = state.version % 2
        try:
            if not self._slots and not os.path.exists(self.slot_paths[1]):
                self._create(state, data)
            else:
                fd = self._slot_fds()[slot]
                written = 0
                while written < len(data):
                    written += os.pwrite(fd, data[written:], written)
                os.ftruncate(fd, len(data))
                if sync:
                    os.fsync(fd)
        except OSError as exc:
            raise GroupStateError(
                f"cannot write the state of group {self.group!r}: {exc.strerror}",
                path=self.slot_paths[slot],
            ) from exc
        self._cached = state

    def _create(self, state: GroupState, data: bytes) -> None:
        if state.version % 2 != 1:  # the first state goes to slot 1; slot 0 starts empty
            state.version += 1
            data = encode_state(state)
        with open(self.slot_paths[0], "wb"):
            pass
        temp = self.slot_paths[1] + ".tmp"
        with open(temp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, self.slot_paths[1])
        _sync_directory(self.directory)

    def ring(self) -> None:
        """Tell the members watching the bell that something changed."""
        with contextlib.suppress(OSError):
            os.utime(self.bell_path)

    # ---- members -----------------------------------------------------------------------------

    def member_path(self, member: str, suffix: str) -> str:
        return os.path.join(self.members_directory, member + suffix)

    def take_member_lock(self, member: str) -> int:
        """Hold ``member``'s life lock (see the module docstring); the descriptor."""
        fd = os.open(self.member_path(member, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh name: nobody else holds it
        return fd

    def member_alive(self, member: str) -> bool:
        """Whether ``member``'s process still holds its life lock (a missing lock file: dead)."""
        try:
            fd = os.open(self.member_path(member, ".lock"), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops a lock it took
        return False

    def remove_member_files(self, member: str) -> None:
        """Remove a gone member's journal and lock (its records are in the state by now)."""
        for suffix in (".runs", ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.member_path(member, suffix))


_VERSION = re.compile(rb'\{"version":(\d+),')


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, at = [], 0
    while at < size:
        chunk = os.pread(fd, size - at, at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def _sync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RunJournal:
    """A member's handler runs and settles, written to shared memory as they happen.

    Counting attempts as handler runs means recording each run before its handler starts; a
    write to the state per message would cost a transaction per message. The journal is a file
    mapped ``MAP_SHARED``: a store into it is in the page cache the instant it is made and stays
    there when the process dies, however it dies (a machine crash loses it: runs then go
    uncounted, never counted twice). The member folds its records into the state at each of its
    transactions and starts the journal over; a member that takes over from a dead one folds the
    dead one's records first, so the dead member's runs are charged and what it settled is not
    handed out again.

    Layout (little-endian): ``b"TSGRUN02"``, then records of 16 bytes from byte 64: the
    message's offset (u64, never 0) and a value (i64: its runs so far, at least 1, or -1 once
    settled; never 0). Records are read up to the first one with a zero in either field: a
    record a death cut in half, or the end. Starting over zeroes what was used.
    """

    MAGIC = b"TSGRUN02"
    HEADER = 64
    RECORD = 16
    SLOTS = 32768
    _record = struct.Struct("<Qq")

    def __init__(self, path: str) -> None:
        size = self.HEADER + self.SLOTS * self.RECORD
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._map[: len(self.MAGIC)] = self.MAGIC
        #: Byte where the next record goes.
        self._at = self.HEADER
        self._end = size
        self._pack = self._record.pack_into

    def record(self, offset: int, value: int) -> bool:
        """Record ``value`` (runs so far, or -1: settled) for the message at ``offset``; False
        when the journal is full (fold it, then record again)."""
        at = self._at
        if at >= self._end:
            return False
        self._pack(self._map, at, offset, value)
        self._at = at + 16
        return True

    @property
    def count(self) -> int:
        return (self._at - self.HEADER) // self.RECORD

    def records(self) -> list[tuple[int, int]]:
        return _records(self._map)

    def reset(self) -> None:
        """Start over (after the records were folded into the state)."""
        used = self._at - self.HEADER
        if used:
            self._map[self.HEADER : self._at] = bytes(used)
            self._at = self.HEADER

    def close(self) -> None:
        if not self._map.closed:
            self._map.close()

    @classmethod
    def read(cls, path: str) -> list[tuple[int, int]]:
        """The records of a journal another (dead) member left; none if it has no journal or
        one that is not whole."""
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            return []
        if len(data) < cls.HEADER or data[: len(cls.MAGIC)] != cls.MAGIC:
            return []
        return _records(data)


def _records(data: bytes | mmap.mmap) -> list[tuple[int, int]]:
    unpack = RunJournal._record.unpack_from
    out = []
    for at in range(RunJournal.HEADER, len(data) - RunJournal.RECORD + 1, RunJournal.RECORD):
        offset, value = unpack(data, at)
        if not offset or not value:
            break
        out.append((offset, value))
    return out
