"""The stream-file workload: many writer processes, two durable consumers, a live tail.

Writer processes (``tests.file.many_writers write``) append to key ``k0`` of one file, each its
own numbered messages (payload ``<writer>:<n>``), printing ``ack n`` after each flush; some
writers are killed (SIGKILL) half-way through an append, holding the file's lock (the kit's
``KillPoint.during_append`` in an ``AppProcess``), and are replaced. Two durable consumers
(``tests.chaos.consumer file``, names ``a0`` and ``b0``, each its own ledger: each must see
every message) follow the file live from its beginning while a seeded schedule kills
(SIGKILL) and stops (SIGTERM) them, restarting each under its durable name. A live tail
(``many_writers follow``) follows the file from before the first write and sees each message
once, in each writer's order.

Published: every message a writer had acknowledged, and every complete message in the file
(a killed writer's last flush may have landed whole before its ``ack`` line). Pending for a
durable consumer: the messages after its stored watermark.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import trio

from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.testing.faults import AppProcess, KillPoint, Ledger

from .consumer import SPAN
from .history import Row, order_breaks, row_from
from .procs import Consumers

ROOT = Path(__file__).resolve().parents[2]
WRITERS = "tests.file.many_writers"
KEY = "k0"
SETTLE_WITHIN = 90.0


def message_id(payload: bytes) -> int | None:
    """The number of a payload ``<writer>:<n>`` (``None`` for any other payload)."""
    writer, _, rest = payload.partition(b":")
    n = rest.partition(b":")[0]
    if not (writer.isdigit() and n.isdigit()):
        return None
    return int(writer) * SPAN + int(n)


@dataclass(frozen=True)
class FileSize:
    """Steady writers, messages each, writers that crash mid-append, consumer faults."""

    writers: int
    messages: int
    crashes: int
    kills: int


def _writer(path: Path, writer: int, count: int, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", WRITERS, "write", str(path), str(writer), str(count), "1", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _tail(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.file.many_writers", "follow", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _acked(writer: int, out: bytes) -> set[int]:
    acks = [int(line.split()[1]) for line in out.splitlines() if line.startswith(b"ack ")]
    return {writer * SPAN + n for n in range(acks[-1] + 1)} if acks else set()


def _in_file(path: Path) -> list[tuple[int, int]]:
    """``(seq, number)`` of each message of key ``k0`` in the file, in file order."""
    out = []
    with FileReader(path) as reader:
        for message in reader:
            if message.stream_key == KEY:
                n = message_id(message.payload)
                if n is not None:
                    out.append((message.seq, n))
    return out


def _watermark(path: Path, name: str) -> int | None:
    state = path.parent / (path.name + ".consumers") / f"{name}.json"
    if not state.exists():
        return None
    sequence = json.loads(state.read_text())["sequence"]
    return sequence if isinstance(sequence, int) else None


async def files_rows(directory: Path, seed: int, size: FileSize) -> list[Row]:
    rng = random.Random(seed)
    path = directory / "chaos.ss"
    StreamWriter(path, beacon_interval=1024).close()
    tail = _tail(path)
    assert tail.stdout is not None
    ready = await trio.to_thread.run_sync(tail.stdout.readline)
    assert ready == b"ready\n", ready
    ledgers = {prefix: Ledger(directory / f"file-{prefix}.ledger") for prefix in ("a", "b")}
    durable = {
        prefix: Consumers(
            "file", str(path), KEY, ledger.path, rng.randrange(1 << 30), 1, prefix=prefix
        )
        for prefix, ledger in ledgers.items()
    }
    faults: Counter[str] = Counter()
    acked: set[int] = set()
    try:
        for consumers in durable.values():
            await consumers.start_all()
        steady = [_writer(path, w, size.messages, "--batch", "50") for w in range(size.writers)]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_consumer_faults, durable, rng, size.kills)
            for crash in range(size.crashes):
                writer = 100 + crash
                point = KillPoint.during_append(rng.randint(1, 20))
                async with AppProcess(
                    WRITERS, "write", str(path), str(writer), str(size.messages), "1",
                    "--batch", "4", kill_at=point, cwd=ROOT,
                ) as crasher:  # fmt: skip
                    await crasher.killed()
                faults["writer killed mid-append"] += 1
                acked |= _acked(writer, crasher.stdout)
            for w, process in enumerate(steady):
                out, _ = await trio.to_thread.run_sync(process.communicate)
                if process.returncode != 0:
                    raise AssertionError(f"writer {w} exited {process.returncode}")
                acked |= _acked(w, out)
        # The last writer: it repairs the tail a crashed writer may have left cut, and its
        # message on key ``end`` ends the live tail.
        end = StreamWriter(path, beacon_interval=1024)
        end.append("end", b"end")
        end.close()
        in_file = _in_file(path)
        published = acked | {n for _, n in in_file}
        for ledger in ledgers.values():
            for n in sorted(published):
                ledger.published(n)
        with trio.move_on_after(SETTLE_WITHIN):
            while True:
                if all(published <= ledger.check().handled for ledger in ledgers.values()):
                    break
                await trio.sleep(0.1)
        for consumers in durable.values():
            await consumers.stop_all()
        tail_out, _ = await trio.to_thread.run_sync(lambda: tail.communicate(timeout=60))
    finally:
        tail.kill()
        for consumers in durable.values():
            consumers.kill_all_now()
    rows: list[Row] = []
    seq_of = {n: seq for seq, n in in_file}
    missing_from_file = acked - set(seq_of)
    for consumers in durable.values():
        faults.update(consumers.faults)
    total = None
    for prefix, ledger in ledgers.items():
        mark = _watermark(path, f"{prefix}0")
        pending = {n for n in published if mark is None or seq_of.get(n, -1) > mark}
        row = row_from(
            "stream file: durable consumers", ledger.check(pending=pending), faults=faults
        )
        total = row if total is None else _add(total, row)
    assert total is not None
    if missing_from_file:
        total.lost += len(missing_from_file)
        total.notes.append(
            f"stream file: {len(missing_from_file)} acknowledged appends missing from the file"
        )
    rows.append(total)
    seen = [
        message_id(line.split(b" ", 2)[2])
        for line in tail_out.splitlines()
        if line.startswith(KEY.encode() + b" ")
    ]
    tail_ids = [n for n in seen if n is not None]
    counts = Counter(tail_ids)
    lost = published - set(counts)
    tail_row = Row(
        transport="stream file: live tail",
        faults=Counter({"writer killed mid-append": faults["writer killed mid-append"]}),
        faults_shared=True,
        messages=len(published),
        lost=len(lost),
        settled_without_run=0,
        duplicates=sum(c - 1 for c in counts.values()),
        order_breaks=order_breaks(tail_ids, {n: str(n // SPAN) for n in published}),
    )
    if lost:
        tail_row.notes.append(f"live tail: lost e.g. {sorted(lost)[:5]}")
    rows.append(tail_row)
    return rows


def _add(a: Row, b: Row) -> Row:
    """Two durable consumers' rows as one: each consumer's messages count once per consumer."""
    return Row(
        transport=a.transport,
        faults=a.faults,
        messages=a.messages + b.messages,
        lost=a.lost + b.lost,
        settled_without_run=a.settled_without_run + b.settled_without_run,
        duplicates=a.duplicates + b.duplicates,
        notes=a.notes + b.notes,
    )


async def _consumer_faults(durable: dict[str, Consumers], rng: random.Random, kills: int) -> None:
    """Kill or stop a durable consumer ``kills`` times, a random moment apart, while the
    writers write and while the consumers catch up."""
    for _ in range(kills):
        await trio.sleep(rng.uniform(0.1, 0.6))
        consumers = durable[rng.choice(sorted(durable))]
        name = consumers.names[0]
        if rng.random() < 0.5:
            await consumers.kill(name)
        else:
            await consumers.stop(name)
