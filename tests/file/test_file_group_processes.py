"""A consumer group on a stream file, its members real processes: the contract, one test per
sentence, checked on a shared ledger (``trio_streams.testing.faults.Ledger``) and on the runs it
records (:mod:`tests.file.group_ledger`: which process ran what, and whether two runs of one
message were ever under way at once).

The members are ``tests/file/group_apps.py:member`` run by ``trio-streams run``, killed where
the fault kit says (``KillPoint``); writers are ``python -m tests.file.group_apps write``. The
soak (``nox -s soak``) scales the kills and the writers up: 4 members over 50k messages.
"""

from __future__ import annotations

import random
import shutil
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from trio_streams.file.envelope import open_envelope
from trio_streams.file.group_state import GroupState, decode_state
from trio_streams.file.group_store import GroupStore
from trio_streams.file.groups import list_groups
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.testing.faults import AppProcess, KillPoint, Ledger, LedgerReport

from .group_ledger import Run, overlaps, read_runs

ROOT = Path(__file__).parents[2]
APPS = "tests.file.group_apps"
#: Every wait of a test: generous for a loaded 2-core machine, never reached when all is well.
WAIT = 60.0
#: A lease far longer than any test waits: a member's messages that come back sooner came back
#: without waiting for it.
LONG_LEASE = 120.0


