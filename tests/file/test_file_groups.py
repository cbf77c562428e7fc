"""Consumer groups on a stream file, in one process: members are subscriptions of apps served
side by side on one real file (the process tests start members in processes of their own)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from trio_streams import App, ConfigurationError, Context, Position, retry, retry_after
from trio_streams.file import FileBroker, FilePosition, FileStream, GroupLockedError
from trio_streams.file.group_state import Batch, GroupState, Member
from trio_streams.file.group_store import (
    GroupStateError,
    GroupStore,
    RunJournal,
    UntrustedFilesystemError,
    check_local_filesystem,
    filesystem_type,
)
from trio_streams.file.reader import FileReader

from ..support import serving
from .apps import Watch, refused_at_start, run_to_end, write_numbers


def member_app(
    path: Path, handler: Any, stream: FileStream, *, name: str = "m", **options: Any
) -> App:
    app = App(name)
    broker = app.broker(FileBroker(path))
    broker.subscriber(stream, name="sub", **options)(handler)
    return app


def state_of(path: Path, group: str = "g") -> dict[str, Any]:
    """The newer of the group's two state slots."""
    slots = []
    for slot in (0, 1):
        text = (Path(f"{path}.groups") / group / f"state.{slot}.json").read_text()
        if text:
            slots.append(json.loads(text))
    newest: dict[str, Any] = max(slots, key=lambda state: state["version"])
    return newest


def offsets_of(path: Path, key: str = "s") -> list[int]:
    with FileReader(path, keys=[key]) as reader:
        return [message[5] for message in reader]


# ---- sharing ---------------------------------------------------------------------------------


async def test_members_share_the_messages_each_handed_to_one_member(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 600)
    handled: Counter[int] = Counter()
    by_member: Counter[str] = Counter()

    def handler(member: str) -> Any:
        async def handle(n: int) -> None:
            handled[n] += 1
            by_member[member] += 1
            await trio.lowlevel.checkpoint()

        return handle

    stream = FileStream("s").replay().group("g", claim=32)
    async with trio.open_nursery() as nursery:
        for member in "abc":
            app = member_app(path, handler(member), stream, name=member)
            nursery.start_soon(run_to_end, app)
    assert sorted(handled) == list(range(1, 601))
    assert set(handled.values()) == {1}
    assert len(by_member) == 3 and min(by_member.values()) > 0


async def test_a_replay_group_ends_when_the_group_has_nothing_left(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 50)
    seen: list[int] = []

    async def handle(n: int) -> None:
        seen.append(n)

    await run_to_end(member_app(path, handle, FileStream("s").replay().group("g")))
    assert seen == list(range(1, 51))
    state = state_of(path)
    assert state["batches"] == [] and state["members"] == {}
    assert set(state["cursors"].values()) == {path.stat().st_size}


async def test_a_restart_resumes_where_the_group_stopped(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 200)
    first: list[int] = []
    watch = Watch()

    async def stop_after_60(n: int) -> None:
        first.append(n)
        if len(first) == 60:
            (await watch.running()).request_stop()

    stream = FileStream("s").replay().group("g", claim=16)
    await watch.run_to_end(member_app(path, stop_after_60, stream))
    second: list[int] = []

    async def handle(n: int) -> None:
        second.append(n)

    await run_to_end(member_app(path, handle, stream))
    assert sorted(first + second) == list(range(1, 201))  # nothing lost, nothing run twice


async def test_a_new_group_starts_at_the_tip(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 10)
    seen: list[int] = []
    got = trio.Event()

    async def handle(n: int) -> None:
        seen.append(n)
        got.set()

    app = member_app(path, handle, FileStream("s").group("g"))
    async with serving(app):
        write_numbers(path, 1, first=11)
        with trio.fail_after(10):
            await got.wait()
    assert seen == [11]


async def test_start_at_sets_a_new_groups_first_position(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 20)
    seen: list[int] = []

    async def handle(n: int) -> None:
        seen.append(n)

    stream = FileStream("s", start_at=FilePosition.sequence(15)).replay().group("g")
    await run_to_end(member_app(path, handle, stream))
    assert seen == [15, 16, 17, 18, 19, 20]


# ---- outcomes --------------------------------------------------------------------------------


