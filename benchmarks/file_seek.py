"""Seeking by sequence number in stream files with and without beacon markers for the key.

Files of 100-byte messages at interval 128 (no marker fits: nothing to survey) and 4096 (7
markers per beacon), each sought for: a key that is there (random targets), a key that is not
(refused after reading the file), and a key written in shard 1 (sought with the default "any
shard"). A large file at interval 8192 sought for an absent key shows the worst case of the
survey: every beacon probed, none decided.

Prints the median time of one seek per case and two ratios against peers measured in the same
run on the same file and targets:

- "linear": a scan from the start with the library's reader up to the message the seek lands on
  (to the end when refused), i.e. what a seek without beacons costs;
- "old survey": the seek with the survey that rescanned outward from the middle on every probe
  (kept here, below, as it was before it became amortised), on fewer targets since it is slow:
  tens of seconds per seek at interval 128 (``--old-seeks 0`` skips it).

A reference, not a peer (not measured here): upstream sea-streamer-file 1.0.0-rc.2, measured
2026-11 on this machine class (2 shared cores) and not repeated in 2026-12, took 0.88 s (2 MB,
interval 128), 1.75 s (5 MB, interval 128) and 1.2 s (absent key, 137 MB, interval 8192) per seek.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent))

from _common import PAYLOAD, QUOTED_SOURCE

import trio_streams.file.reader as reader_module
from tests.file.survey_oracle import RescanningSurvey
from trio_streams.file import FilePosition
from trio_streams.file.errors import SeekOutOfRangeError
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

REFERENCE = QUOTED_SOURCE
UPSTREAM_SECONDS = {"2 MB @128": 0.88, "5 MB @128": 1.75, "137 MB @8192 absent": 1.2}


#: The survey before it was amortised (kept with the tests, as their order oracle).
OldSurvey = RescanningSurvey


@contextmanager
def old_survey() -> Iterator[None]:
    """Seek with :class:`OldSurvey`, surveying even where no marker fits, as the old code did."""
    namespace = vars(reader_module)
    saved = namespace["Survey"], namespace["markers_per_beacon"]
    namespace["Survey"], namespace["markers_per_beacon"] = OldSurvey, lambda interval: 1
    try:
        yield
    finally:
        namespace["Survey"], namespace["markers_per_beacon"] = saved


def write(path: Path, count: int, interval: int, shard: int) -> int:
    with StreamWriter(path, beacon_interval=interval, created_at_ms=1_700_000_000_000) as out:
        for i in range(count):
            out.write_message("bench", shard, i + 1, 1_700_000_000_000 + i, PAYLOAD)
    return path.stat().st_size


Run = Callable[[Path, str, int | None, int], float]


def seek_once(path: Path, key: str, shard: int | None, target: int) -> float:
    with FileReader(path, keys=[key]) as reader:
        start = time.perf_counter()
        try:
            reader.seek(FilePosition.sequence(target), shard=shard)
        except SeekOutOfRangeError:
            pass
        return time.perf_counter() - start


def linear_once(path: Path, key: str, shard: int | None, target: int) -> float:
    start = time.perf_counter()
    with FileReader(path, keys=[key]) as reader:
        while batch := reader.read_messages(4096):
            if any(m.seq >= target and shard in (None, m.shard) for m in batch):
                break
    return time.perf_counter() - start


def median_of(run: Run, path: Path, key: str, shard: int | None, targets: list[int]) -> float:
    return statistics.median(run(path, key, shard, t) for t in targets)


def case(
    name: str,
    path: Path,
    key: str,
    shard: int | None,
    targets: list[int],
    old_targets: list[int],
) -> None:
    ours = median_of(seek_once, path, key, shard, targets)
    linear = median_of(linear_once, path, key, shard, targets)
    if old_targets:
        with old_survey():
            old = median_of(seek_once, path, key, shard, old_targets)
        vs_old = f"{old * 1e3:10.1f} ms  x{old / ours:7.1f}"
    else:
        vs_old = f"{'(skipped)':>13} {'':>8}"
    print(
        f"{name:<30} {ours * 1e3:9.2f} ms   {linear * 1e3:9.1f} ms  x{linear / ours:6.1f}   "
        f"{vs_old}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=15_000, help="messages per small file")
    parser.add_argument("--seeks", type=int, default=41, help="random targets per case")
    parser.add_argument(
        "--old-seeks", type=int, default=1, help="targets for the old survey (0: skip it)"
    )
    parser.add_argument(
        "--large-messages", type=int, default=1_000_000, help="messages of the large file (0: skip)"
    )
    args = parser.parse_args()
    rng = random.Random(20261101)
    targets = [rng.randint(1, args.messages) for _ in range(args.seeks)]
    old_targets = targets[: args.old_seeks]
    # Refused seeks (sequence 5 of a stream without messages) read the whole file each time.
    refused, old_refused = [5] * 5, [5] * min(args.old_seeks, 1)
    print(
        "case                           median seek   linear scan (x = linear / seek)   "
        "old survey (x = old / seek)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for interval in (128, 4096):
            for shard in (0, 1):
                path = Path(tmp) / f"seek-{interval}-{shard}.ss"
                size = write(path, args.messages, interval, shard)
                label = f"{size / 1e6:.1f} MB @{interval}"
                if shard == 0:
                    case(f"{label} present key", path, "bench", None, targets, old_targets)
                    case(f"{label} absent key", path, "absent", None, refused, old_refused)
                else:
                    case(f"{label} shard 1, any shard", path, "bench", None, targets, old_targets)
                    case(f"{label} shard 1, sought in 0", path, "bench", 0, refused, old_refused)
                path.unlink()
        if args.large_messages:
            path = Path(tmp) / "seek-large.ss"
            size = write(path, args.large_messages, 8192, 0)
            label = f"{size / 1e6:.0f} MB @8192"
            case(f"{label} absent key", path, "absent", None, [5] * 3, old_refused[:1])
    print(f"\nreference (not a peer; {REFERENCE}), seconds per seek:")
    for name, seconds in UPSTREAM_SECONDS.items():
        print(f"  {name:<22} {seconds:5.2f} s")


if __name__ == "__main__":
    main()