# ---- the setting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """What a group's state holds: its members' processes, messages claimed and not settled,
    retries waiting."""

    members: list[int]
    held: int
    delayed: int


class Group:
    """A stream file, a ledger, and the environment of the group's members."""

    def __init__(self, tmp_path: Path, keys: list[str], **settings: object) -> None:
        self.dir = tmp_path
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.path = tmp_path / "orders.ss"
        self.ledger = Ledger(tmp_path / "ledger.log")
        self.calls_path = tmp_path / "calls.log"
        self.keys = list(keys)
        #: Each published message's key; in the ledger, its lane if the group is ordered
        #: (whose order the ledger then checks).
        self.lanes: dict[str, str] = {}
        self.ordered = bool(settings.get("ordered"))
        #: Where each killed member died, in bytes of the ledger.
        self.deaths: dict[int, int] = {}
        self.env = {
            "GROUP_FILE": str(self.path),
            "GROUP_LEDGER": str(self.ledger.path),
            "GROUP_CALLS": str(self.calls_path),
            "GROUP_KEYS": ",".join(self.keys),
            **{f"GROUP_{name.upper()}": str(value) for name, value in settings.items()},
        }

    def write(self, count: int, *, block: int = 1, name: str = "p") -> list[str]:
        """Append ``count`` messages ``name:n`` (n from 1), a ``block`` of each key in turn,
        each recorded in the ledger (its lane its key, if ordered) before it is appended."""
        keys = [k for k in self.keys if "." not in k] or self.keys
        written = []
        with StreamWriter(self.path) as writer:
            first = 1 + sum(1 for ident in self.lanes if ident.startswith(f"{name}:"))
            for n in range(first, first + count):
                ident, key = f"{name}:{n}", keys[((n - 1) // block) % len(keys)]
                self.ledger.published(ident, lane=key if self.ordered else None)
                self.lanes[ident] = key
                writer.append(key, ident.encode())
                written.append(ident)
        return written

    def member(self, **options: object) -> AppProcess:
        """A member process; ``env`` (a dict) adds to its environment, the other options are
        the AppProcess's."""
        extra = options.pop("env", {})
        assert isinstance(extra, dict)
        return AppProcess(
            f"{APPS}:member", "--factory", cwd=ROOT, env={**self.env, **extra},
            timeout=WAIT, **options,  # type: ignore[arg-type]
        )  # fmt: skip

    def writer(self, name: str, count: int, keys: int) -> AppProcess:
        for n in range(1, count + 1):
            self.lanes[f"{name}:{n}"] = f"{name}.k{n % keys}"
        return AppProcess(
            APPS, "write", self.path, self.ledger.path, name, count, keys, int(self.ordered),
            cwd=ROOT, timeout=WAIT,
        )  # fmt: skip

    def gate(self, size: int) -> dict[str, str]:
        """The environment of members that wait for ``size`` of them to have run."""
        gate = self.dir / "gate"
        gate.mkdir(exist_ok=True)
        return {"GROUP_GATE": str(gate), "GROUP_GATE_SIZE": str(size)}

    def check(self) -> LedgerReport:
        return self.ledger.check()

    def runs(self) -> list[Run]:
        return read_runs(self.ledger.path, self.deaths)

    def calls(self) -> dict[str, list[int]]:
        """The attempt of each call of the handler, per message, in the order of the calls."""
        calls: dict[str, list[int]] = {}
        if self.calls_path.exists():
            for line in self.calls_path.read_text().splitlines():
                ident, attempt, _ = line.split()
                calls.setdefault(ident, []).append(int(attempt))
        return calls

    def size(self) -> int:
        return self.ledger.path.stat().st_size

    async def kill_held(self, member: AppProcess) -> None:
        """``member``, held at its kill point, dies there: where in the ledger is noted (it
        writes nothing more once held)."""
        await member.reached()
        self.deaths[member.pid] = self.size()
        assert await member.killed() == -signal.SIGKILL

    def state(self, group: str = "g") -> State:
        """The group as ``list_groups`` reports it."""
        [info] = [info for info in list_groups(self.path) if info.name == group]
        assert info.error is None, info.error
        return State(
            members=sorted(m.pid for m in info.members), held=info.held, delayed=info.delayed
        )

    def slots(self, group: str = "g") -> list[Path]:
        """The group's two state slots, the newer first."""
        paths = [Path(p) for p in GroupStore(str(self.path), group).slot_paths]
        return sorted(paths, key=lambda p: -decode_state(p.read_bytes()).version)

    def unsettled(self, state: GroupState) -> set[str]:
        """The messages of the file ``state`` has not settled: past a key's cursor, or in a
        batch and not done."""
        result = set()
        with FileReader(self.path) as reader:
            for message in reader:
                offset, key = message.offset, message.stream_key
                if key not in state.cursors:
                    continue
                in_batch = [
                    b for b in state.batches
                    if key in b.keys and b.start <= offset < b.end
                    and (b.offsets is None or offset in b.offsets)
                ]  # fmt: skip
                if offset >= state.cursors[key] or any(offset not in b.done for b in in_batch):
                    result.add(message.payload.decode())
        return result


def keys(count: int) -> list[str]:
    return [f"k{i}" for i in range(count)]


@asynccontextmanager
async def started(*processes: AppProcess) -> AsyncIterator[list[AppProcess]]:
    """Every process started at once, in one block that ends them all (SIGKILL if still
    running)."""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(p) for p in processes]


async def until(check: Callable[[], bool], what: str, within: float = WAIT) -> None:
    """Wait, looking every 50 ms, until ``check()`` holds; fail naming ``what`` after
    ``within`` seconds. (What other processes wrote to the ledger: no event tells of it.)"""
    with trio.move_on_after(within):
        while not check():  # noqa: ASYNC110 - the ledger is written by other processes
            await trio.sleep(0.05)
        return
    raise AssertionError(f"no sign of {what} within {within:g} s")


async def all_exit(processes: list[AppProcess], status: int = 0) -> None:
    for process in processes:
        assert await process.wait() == status, process.stderr.decode()[-3000:]


async def stop_all(processes: list[AppProcess]) -> None:
    """A graceful stop of every process at once (once each is running); each exits 0."""
    for process in processes:
        await process.started()
    for process in processes:
        process.send_signal(signal.SIGTERM)
    await all_exit(processes)


def handled_all(group: Group, count: int) -> Callable[[], bool]:
    return lambda: len(group.check().handled) >= count


def assert_sound(group: Group, report: LedgerReport, runs: list[Run]) -> None:
    """Nothing lost, settled without a run, unknown or out of order; no message run by two
    members at once; each call of the handler sees the attempt one more than the calls before
    it (an attempt is a handler run: nothing else charges one, none goes uncharged)."""
    assert report.ok, report.block()
    assert report.lost == set() and report.settled_without_run == set(), report.block()
    assert overlaps(runs) == []
    for ident, attempts in group.calls().items():
        assert attempts == list(range(1, len(attempts) + 1)), (ident, attempts)


def by_pid(runs: list[Run]) -> dict[int, list[Run]]:
    result: dict[int, list[Run]] = {}
    for run in runs:
        result.setdefault(run.pid, []).append(run)
    return result


# ---- sharing -----------------------------------------------------------------------------------


async def test_members_in_several_processes_share_the_messages_each_message_handled(
    tmp_path: Path,
) -> None:
    group = Group(tmp_path, keys(3), replay=1, claim=16, workers=2, sleep_ms=2)
    published = group.write(600)
    members = [group.member(env=group.gate(3)) for _ in range(3)]
    async with started(*members):
        await all_exit(members)  # a replay group's members end once the group is done
    report, runs = group.check(), group.runs()
    assert_sound(group, report, runs)
    assert report.handled == set(published)
    assert report.duplicates == {}
    assert sum(report.runs.values()) == 600  # each message once
    # Shared: every member ran some (the gate made sure each took part before any finished).
    assert sorted(by_pid(runs)) == sorted(m.pid for m in members)
    assert group.state().held == 0 and group.state().members == []


async def test_none_handled_by_two_members_at_once(tmp_path: Path) -> None:
    group = Group(tmp_path, keys(4), replay=1, claim=8, workers=4, sleep_ms=4)
    group.write(800)
    members = [group.member(env=group.gate(3)) for _ in range(3)]
    async with started(*members):
        await all_exit(members)
    runs = group.runs()
    assert overlaps(runs) == []
    # The check could fail: runs of different members were under way at once (at the gate
    # every member's first runs wait for the others').
    at_once = [o for o in overlaps(runs, by=lambda run: "any") if o.first.pid != o.second.pid]
    assert at_once
    assert len(by_pid(runs)) == 3
    assert_sound(group, group.check(), runs)


async def test_with_2_writer_processes_appending_meanwhile(tmp_path: Path) -> None:
    names = keys(2) + [f"{w}.k{i}" for w in ("w1", "w2") for i in range(3)]
    group = Group(tmp_path, names, claim=16, workers=2, sleep_ms=1)  # live, from the beginning
    group.write(200)
    members = [group.member(env=group.gate(3)) for _ in range(3)]
    writers = [group.writer("w1", 600, 3), group.writer("w2", 600, 3)]
    async with started(*members, *writers):
        await all_exit(writers)
        await until(handled_all(group, 1400), "1400 messages handled")
        await stop_all(members)
    report, runs = group.check(), group.runs()
    assert len(report.published) == 1400
    assert report.handled == report.published
    assert report.duplicates == {}
    assert_sound(group, report, runs)
    assert len(by_pid(runs)) == 3


# ---- order ---------------------------------------------------------------------------------------


async def test_ordered_true_keeps_per_key_order_across_members(tmp_path: Path) -> None:
    # Keys in blocks of 8 and claims of 16: each claim holds a few keys, so the keys pass from
    # member to member as their batches are settled; four workers per member run lanes of them.
    group = Group(tmp_path, keys(6), replay=1, ordered=1, claim=16, workers=4, sleep_ms=2)
    published = group.write(480, block=8)
    members = [group.member(env=group.gate(3)) for _ in range(3)]
    async with started(*members):
        await all_exit(members)
    report, runs = group.check(), group.runs()
    assert report.order_breaks == [], report.block()
    assert report.handled == set(published)
    assert_sound(group, report, runs)
    # Never two runs of one key at once, in one member or across members.
    assert overlaps(runs, by=lambda run: group.lanes[run.id]) == []
    assert len(by_pid(runs)) == 3
    keys_moved = {
        key for key in group.keys if len({r.pid for r in runs if group.lanes[r.id] == key}) > 1
    }
    print(f"keys handled by more than one member: {sorted(keys_moved)}")


# ---- kills, stops and hand-backs ---------------------------------------------------------------


async def test_kill_9_of_members_0_lost_0_settled_without_a_run_duplicates_counted(
    tmp_path: Path,
) -> None:
    # Two members stay, three are killed -9 under way in a handler; the gate makes every one
    # of them run before any goes on, and each killed one has its own claim of 16 in hand.
    group = Group(tmp_path, keys(3), claim=16, workers=1, sleep_ms=2, lease=LONG_LEASE)
    group.write(600)
    gate = group.gate(5)
    stay = [group.member(env=gate) for _ in range(2)]
    rng = random.Random(9)
    killed = [
        group.member(env=gate, kill_at=KillPoint.inside_handler(rng.randint(2, 12)), hold=True)
        for _ in range(3)
    ]
    async with started(*stay, *killed):
        for member in killed:
            await group.kill_held(member)
        await until(handled_all(group, 600), "600 messages handled")
        await stop_all(stay)
    report, runs = group.check(), group.runs()
    print(report.block())
    assert_sound(group, report, runs)
    assert len(report.handled) == 600
    # Exactly the run each killed member died in was run again: a duplicate, its attempt 2.
    died_in = {r.id for r in runs if r.pid in group.deaths and r.outcome is None}
    assert len(died_in) == 3
    assert report.duplicates == dict.fromkeys(died_in, 1)
    assert all(group.calls()[i] == [1, 2] for i in died_in)
    # The killed members' runs that ended were never run again.
    for run in runs:
        if run.pid in group.deaths and run.outcome is not None:
            assert report.runs[run.id] == 1, run


async def test_a_killed_members_messages_are_taken_by_another_member(tmp_path: Path) -> None:
    group = Group(tmp_path, keys(2), claim=64, workers=1, lease=LONG_LEASE)
    group.write(200)
    # The first member claims the first 64 and is held, alive, in its first run.
    first = group.member(kill_at=KillPoint.inside_handler(1), hold=True)
    async with started(first):
        await first.reached()
        other = group.member()
        async with started(other):
            await until(handled_all(group, 136), "the other member's 136 messages handled")
            await group.kill_held(first)
            killed_at = time.monotonic()
            await until(handled_all(group, 200), "the killed member's messages handled")
            taken_within = time.monotonic() - killed_at
            await stop_all([other])
    report, runs = group.check(), group.runs()
    assert_sound(group, report, runs)
    assert len(report.handled) == 200
    assert [r.id for r in runs if r.pid == first.pid] == ["p:1"]
    # The other member ran what the killed one held, its run charged (attempt 2), at once: the
    # dead member's lock was free, its lease of two minutes far from over.
    assert [(r.pid, r.attempt) for r in runs if r.id == "p:1"] == [(first.pid, 1), (other.pid, 2)]
    assert {r.id for r in runs if r.pid == other.pid} == set(report.published)
    assert report.duplicates == {"p:1": 1}
    assert taken_within < 10, taken_within
    print(f"taken {taken_within:.2f} s after the kill")


async def test_a_graceful_stop_hands_back_at_once_what_it_has_not_started(tmp_path: Path) -> None:
    group = Group(tmp_path, keys(2), claim=64, workers=1, sleep_ms=5, lease=LONG_LEASE)
    group.write(200)
    first = group.member(kill_at=KillPoint.inside_handler(1), signal=signal.SIGTERM, hold=True)
    async with started(first):
        await first.reached()  # its first claim of 64 in hand, its first run under way
        other = group.member()
        async with started(other):
            await until(handled_all(group, 136), "the other member's 136 messages handled")
            first.release()  # SIGTERM: it finishes its run and hands back the rest
            assert await first.wait() == 0
            stopped_at = time.monotonic()
            assert first.pid not in group.state().members  # it left the group
            await until(handled_all(group, 200), "what it handed back handled")
            taken_within = time.monotonic() - stopped_at
            await stop_all([other])
    report, runs = group.check(), group.runs()
    assert_sound(group, report, runs)
    assert len(report.handled) == 200
    ran_first = {r.id for r in runs if r.pid == first.pid}
    assert "p:1" in ran_first
    # Nothing ran twice, and what came back was never charged: every attempt is the first.
    assert report.duplicates == {}
    assert all(attempts == [1] for attempts in group.calls().values())
    # The rest of its claim was run by the other member, long before the lease would end.
    taken = {r.id for r in runs if r.pid == other.pid} & {f"p:{n}" for n in range(1, 65)}
    assert taken == {f"p:{n}" for n in range(1, 65)} - ran_first
    assert taken_within < 10, taken_within
    print(f"taken {taken_within:.2f} s after the stop")


async def test_a_replay_member_does_not_end_while_a_dead_members_claim_is_left(
    tmp_path: Path,
) -> None:
    group = Group(tmp_path, keys(2), replay=1, claim=64, workers=1, lease=LONG_LEASE)
    group.write(200)
    release = tmp_path / "release"
    first = group.member(kill_at=KillPoint.inside_handler(1), hold=True)
    async with started(first):
        await first.reached()  # it holds p:1 to p:64
        other = group.member(env={"GROUP_WAIT_ON": "p:200", "GROUP_WAIT_FOR": str(release)})
        async with started(other):
            # The other member has run everything else, and waits in its run of the last one.
            await until(lambda: "p:200" in group.check().runs, "the run of p:200")
            await group.kill_held(first)  # dead: its lock is free, its claim there to take
            release.touch()
            assert await other.wait() == 0
    report = group.check()
    assert report.lost == set(), report.block()


# ---- retries -----------------------------------------------------------------------------------


async def test_retry_after_survives_a_restart_of_all_members(tmp_path: Path) -> None:
    # Every 30th message asks retry_after(3) each time it runs; the rest are handled.
    group = Group(
        tmp_path, keys(2), replay=1, claim=16, workers=2, retry_every=30, lease=LONG_LEASE
    )
    group.write(300)
    retried = {f"p:{n}" for n in range(30, 301, 30)}
    asking = {"GROUP_RETRY_AFTER": "3"}
    first = [group.member(env=asking) for _ in range(2)]
    async with started(*first):

        def first_runs_done() -> bool:
            report = group.check()
            return len(report.handled) == 290 and set(report.runs) >= retried

        await until(first_runs_done, "every message run once")
        await stop_all(first)
    state = group.state()
    assert state.members == []
    # Each of them waits in the group's state: delayed, or handed back if it was due already.
    assert state.delayed + state.held == 10, state
    assert state.delayed >= 1
    runs_before = {i: len(group.calls()[i]) for i in retried}
    # All members restart, and now handle them: each when it is due, attempt counted on.
    second = [group.member() for _ in range(2)]
    async with started(*second):
        await all_exit(second)
    report, runs = group.check(), group.runs()
    assert_sound(group, report, runs)
    assert report.handled == report.published
    assert report.duplicates == {}
    for ident in retried:
        assert group.calls()[ident] == list(range(1, runs_before[ident] + 2)), ident
    later = [r for r in runs if r.pid in {m.pid for m in second}]
    assert {r.id for r in later} == retried  # nothing else ran again


@pytest.mark.slow
async def test_max_attempts_dead_letters_after_n_handler_runs_and_kills_never_charge_an_attempt(
    tmp_path: Path,
) -> None:
    # Every 40th message raises. Two members at a time are killed -9 in a handler, each
    # restarted, six kills in all during the backlog; then a last member finishes it.
    group = Group(
        tmp_path, keys(2), replay=1, claim=16, workers=2, poison=40, max_attempts=3,
        dead_letter="dead", lease=LONG_LEASE,
    )  # fmt: skip
    published = group.write(480)
    poison = {f"p:{n}" for n in range(40, 481, 40)}
    rng = random.Random(3)

    async def restarted(times: int) -> None:
        for _ in range(times):
            point = KillPoint.inside_handler(rng.randint(5, 40))
            async with started(group.member(kill_at=point, hold=True)) as (member,):
                await group.kill_held(member)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(restarted, 3)
        nursery.start_soon(restarted, 3)
    last = group.member()  # it takes what the killed ones left as it joins
    async with started(last):
        await all_exit([last])
    report, runs = group.check(), group.runs()
    print(report.block())
    assert_sound(group, report, runs)  # attempts 1, 2, 3...: a kill charged the run it cut, no more
    assert report.dead_lettered == poison
    assert report.dropped == set()
    assert report.handled == set(published) - poison
    for ident in poison:
        assert group.calls()[ident] == [1, 2, 3], ident
    # Nothing settled without a run; nothing of a claim a kill cut short was charged a run it
    # did not have (every attempt above counts the runs before it); and the dead letters are
    # in the file, under their key.
    with FileReader(group.path) as reader:
        dead = {open_envelope(m.payload)[0].decode() for m in reader if m.stream_key == "dead"}
    assert dead == poison
    assert len(group.deaths) == 6


# ---- the state ---------------------------------------------------------------------------------


async def _group_that_ran(tmp_path: Path) -> Group:
    """A group whose member handled the file's 100 messages; then 50 more were written (work a
    reset would get wrong: to the beginning, 150 runs; to the end, none)."""
    group = Group(tmp_path, keys(2), replay=1, claim=16)
    group.write(100)
    member = group.member()
    async with started(member):
        await all_exit([member])
    group.write(50)
    return group


@pytest.mark.slow
async def test_a_corrupt_or_cut_state_the_member_refuses_to_start_naming_it(
    tmp_path: Path,
) -> None:
    # The state is kept in two slots, each write into the older (so one cut by a crash leaves
    # the other whole): here both are damaged.
    original = await _group_that_ran(tmp_path / "original")
    wholes = [slot.read_bytes() for slot in original.slots()]
    damages = {
        "cut": [whole[: len(whole) // 2] for whole in wholes],
        "garbled": [whole[:10] + b"\x00\xff#" * 8 + whole[34:] for whole in wholes],
        "empty": [b"", b""],
    }
    groups = {}
    for damage, damaged in damages.items():
        shutil.copytree(original.dir, tmp_path / damage)
        group = groups[damage] = Group(tmp_path / damage, keys(2), replay=1, claim=16)
        for slot, data in zip(original.slots(), damaged, strict=True):
            (group.dir / slot.relative_to(original.dir)).write_bytes(data)
        (group.dir / "ledger.log").write_bytes(b"")
    refused = {damage: group.member() for damage, group in groups.items()}
    async with started(*refused.values()):
        for damage, group in groups.items():
            process = refused[damage]
            assert await process.wait() != 0, damage
            stderr = process.stderr.decode()
            directory = GroupStore(str(group.path), "g").directory
            assert directory in stderr and "unreadable" in stderr, (damage, stderr[-2000:])
            for slot, data in zip(original.slots(), damages[damage], strict=True):
                # Left as it was: never reset.
                assert (group.dir / slot.relative_to(original.dir)).read_bytes() == data, damage
            assert group.runs() == [], damage  # nothing ran


async def test_a_state_whose_newer_slot_is_cut_resumes_from_the_other_never_reset(
    tmp_path: Path,
) -> None:
    group = await _group_that_ran(tmp_path)
    newer, older = group.slots()
    older_state = decode_state(older.read_bytes())
    left = group.unsettled(older_state)
    assert {f"p:{n}" for n in range(101, 151)} <= left < set(group.lanes)
    newer.write_bytes(newer.read_bytes()[:40])  # a write cut short
    before = {r.id for r in group.runs()}
    member = group.member()
    async with started(member):
        await all_exit([member])
    report, runs = group.check(), group.runs()
    assert_sound(group, report, runs)
    assert report.handled == set(group.lanes)
    # It went back to the older slot's state: what that one had not settled ran again, and
    # nothing else (not the beginning), and nothing was skipped (not the end).
    assert {r.id for r in runs if r.pid == member.pid} == left
    assert set(report.duplicates) == left & before


@pytest.mark.slow
async def test_a_restart_of_the_whole_group_resumes_where_it_stopped(tmp_path: Path) -> None:
    # The whole group is stopped (SIGTERM), restarted, killed -9 (every member at once),
    # restarted as replay members, which end once the group is done.
    group = Group(tmp_path, keys(3), claim=16, workers=2, sleep_ms=3, lease=LONG_LEASE)
    published = group.write(900)
    first = [group.member() for _ in range(2)]
    async with started(*first):
        await until(handled_all(group, 250), "250 messages handled")
        await stop_all(first)
    stopped = {r.id for r in group.runs()}
    assert group.check().duplicates == {}
    # Every member left; what they took and had not started is handed back to the group.
    assert group.state().members == []
    second = [group.member() for _ in range(2)]
    async with started(*second):
        await until(handled_all(group, len(stopped) + 250), "250 more messages handled")
        for member in second:
            member.kill()
        await all_exit(second, -signal.SIGKILL)
        group.deaths.update(dict.fromkeys((m.pid for m in second), group.size()))
    runs = group.runs()
    # Nothing that was settled before the stop ran again after it.
    assert not {r.id for r in runs if r.pid in group.deaths} & stopped
    dead = [r for r in runs if r.pid in group.deaths]
    killed = {r.id for r in dead}
    settled = {r.id for r in dead if r.settled}
    cut = {r.id for r in dead if r.outcome is None}  # under way in a handler
    third = [group.member(env={"GROUP_REPLAY": "1"}) for _ in range(2)]
    async with started(*third):
        await all_exit(third)
    report, runs = group.check(), group.runs()
    assert_sound(group, report, runs)
    assert report.handled == set(published)
    again = {r.id for r in runs if r.pid in {m.pid for m in third}}
    # Nothing that was settled ran again: what ran again of the killed members' is what was
    # cut short in a handler, and perhaps what had ended and was not settled yet.
    assert again.isdisjoint(stopped | settled)
    assert cut <= again & killed
    assert set(report.duplicates) == again & killed
    assert all(n == 1 for n in report.duplicates.values())
    print(
        f"{len(stopped)} handled before the stop, {len(killed)} before the kill "
        f"({len(cut)} under way), {len(again)} after"
    )


# ---- the checker -------------------------------------------------------------------------------


def test_the_overlap_check_finds_two_runs_of_a_message_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    with Ledger(path) as ledger:
        ledger.published("a")
        ledger.published("b")
    lines = [
        '{"t":"run","id":"a","a":1,"pid":1}',
        '{"t":"run","id":"a","a":2,"pid":2}',  # while pid 1 still runs it
        '{"t":"ended","id":"a","o":"ack","a":2,"pid":2}',
        '{"t":"ended","id":"a","o":"ack","a":1,"pid":1}',
        '{"t":"run","id":"b","a":1,"pid":3}',  # pid 3 dies here
        '{"t":"run","id":"b","a":2,"pid":1}',
        '{"t":"ended","id":"b","o":"ack","a":2,"pid":1}',
    ]
    with path.open("a") as file:
        file.write("\n".join(lines) + "\n")
    runs = read_runs(path)  # pid 3's death unknown: its run never ended
    assert [(o.what, o.first.pid, o.second.pid) for o in overlaps(runs)] == [
        ("a", 1, 2),
        ("b", 3, 1),
    ]
    offset = len(path.read_bytes().split(b'"pid":3}\n')[0]) + len(b'"pid":3}\n')
    runs = read_runs(path, {3: offset})  # pid 3 died before pid 1 took b
    assert [(o.what, o.first.pid, o.second.pid) for o in overlaps(runs)] == [("a", 1, 2)]


# ---- the soak ----------------------------------------------------------------------------------


async def _soak(tmp_path: Path, *, ordered: bool, total: int, kills: int) -> None:
    writers_keys = 3
    names = keys(4) + [f"{w}.k{i}" for w in ("w1", "w2") for i in range(writers_keys)]
    group = Group(
        tmp_path, names, claim=32, workers=2, sleep_ms=10, ordered=int(ordered),
        lease=LONG_LEASE,
    )  # fmt: skip
    per_writer = total // 4
    group.write(total - 2 * per_writer, block=8 if ordered else 1)
    rng = random.Random(total + ordered)
    done_killing = trio.Event()
    kills_made: list[int] = []
    lasting: list[AppProcess] = []
    started_at = time.monotonic()

    async def slot() -> None:
        while len(kills_made) < kills:
            kills_made.append(1)
            point = KillPoint.inside_handler(rng.randint(20, 300))
            async with started(group.member(kill_at=point, hold=True)) as (member,):
                await group.kill_held(member)
        done_killing.set()
        member = group.member()
        lasting.append(member)
        async with started(member):
            await until(handled_all(group, total), f"{total} messages handled", 1800)
            await stop_all([member])

    with trio.fail_after(1800):
        writers = [
            group.writer("w1", per_writer, writers_keys),
            group.writer("w2", per_writer, writers_keys),
        ]
        async with started(*writers), trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(slot)
            await all_exit(writers)
    report, runs = group.check(), group.runs()
    print(
        f"\nsoak ({'ordered' if ordered else 'unordered'}): {total} messages, 4 members, "
        f"2 writers, {len(group.deaths)} kill -9, {time.monotonic() - started_at:.0f} s"
    )
    print(report.block())
    print(f"duplicates: {report.duplicate_runs} runs beyond the first ({dict(report.duplicates)})")
    assert len(group.deaths) == kills
    assert len(report.published) == total
    assert report.handled == report.published
    assert_sound(group, report, runs)
    # What a kill cut short in a handler ran again; beyond that, at most what a killed member
    # ran and had not settled yet (its other worker's run, ended and not yet settled).
    dead = [r for r in runs if r.pid in group.deaths]
    cut = {r.id for r in dead if r.outcome is None}
    unsettled: Counter[int | str] = Counter(r.id for r in dead if not r.settled)
    assert cut <= set(report.duplicates)
    assert all(n <= unsettled[i] for i, n in report.duplicates.items()), report.duplicates
    if ordered:
        assert report.order_breaks == []
        assert overlaps(runs, by=lambda run: group.lanes[run.id]) == []


@pytest.mark.soak
@pytest.mark.parametrize("ordered", [False, True], ids=["unordered", "ordered"])
async def test_soak_4_members_50k_messages_2_writers_30_kills(
    tmp_path: Path, ordered: bool
) -> None:
    await _soak(tmp_path, ordered=ordered, total=50_000, kills=30)