async def test_retry_runs_the_message_again_with_the_next_attempt_and_appends_no_copy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    attempts: list[tuple[int, int]] = []

    async def handle(n: int, ctx: Context) -> Any:
        attempts.append((n, ctx.attempt))
        return retry() if n == 2 and ctx.attempt < 3 else None

    await run_to_end(member_app(path, handle, FileStream("s").replay().group("g")))
    assert sorted(attempts) == [(1, 1), (2, 1), (2, 2), (2, 3), (3, 1)]
    # The stream file itself is never rewritten, and a retry appends nothing to it.
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


async def test_retry_after_is_kept_in_the_group_state_until_due(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 2)
    attempts: list[tuple[int, int]] = []
    delayed: list[dict[str, Any]] = []

    async def handle(n: int, ctx: Context) -> Any:
        attempts.append((n, ctx.attempt))
        if n == 1 and ctx.attempt == 1:
            return retry_after(0.3)
        if n == 2:
            delayed.extend(state_of(path)["delayed"])
        return None

    await run_to_end(member_app(path, handle, FileStream("s").replay().group("g", claim=1)))
    assert attempts == [(1, 1), (2, 1), (1, 2)]
    [kept] = delayed
    assert kept["offset"] == offsets_of(path)[0] and kept["runs"] == 1


async def test_retry_after_survives_a_restart_of_the_group(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 1)
    watch = Watch()

    async def delay_then_stop(n: int) -> Any:
        (await watch.running()).request_stop()
        return retry_after(0.2)

    stream = FileStream("s").replay().group("g")
    await watch.run_to_end(member_app(path, delay_then_stop, stream))
    assert len(state_of(path)["delayed"]) == 1
    attempts: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        attempts.append(ctx.attempt)

    await run_to_end(member_app(path, handle, stream))
    assert attempts == [2]
    assert state_of(path)["delayed"] == []


async def test_max_attempts_dead_letters_after_that_many_handler_runs(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 2)
    runs: Counter[int] = Counter()

    async def handle(n: int) -> None:
        runs[n] += 1
        if n == 2:
            raise ValueError("no")

    app = member_app(
        path,
        handle,
        FileStream("s").replay().group("g"),
        max_attempts=3,
        dead_letter="s.dead",
        retry_delay=0,
    )
    await run_to_end(app)
    assert runs == {1: 1, 2: 3}
    with FileReader(path, keys=["s.dead"]) as reader:
        [letter] = list(reader)
    assert letter[0] == "s.dead"


# ---- members that go -------------------------------------------------------------------------


def _dead_member(
    path: Path, group: str, offsets: list[int], ran: dict[int, int], settled: list[int]
) -> None:
    """Leave the state of a member that died holding a batch of ``offsets``: its journal says
    which ran (and how often) and which it settled; its life lock is not held."""
    store = GroupStore(str(path), group)
    store.create_directory()
    with FileReader(path) as reader:
        created = reader.header.created_at_ms
    end = offsets[-1] + 1
    state = GroupState(
        group=group,
        file_created_at_ms=created,
        keys=["s"],
        ordered=False,
        cursors={"s": os.path.getsize(path)},
        members={"dead": Member(id="dead", pid=1, host="h", joined_ms=0, lease_until_ms=2**62)},
    )
    state.batches.append(
        Batch(id=1, member="dead", keys=["s"], start=offsets[0], end=end, count=len(offsets))
    )
    state.next_batch = 2
    with store.locked_sync():
        store.save(state)
    journal = RunJournal(store.member_path("dead", ".runs"))
    for offset, runs in ran.items():
        for run in range(1, runs + 1):
            journal.record(offset, run)
    for offset in settled:
        journal.record(offset, -1)
    journal.close()
    store.close()


async def test_a_dead_members_work_goes_to_another_charged_only_the_runs_it_made(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 4)
    offsets = offsets_of(path)
    # It settled 1, ran 2 twice (the second run died with it), never started 3 and 4.
    _dead_member(path, "g", offsets, ran={offsets[0]: 1, offsets[1]: 2}, settled=[offsets[0]])
    attempts: list[tuple[int, int]] = []

    async def handle(n: int, ctx: Context) -> None:
        attempts.append((n, ctx.attempt))

    with trio.fail_after(10):  # at once, not after the dead member's (endless) lease
        await run_to_end(member_app(path, handle, FileStream("s").replay().group("g")))
    assert sorted(attempts) == [(2, 3), (3, 1), (4, 1)]
    assert not (Path(f"{path}.groups") / "g" / "members" / "dead.runs").exists()


