"""Stream files and consumer-group states to run the group tools on, and member processes.

A state is built with :class:`GroupStore` and :class:`GroupState` directly (what a member would
write), on a file written by the package's writer. A member's liveness is a real process
holding its life lock: killed with SIGKILL, the kernel drops the lock.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from trio_streams.file.group_state import Delayed, GroupState, Member
from trio_streams.file.group_store import GroupStore
from trio_streams.file.writer import Receipt, StreamWriter

ROOT = Path(__file__).resolve().parents[2]
CREATED_AT_MS = 1_700_000_000_000

_MEMBER = """
import sys
from trio_streams.file.group_store import GroupStore
GroupStore(sys.argv[1], sys.argv[2]).take_member_lock(sys.argv[3])
print("ready", flush=True)
sys.stdin.read()
"""


def write_file(
    path: Path, keys: Sequence[str], count: int, *, payload_bytes: int = 0
) -> list[Receipt]:
    """``count`` messages, their keys taking turns in the order of ``keys`` (payloads padded
    to ``payload_bytes``)."""
    with StreamWriter(path, created_at_ms=CREATED_AT_MS) as writer:
        return [
            writer.publish(
                keys[n % len(keys)], f"m{n}".encode().ljust(payload_bytes, b"."), CREATED_AT_MS + n
            )
            for n in range(count)
        ]


def now_ms() -> int:
    return int(time.time() * 1000)


def member(name: str, *, lease_ms: int = 60_000, pid: int = 4242) -> Member:
    """A member whose lease runs ``lease_ms`` from now (negative: it ran out)."""
    return Member(id=name, pid=pid, host="here", joined_ms=0, lease_until_ms=now_ms() + lease_ms)


def save_group(
    path: Path,
    name: str,
    keys: Sequence[str],
    cursors: dict[str, int],
    *,
    ordered: bool = False,
    members: Sequence[Member] = (),
    delayed: Sequence[Delayed] = (),
    created_at_ms: int = CREATED_AT_MS,
) -> GroupState:
    """Write a group's state beside ``path``; the state (to add batches to, then save again
    with :func:`save_state`)."""
    state = GroupState(
        group=name,
        file_created_at_ms=created_at_ms,
        keys=list(keys),
        ordered=ordered,
        cursors=dict(cursors),
        delayed=list(delayed),
        members={m.id: m for m in members},
    )
    save_state(path, state)
    return state


def save_state(path: Path, state: GroupState) -> None:
    store = GroupStore(str(path), state.group)
    try:
        store.create_directory()
        with store.locked_sync():
            store.save(state, sync=True)
    finally:
        store.close()


def load_state(path: Path, name: str) -> GroupState:
    store = GroupStore(str(path), name)
    try:
        state = store.load()
    finally:
        store.close()
    assert state is not None
    return state


def state_bytes(path: Path, name: str) -> bytes:
    """Both slots of a group's state, as they are on disk."""
    directory = Path(f"{path}.groups") / name
    return b"".join((directory / f"state.{slot}.json").read_bytes() for slot in (0, 1))


def damage_state(directory: Path, data: bytes) -> None:
    """Write ``data`` over both slots of the state in ``directory``."""
    for slot in (0, 1):
        (directory / f"state.{slot}.json").write_bytes(data)


def damaged_state(directory: Path) -> bytes:
    """The bytes :func:`damage_state` wrote, if both slots still hold them."""
    first, second = ((directory / f"state.{slot}.json").read_bytes() for slot in (0, 1))
    assert first == second
    return first


class MemberProcess:
    """A process holding a member's life lock until it is killed."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL, and wait for the process to be gone (its locks with it)."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.returncode == -signal.SIGKILL


@contextmanager
def member_process(path: Path, group: str, name: str) -> Iterator[MemberProcess]:
    """A real process that holds member ``name``'s life lock of ``group`` once this yields."""
    process = subprocess.Popen(
        [sys.executable, "-c", _MEMBER, str(path), group, name],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n", "the member process died first"
        yield MemberProcess(process)
    finally:
        if process.returncode is None:
            process.kill()
            process.wait(timeout=30)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
