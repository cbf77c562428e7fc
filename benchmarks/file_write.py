"""Writing 1M messages of 100 bytes to a stream file; CRC candidates compared on the same data.

Prints the median of several rounds of the writer (append + flush every 1000 messages + close
with fsync) and its ratio against a peer measured in the same rounds on the same messages: a bare
writer (``encode_frame`` per message, one ``write`` per 1000, fsync at the end; no beacons, no
per-stream state, no sequence numbering), i.e. what the frames alone cost from Python. The two
take turns within each round. Then the aim (400k msgs/s) and the upstream Rust writer's figure,
as a labelled reference.

Then many writers (``--many-only`` runs just this): 1, 2 and 4 writer processes append the same
total to one file (one key, so every flush of one finds the others' appends and catches up on
them), started together; their aggregate rate (messages over the wall time from the start signal
to the last close) against one writer in this process, the contenders taking turns round by
round. ``--before DIR`` adds the same writer processes running the package found in ``DIR`` (a
checkout of an earlier version) to the same rounds, for a before/after of the same run. Then the
CRC16/CDMA2000 candidates on 1M 100-byte payloads.

Last, the cost of each durability setting (``--durability-only`` runs just this): messages
published one receipt at a time (``publish``, blocking; ``apublish`` under Trio, as a
``FileBroker`` publishes, its syncs in a worker thread) and in batches of 100 (``publish_many``),
for 3 s a run (``--durability-seconds``) from opening a new file to closing it (so "close" pays
its one sync, and "interval" its syncs, about one a second). The settings take turns within each
round (interleaved); the median of the rounds is printed with its ratio to "close" of the same
run. ``--dir`` puts these files on the disk to measure (default: the system's temporary
directory).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import trio
from _common import (
    MESSAGES,
    PAYLOAD,
    QUOTED_SOURCE,
    REFERENCE_WRITER,
    interleaved_rates,
    reference,
    row,
)

from trio_streams.file.durability import Durability
from trio_streams.file.format import Header, encode_frame, encode_header, encode_key
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

AIM = 400_000
T0 = 1_700_000_000_000
#: The largest interval the header holds: a file of less than 4 GiB gets no beacon at all.
NO_BEACONS = (1 << 32) - 1


def write_file(path: Path, count: int) -> int:
    if path.exists():
        path.unlink()
    writer = StreamWriter(path, durability="close")  # as the peer: one sync, at the end
    append = writer.append
    for i in range(count):
        append("bench", PAYLOAD, T0 + i)
        if i % 1000 == 999:
            writer.flush()
    writer.close()
    return count


def bare_write(path: Path, count: int) -> int:
    """The peer: the same messages as :func:`write_file`, as bare frames in a beacon-free file."""
    key = encode_key("bench")
    with open(path, "wb") as out:
        out.write(encode_header(Header(path.name, T0, NO_BEACONS)))
        frames = []
        for i in range(count):
            frames.append(encode_frame(key, 0, i + 1, T0 + i, PAYLOAD))
            if i % 1000 == 999:
                out.write(b"".join(frames))
                out.flush()
                frames.clear()
        out.write(b"".join(frames))
        out.flush()
        os.fsync(out.fileno())
    return count


def _child(path: str, count: int) -> None:
    """One of the writer processes: open, say so, wait for the start, write ``count``."""
    writer = StreamWriter(path, durability="close")  # as the peer: one sync, at the end
    append = writer.append
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        append("bench", PAYLOAD, T0 + i)
        if i % 1000 == 999:
            writer.flush()
    writer.close()
    print("done", flush=True)


def processes_write(
    path: Path,
    count: int,
    processes: int,
    package: str | None = None,
    rates: list[float] | None = None,
) -> int:
    """``processes`` writer processes append ``count`` messages between them to one file (with
    the package found in the directory ``package``, else this one); returns how many. Their
    aggregate rate, from the start signal to the last close (the processes' start left out),
    is appended to ``rates``."""
    if path.exists():
        path.unlink()
    Path(str(path) + ".tip").unlink(missing_ok=True)
    StreamWriter(path).close()
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = package
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(path), str(count // processes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(processes)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
    start = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:  # done once the last has closed (its interpreter's exit left out)
        assert child.stdout is not None and child.stdout.readline() == "done\n"
    elapsed = time.perf_counter() - start
    for child in children:
        child.communicate(timeout=600)
        assert child.returncode == 0
    with FileReader(path) as reader:
        assert reader.file_size() == path.stat().st_size
    written = count // processes * processes
    if rates is not None:
        rates.append(written / elapsed)
    return written


PEER = "1 writer in this process (peer)"


def _name(processes: int, label: str) -> str:
    return f"{processes} writer process{'es' if processes > 1 else ''}{label}"


def many_writers(tmp: str, count: int, repeats: int, before: str | None) -> None:
    """The writer processes and the in-process peer, taking turns round by round."""
    path = Path(tmp) / "many.ss"
    trees: dict[str, str | None] = {"": None}
    if before is not None:
        trees[" (before)"] = before
    measured: dict[str, list[float]] = {}
    contenders: dict[str, Callable[[], int]] = {PEER: lambda: write_file(path, count)}
    for label, package in trees.items():
        for processes in (1, 2, 4):
            into = measured[_name(processes, label)] = []
            contenders[_name(processes, label)] = partial(
                processes_write, path, count, processes, package, into
            )
    peer_rates = interleaved_rates(contenders, repeats)[PEER]
    peer = statistics.median(peer_rates)
    print(f"\nmany writers on one file, {count} messages (aggregate; median of {repeats} "
          "interleaved rounds; peer: one writer in this process, same rounds)")  # fmt: skip
    print("rounds (k msgs/s):")
    for name, runs in {PEER: peer_rates, **measured}.items():
        print(f"  {name:<36} " + ", ".join(f"{r / 1000:.0f}" for r in runs))
    print(row(PEER, peer, peer=peer, peer_name="in-process"))
    for label in trees:
        one = statistics.median(measured[_name(1, label)])
        for processes in (1, 2, 4):
            rate = statistics.median(measured[_name(processes, label)])
            print(row(_name(processes, label), rate, peer=peer, peer_name="in-process")
                  + f"   x{rate / one:5.2f} vs 1 process{label}")  # fmt: skip
    for processes, aim in ((2, 0.8), (4, 0.6)):
        rate = statistics.median(measured[_name(processes, "")])
        print(
            f"aim: {processes} processes >= {aim} of one writer: x{rate / peer:4.2f} "
            f"({'met' if rate >= aim * peer else 'NOT met'})"
        )


def crc_candidates(count: int) -> None:
    payloads = [os.urandom(100) for _ in range(1000)]
    candidates: dict[str, Callable[[bytes], int]] = {}
    import fastcrc

    candidates["fastcrc (Rust ext, chosen)"] = fastcrc.crc16.cdma2000
    try:
        import anycrc

        candidates["anycrc (C ext)"] = anycrc.Model("CRC16-CDMA2000").calc
    except ImportError:
        print("anycrc not installed: pip install anycrc to compare")
    try:
        import crcmod

        candidates["crcmod (C ext)"] = crcmod.mkCrcFun(0x1C867, initCrc=0xFFFF, rev=False, xorOut=0)
    except ImportError:
        print("crcmod not installed: pip install crcmod to compare")
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0xC867) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
        table.append(crc)

    def pure(data: bytes) -> int:
        crc = 0xFFFF
        for b in data:
            crc = ((crc << 8) & 0xFFFF) ^ table[(crc >> 8) ^ b]
        return crc

    candidates["pure-Python table"] = pure
    reference = [pure(p) for p in payloads]
    results = {}
    for name, fn in candidates.items():
        assert [fn(p) for p in payloads] == reference, name
        n = count if name != "pure-Python table" else count // 20
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for _round in range(n // 1000):
                for p in payloads:
                    fn(p)
            times.append((time.perf_counter() - start) / n)
        results[name] = statistics.median(times)
    best = min(results.values())
    print("\nCRC16/CDMA2000 of 100-byte payloads (median of 3, ns per call; x = vs fastest)")
    for name, per_call in sorted(results.items(), key=lambda kv: kv[1]):
        print(f"  {name:<28} {per_call * 1e9:8.0f} ns   x{per_call / best:6.1f}")


#: The settings compared, the peer first.
SETTINGS: tuple[tuple[Durability, float | None], ...] = (
    ("close", None),
    ("interval", 1.0),
    ("publish", None),
)
BATCH = 100


def _publish_one_by_one(
    path: Path, seconds: float, durability: Durability, every: float | None
) -> int:
    with StreamWriter(path, durability=durability, sync_interval=every) as writer:
        publish, count, until = writer.publish, 0, time.perf_counter() + seconds
        while time.perf_counter() < until:
            for _ in range(BATCH):
                publish("bench", PAYLOAD, T0 + count)
                count += 1
    return count


def _apublish_one_by_one(
    path: Path, seconds: float, durability: Durability, every: float | None
) -> int:
    async def run() -> int:
        writer = StreamWriter(path, durability=durability, sync_interval=every)
        count, until = 0, time.perf_counter() + seconds
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.keep_synced)
            while time.perf_counter() < until:
                for _ in range(BATCH):
                    await writer.apublish("bench", PAYLOAD, T0 + count)
                    count += 1
            nursery.cancel_scope.cancel()
        await writer.aclose()
        return count

    return trio.run(run)


def _publish_batches(
    path: Path, seconds: float, durability: Durability, every: float | None
) -> int:
    with StreamWriter(path, durability=durability, sync_interval=every) as writer:
        count, until = 0, time.perf_counter() + seconds
        while time.perf_counter() < until:
            writer.publish_many([("bench", PAYLOAD, T0 + count + i) for i in range(BATCH)])
            count += BATCH
    return count


def durability_costs(directory: str | None, seconds: float, repeats: int) -> None:
    """Each setting's rate in each workload: interleaved rounds, medians, ratio to "close"."""
    workloads = {
        "publish (one receipt each)": _publish_one_by_one,
        "apublish under Trio (as FileBroker)": _apublish_one_by_one,
        f"publish_many (batches of {BATCH})": _publish_batches,
    }
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        print(f"\ndurability: files in {tmp} ({_filesystem(tmp)}); runs of {seconds:g} s from "
              f"open to close; median of {repeats} interleaved rounds, x = vs \"close\" of "
              "the same run")  # fmt: skip
        for name, run in workloads.items():
            rates: dict[str, list[float]] = {setting: [] for setting, _ in SETTINGS}
            for _ in range(repeats):
                for setting, every in SETTINGS:
                    path = Path(tmp) / f"{setting}.ss"
                    path.unlink(missing_ok=True)
                    start = time.perf_counter()
                    done = run(path, seconds, setting, every)
                    rates[setting].append(done / (time.perf_counter() - start))
            peer = statistics.median(rates["close"])
            print(f"{name}:")
            for setting, every in SETTINGS:
                label = f"  {setting}" + (f" ({every:g} s)" if every else "")
                print(row(label, statistics.median(rates[setting]), peer=peer, peer_name="close"))


def _filesystem(path: str) -> str:
    """The type of the file system holding ``path`` (Linux), as ``df`` names it."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return "file system unknown"
    best = ("", "unknown")
    real = os.path.realpath(path)
    for line in mounts:
        fields = line.split()
        point = fields[1]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(
            best[0]
        ):
            best = (point, fields[2])
    return f"{best[1]} on {best[0]}"


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--durability-seconds", type=float, default=3.0)
    parser.add_argument("--durability-only", action="store_true")
    parser.add_argument("--dir", default=None, help="where the durability runs write")
    parser.add_argument("--many-only", action="store_true", help="only the many writers")
    parser.add_argument("--before", default=None, metavar="DIR", help="an earlier checkout")
    return parser.parse_args()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]))
        return
    args = _parse_args()
    if args.durability_only:
        durability_costs(args.dir, args.durability_seconds, args.repeats)
        return
    if args.many_only:
        with tempfile.TemporaryDirectory() as tmp:
            many_writers(tmp, args.messages, args.repeats, args.before)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path, bare = Path(tmp) / "bench.ss", Path(tmp) / "bare.ss"
        rates = interleaved_rates(
            {
                "bare frames (the peer)": lambda: bare_write(bare, args.messages),
                "write (append+flush+fsync)": lambda: write_file(path, args.messages),
            },
            args.repeats,
        )
        size = path.stat().st_size
    peer = statistics.median(rates["bare frames (the peer)"])
    rate = statistics.median(rates["write (append+flush+fsync)"])
    print(f"{args.messages} messages of {len(PAYLOAD)} bytes, {size / 1e6:.0f} MB file; median "
          f"of {args.repeats} interleaved rounds; rounds (k msgs/s):")  # fmt: skip
    for name, runs in rates.items():
        print(f"  {name:<34} {', '.join(f'{r / 1000:.0f}' for r in runs)}")
    print(row("bare frames (the peer)", peer, peer=peer, peer_name="bare frames"))
    print(row("write (append+flush+fsync)", rate, peer=peer, peer_name="bare frames"))
    print(f"aim: {AIM / 1000:.0f}k msgs/s ({'met' if rate >= AIM else 'NOT met'})")
    print(reference("Rust writer", f"~{REFERENCE_WRITER / 1000:.0f}k msgs/s", QUOTED_SOURCE))
    with tempfile.TemporaryDirectory() as tmp:
        many_writers(tmp, args.messages, min(args.repeats, 3), args.before)
    crc_candidates(args.messages)
    durability_costs(args.dir, args.durability_seconds, args.repeats)


if __name__ == "__main__":
    main()