async def test_a_member_whose_lease_ran_out_loses_its_claims(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    offsets = offsets_of(path)
    _dead_member(path, "g", offsets, ran={}, settled=[])
    store = GroupStore(str(path), "g")
    alive = store.take_member_lock("dead")  # its process lives on, frozen: it renews nothing
    with store.locked_sync():
        state = store.load()
        assert state is not None
        state.members["dead"].lease_until_ms = 0
        store.save(state)
    seen: list[int] = []

    async def handle(n: int) -> None:
        seen.append(n)

    try:
        await run_to_end(member_app(path, handle, FileStream("s").replay().group("g")))
    finally:
        os.close(alive)
        store.close()
    assert seen == [1, 2, 3]


async def test_a_graceful_stop_hands_back_at_once_what_it_has_not_started(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 100)
    first: list[int] = []
    watch = Watch()

    async def stop_at_once(n: int) -> None:
        first.append(n)
        (await watch.running()).request_stop()

    stream = FileStream("s").replay().group("g", claim=100, lease=3600)
    await watch.run_to_end(member_app(path, stop_at_once, stream, buffer=1, count=1))
    assert state_of(path)["members"] == {}
    held = sum(b["count"] - len(b["done"]) for b in state_of(path)["batches"])
    assert held == 100 - len(first)
    assert all(b["member"] is None for b in state_of(path)["batches"])
    assert all(not b["runs"] for b in state_of(path)["batches"])  # none charged
    rest: list[tuple[int, int]] = []

    async def handle(n: int, ctx: Context) -> None:
        rest.append((n, ctx.attempt))

    with trio.fail_after(10):  # at once: the lease (an hour) is not waited for
        await run_to_end(member_app(path, handle, stream))
    assert sorted(first + [n for n, _ in rest]) == list(range(1, 101))
    assert {attempt for _, attempt in rest} == {1}


# ---- order -----------------------------------------------------------------------------------


async def test_ordered_keeps_each_keys_order_across_the_group(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    keys = [f"k{i}" for i in range(4)]
    for key in keys:
        write_numbers(path, 60, key=key)
    log: list[tuple[str, int]] = []
    running: dict[str, str] = {}
    overlaps: list[str] = []

    def handler(member: str) -> Any:
        async def handle(n: int, ctx: Context) -> Any:
            key = ctx.stream
            if running.setdefault(key, member) != member:
                overlaps.append(key)
            log.append((key, n))
            await trio.sleep(0.001 * (n % 3))
            if n % 17 == 0 and ctx.attempt == 1:
                running.pop(key, None)
                return retry()
            running.pop(key, None)
            return None

        return handle

    stream = FileStream(*keys).replay().group("g", ordered=True, claim=8)
    async with trio.open_nursery() as nursery:
        for member in "abc":
            app = member_app(path, handler(member), stream, name=member, workers=2)
            nursery.start_soon(run_to_end, app)
    assert not overlaps
    for key in keys:
        numbers = [n for k, n in log if k == key]
        # Each key in order; a retry is handled again in place.
        expected = []
        for n in range(1, 61):
            expected += [n, n] if n % 17 == 0 else [n]
        assert numbers == expected, key


async def test_ordered_refuses_by_key_and_batch(tmp_path: Path) -> None:
    app = App("m")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))
    stream = FileStream("s").group("g", ordered=True)

    async def handle(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="by_key"):
        broker.subscriber(stream, by_key="x", workers=2)(handle)
    with pytest.raises(ConfigurationError, match="batch"):
        broker.subscriber(stream, batch=10)(handle)


def test_a_durable_consumer_cannot_be_a_group_member() -> None:
    with pytest.raises(ConfigurationError, match="durable consumer or a member of a group"):
        FileStream("s", durable="x").group("g")
    with pytest.raises(ConfigurationError, match="group name"):
        FileStream("s").group("../etc")
    with pytest.raises(ConfigurationError, match="ordered=True orders a consumer group"):
        FileStream("s", ordered=True)


# ---- seeking ---------------------------------------------------------------------------------


async def test_a_member_alone_may_seek_and_moves_the_group(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 10)
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 3 and seen.count(3) == 1:
            await ctx.seeker.seek(Position.sequence(8))

    await run_to_end(member_app(path, handle, FileStream("s").replay().group("g", claim=2)))
    assert seen == [1, 2, 3, 8, 9, 10]


