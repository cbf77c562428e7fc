"""Reading 1M messages of 100 bytes (CRC checked) from a stream file, as a replay would.

Prints the median of several runs of the sync reader and of the Trio source's
``read_available`` loop, with ratios against the Rust reader on this machine class (~145k
msgs/s) and the aim (300k msgs/s).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import median_rate, parse_args, row
from file_write import write_file

from trio_streams.file.follower import FileSource
from trio_streams.file.reader import FileReader

RUST_READER = 145_000
AIM = 300_000


def read_sync(path: Path) -> int:
    count = 0
    with FileReader(path) as reader:
        while batch := reader.read_messages(4096):
            count += len(batch)
    return count


def read_trio(path: Path) -> int:
    async def run() -> int:
        count = 0
        async with await FileSource.open(path, mode="replay", keys=["bench"]) as source:
            while True:
                batch = source.read_available(1024)
                count += len(batch)
                if not batch:
                    if source.ended:
                        return count
                    await source.wait()

    return trio.run(run)


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.ss"
        write_file(path, args.messages)
        assert read_sync(path) == args.messages
        rate, rates = median_rate(lambda: read_sync(path), args.repeats)
        print(f"{args.messages} messages of 100 bytes; runs: "
              f"{', '.join(f'{r / 1000:.0f}k' for r in rates)}")  # fmt: skip
        print(row("FileReader.read_messages", rate, peer=RUST_READER, aim=AIM))
        rate, rates = median_rate(lambda: read_trio(path), args.repeats)
        print(row("FileSource.read_available (Trio)", rate, peer=RUST_READER, aim=AIM))


if __name__ == "__main__":
    main()
