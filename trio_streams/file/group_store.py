"""Where a consumer group of a stream file keeps its state, and how it is read and written.

``<file>.groups/<group>/`` holds (see :mod:`.group_state` for what the state means):

- ``lock``: ``flock``-ed for every transaction (read the state, change it, write it), which
  lasts microseconds to a few milliseconds. A member never waits for it blocked: it tries, and
  sleeps a little if another process holds it.
- ``state.json``: the state, replaced whole at each transaction by writing a temporary file and
  renaming it over the old one, so a process killed at any instant leaves the old state or the
  new one. **fsync policy**: a transaction that creates, moves, resets or leaves a group, and a
  member's last one, is synced (the file, then the directory); the others are not. A process
  crash loses nothing (the page cache has every write); a power loss can take the group back to
  an earlier state, whose messages are then handled again (at-least-once), never forward past
  an unsettled message. A state file that does not decode (cut, zeroed, hand-edited) is
  refused with :class:`GroupStateError`, naming the file: never read as an empty group.
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

    advice = "stop the group's members first (or wait for a killed one's lease to end)"


class UntrustedFilesystemError(StreamFileError, ConfigurationError):
    """The group's state would live on a filesystem whose locks cannot be trusted."""


def check_group_name(name: object) -> str:
    """A group's name becomes a directory name: 1-200 characters of ``[A-Za-z0-9._-]``, not
    starting with ``.``."""
    if not isinstance(name, str) or len(name) > 200 or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"group name {name!r} must be 1-200 characters of [A-Za-z0-9._-], not starting "
            "with '.'"
        )
    return name


def groups_directory(stream_path: str) -> str:
    """Where the groups of the stream file at ``stream_path`` keep their state."""
    return stream_path + ".groups"


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding ``path`` (which must exist), from
    ``/proc/self/mountinfo``; None where that cannot be read."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
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
            best, best_type = len(mount), (right.split() or [None])[0]
    return best_type


def check_local_filesystem(path: str) -> None:
    """Refuse (:class:`UntrustedFilesystemError`) a group state directory at ``path`` on a
    filesystem whose locks cannot be trusted; see the module docstring."""
    if os.environ.get(TRUST_VARIABLE) == "1":
        return
    kind = filesystem_type(path)
    if kind is None:
        return
    if kind in UNTRUSTED_FILESYSTEMS or kind.startswith("fuse") or kind.startswith("nfs"):
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
        self.state_path = os.path.join(self.directory, "state.json")
        self.members_directory = os.path.join(self.directory, "members")
        self.bell_path = os.path.join(self.directory, "bell")
        self._lock_fd = -1
        #: The state as last read or written, and the file's identity then.
        self._cached: tuple[tuple[int, int, int], GroupState] | None = None

    def exists(self) -> bool:
        return os.path.exists(self.state_path)

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

    # ---- the state ---------------------------------------------------------------------------

    def load(self) -> GroupState | None:
        """The state (under the lock), or None if the group has none yet. Read again only when
        the file changed since it was last read or written by this store."""
        try:
            fd = os.open(self.state_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._cached = None
            return None
        except OSError as exc:
            raise GroupStateError(f"cannot read: {exc.strerror}", path=self.state_path) from exc
        try:
            info = os.fstat(fd)
            identity = (info.st_ino, info.st_mtime_ns, info.st_size)
            cached = self._cached
            if cached is not None and cached[0] == identity:
                return cached[1]
            data = b""
            while len(data) < info.st_size:
                chunk = os.read(fd, info.st_size - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        try:
            state = decode_state(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise GroupStateError(
                f"the state of group {self.group!r} is unreadable ({exc}); it is left as it is",
                path=self.state_path,
            ) from None
        self._cached = (identity, state)
        return state

    def save(self, state: GroupState, *, sync: bool = False) -> None:
        """Replace the state (under the lock): temporary file, then rename (see the module
        docstring for when it is synced)."""
        state.version += 1
        data = encode_state(state)
        temp = self.state_path + ".tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if sync:
                    os.fsync(fd)
                info = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.state_path)
            if sync:
                _sync_directory(self.directory)
        except OSError as exc:
            raise GroupStateError(
                f"cannot write the state of group {self.group!r}: {exc.strerror}",
                path=self.state_path,
            ) from exc
        self._cached = ((info.st_ino, info.st_mtime_ns, info.st_size), state)

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
    delivered again.

    Layout (little-endian): ``b"TSGRUN01"``, then the record count (u64) at byte 8; records of
    16 bytes from byte 64: the message's offset (u64) and a value (i64): its runs so far, or -1
    once settled. The count is written after the record, so a record a death cut in half is
    never read.
    """

    MAGIC = b"TSGRUN01"
    HEADER = 64
    RECORD = 16
    SLOTS = 32768
    _record = struct.Struct("<Qq")
    _count = struct.Struct("<Q")

    def __init__(self, path: str) -> None:
        size = self.HEADER + self.SLOTS * self.RECORD
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._map[: len(self.MAGIC)] = self.MAGIC
        self.count = 0
        self._pack = self._record.pack_into
        self._pack_count = self._count.pack_into

    def record(self, offset: int, value: int) -> bool:
        """Record ``value`` (runs so far, or -1: settled) for the message at ``offset``; False
        when the journal is full (fold it, then record again)."""
        count = self.count
        if count >= self.SLOTS:
            return False
        self._pack(self._map, self.HEADER + count * self.RECORD, offset, value)
        self.count = count + 1
        self._pack_count(self._map, 8, count + 1)
        return True

    @property
    def full(self) -> bool:
        return self.count >= self.SLOTS // 2

    def records(self) -> list[tuple[int, int]]:
        return _records(self._map, self.count)

    def reset(self) -> None:
        """Start over (after the records were folded into the state)."""
        self.count = 0
        self._pack_count(self._map, 8, 0)

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
        (count,) = cls._count.unpack_from(data, 8)
        count = min(count, (len(data) - cls.HEADER) // cls.RECORD)
        return _records(data, count)


def _records(data: bytes | mmap.mmap, count: int) -> list[tuple[int, int]]:
    unpack = RunJournal._record.unpack_from
    start, size = RunJournal.HEADER, RunJournal.RECORD
    return [unpack(data, start + i * size) for i in range(count)]