async def test_a_members_seek_is_refused_while_another_member_is_live(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    refused: list[str] = []
    stream = FileStream("s").group("g")
    tried = trio.Event()

    async def seeker(n: int, ctx: Context) -> None:
        try:
            await ctx.seeker.seek(Position.beginning())
        except Exception as exc:
            refused.append(str(exc))
        tried.set()

    async with (
        serving(member_app(path, seeker, stream, name="a")),
        serving(member_app(path, seeker, stream, name="b")),
    ):
        write_numbers(path, 1, first=6)
        with trio.fail_after(10):
            await tried.wait()
    [refusal] = refused
    assert "shared with live members" in refusal and "group 'g'" in refusal


# ---- the state beside the file ---------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "cut", "empty"])
async def test_a_damaged_state_is_refused_never_reset(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 10)

    async def handle(n: int) -> None: ...

    stream = FileStream("s").replay().group("g")
    await run_to_end(member_app(path, handle, stream))
    directory = Path(f"{path}.groups") / "g"
    slots = [directory / f"state.{slot}.json" for slot in (0, 1)]
    for slot in slots:
        good = slot.read_bytes()
        slot.write_bytes(
            {"garbage": b"\x00\xffnot json", "cut": good[: len(good) // 2], "empty": b""}[damage]
        )
    damaged = [slot.read_bytes() for slot in slots]
    refusal = await refused_at_start(member_app(path, handle, stream), GroupStateError)
    assert str(directory) in str(refusal) and "unreadable in both of its slots" in str(refusal)
    assert [slot.read_bytes() for slot in slots] == damaged  # left as they were


async def test_a_slot_cut_by_a_dying_writer_falls_back_to_the_last_whole_transaction(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 10)
    first: list[int] = []
    watch = Watch()

    async def stop_after_4(n: int) -> None:
        first.append(n)
        if len(first) == 4:
            (await watch.running()).request_stop()

    stream = FileStream("s").replay().group("g", claim=2)
    await watch.run_to_end(member_app(path, stop_after_4, stream))
    newest = state_of(path)["version"]
    slot = Path(f"{path}.groups") / "g" / f"state.{newest % 2}.json"
    slot.write_bytes(slot.read_bytes()[:40])  # the last transaction's write, cut
    rest: list[int] = []

    async def handle(n: int) -> None:
        rest.append(n)

    await run_to_end(member_app(path, handle, stream))
    # One transaction back: nothing skipped; at most what it settled is handled again.
    assert set(first + rest) == set(range(1, 11))


async def test_a_group_of_other_keys_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    write_numbers(path, 3, key="t")

    async def handle(n: int) -> None: ...

    await run_to_end(member_app(path, handle, FileStream("s").replay().group("g")))
    refusal = await refused_at_start(
        member_app(path, handle, FileStream("s", "t").replay().group("g")), GroupStateError
    )
    assert "reads keys ['s']" in str(refusal)


async def test_a_state_of_another_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)

    async def handle(n: int) -> None: ...

    stream = FileStream("s").replay().group("g")
    await run_to_end(member_app(path, handle, stream))
    path.unlink()
    with trio.fail_after(5):
        while True:  # a new file: another creation instant
            write_numbers(path, 3)
            with FileReader(path) as reader:
                if reader.header.created_at_ms != state_of(path)["file_created_at_ms"]:
                    break
            path.unlink()
            await trio.sleep(0.002)
    refusal = await refused_at_start(member_app(path, handle, stream), GroupStateError)
    assert "created at" in str(refusal)


MOUNTINFO = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "40 22 0:35 / /mnt/share rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2\n"
    "41 22 0:36 / /mnt/fuse\\040dir rw shared:21 - fuse.sshfs host: rw\n"
)


def test_a_filesystem_whose_locks_cannot_be_trusted_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert filesystem_type("/mnt/share/x/y", MOUNTINFO) == "nfs4"
    assert filesystem_type("/mnt/fuse dir/a", MOUNTINFO) == "fuse.sshfs"
    assert filesystem_type("/home/a", MOUNTINFO) == "ext4"
    with pytest.raises(UntrustedFilesystemError, match="nfs4 filesystem"):
        check_local_filesystem("/mnt/share/x", MOUNTINFO)
    with pytest.raises(UntrustedFilesystemError, match=r"fuse\.sshfs"):
        check_local_filesystem("/mnt/fuse dir", MOUNTINFO)
    check_local_filesystem("/home/a", MOUNTINFO)
    monkeypatch.setenv("TRIO_STREAMS_TRUST_FILESYSTEM", "1")
    check_local_filesystem("/mnt/share/x", MOUNTINFO)
    # The machine's own: this directory's filesystem is read from /proc.
    assert filesystem_type(str(tmp_path)) is not None


# ---- in memory -------------------------------------------------------------------------------


async def test_app_test_runs_a_file_group_as_the_in_process_group(tmp_path: Path) -> None:
    app = App("m")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))
    attempts: list[tuple[bytes, int]] = []

    @broker.subscriber(FileStream("s").group("g"), retry_delay=0)
    async def handle(body: bytes, ctx: Context) -> Any:
        attempts.append((body, ctx.attempt))
        return retry() if ctx.attempt < 2 else None

    async with app.test() as t:
        await t.publish("s", b"x")
        await t.settled()
    assert attempts == [(b"x", 1), (b"x", 2)]


async def test_set_group_position_is_refused_under_app_test_while_a_member_is_live(
    tmp_path: Path,
) -> None:
    app = App("m")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))
    seen: list[bytes] = []

    @broker.subscriber(FileStream("s").group("g"))
    async def handle(body: bytes) -> None:
        seen.append(body)

    async with app.test() as t:
        await t.publish("s", b"1")
        await t.settled()
        with pytest.raises(GroupLockedError, match="has live members"):
            await broker.set_group_position("g", Position.beginning())
    assert seen == [b"1"]


async def test_ordered_keys_move_to_a_member_that_joins_between_batches(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    keys = [f"k{i}" for i in range(4)]
    write_numbers(path, 1, key="k0")  # the file exists; the group starts after this
    log: list[tuple[str, str, int]] = []
    a_started = trio.Event()
    all_done = trio.Event()
    total = 4 * 40

    def handler(member: str) -> Any:
        async def handle(n: int, ctx: Context) -> None:
            log.append((member, ctx.stream, n))
            a_started.set()
            await trio.sleep(0.002)
            if len(log) >= total:
                all_done.set()

        return handle

    stream = FileStream(*keys).group("g", ordered=True, claim=4)
    async with serving(member_app(path, handler("a"), stream, name="a")):
        for key in keys:
            write_numbers(path, 40, key=key, first=2 if key == "k0" else 1)
        with trio.fail_after(10):
            await a_started.wait()
        async with serving(member_app(path, handler("b"), stream, name="b")):
            with trio.fail_after(20):
                await all_done.wait()
    assert {member for member, _, _ in log} == {"a", "b"}
    for key in keys:
        numbers = [n for _, k, n in log if k == key]
        assert numbers == sorted(numbers) and len(numbers) == len(set(numbers))


async def test_idle_members_of_a_live_group_use_almost_no_cpu(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 1)

    async def handle(n: int) -> None: ...

    stream = FileStream("s").group("g", lease=1)  # renewed every third of a second
    async with (
        serving(member_app(path, handle, stream, name="a")),
        serving(member_app(path, handle, stream, name="b")),
    ):
        await trio.sleep(0.2)  # past the start
        cpu = time.process_time()
        wall = time.perf_counter()
        await trio.sleep(1.5)  # the window measured, not a synchronisation
        used = time.process_time() - cpu
        elapsed = time.perf_counter() - wall
    # A spinning member uses a whole core (~1 s of CPU per second); idle ones, almost none.
    assert used < 0.2 * elapsed, f"{used:.3f} s of CPU in {elapsed:.3f} s while idle"


async def test_a_graceful_stop_does_not_run_what_is_queued_another_member_takes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 40)
    first: list[int] = []
    watch = Watch()
    release = trio.Event()
    started = trio.Event()

    async def slow_then_stop(n: int) -> None:
        first.append(n)
        (await watch.running()).request_stop()
        started.set()
        await release.wait()

    stream = FileStream("s").replay().group("g", claim=40, lease=3600)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            watch.run_to_end, member_app(path, slow_then_stop, stream, buffer=40, count=40)
        )
        # The stop began while 39 deliveries were queued: handed back, not drained.
        with trio.fail_after(10):
            await started.wait()
        release.set()
    assert first == [1]
    rest: list[int] = []

    async def handle(n: int) -> None:
        rest.append(n)

    await run_to_end(member_app(path, handle, stream))
    assert rest == list(range(2, 41))
