"""Reading 1M messages of 100 bytes (CRC checked) from a stream file, as a replay would.

Prints the median of several runs of the sync reader and of the Trio source's
``read_available`` loop, with ratios against a peer measured in the same run on the same
messages: a bare reader (the file read whole, each frame parsed with ``struct`` and its CRC
checked, one ``Message`` per frame; no beacons to step over, no chunking, no key filter), i.e.
what decoding alone costs from Python. Then the aim (300k msgs/s) and the upstream Rust reader's
figure, as references.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_READER, median_rate, parse_args, reference, row
from file_write import bare_write, write_file

from trio_streams.file.follower import FileSource
from trio_streams.file.format import FRAME_FIXED, HEADER_SIZE, Message, crc16
from trio_streams.file.reader import FileReader

AIM = 300_000


def bare_read(path: Path) -> int:
    """The peer: decode a beacon-free file (:func:`bare_write`) frame by frame, CRC checked."""
    data = path.read_bytes()
    unpack, fixed = FRAME_FIXED.unpack_from, FRAME_FIXED.size
    messages = []
    p, end = HEADER_SIZE, len(data)
    while p < end:
        klen = data[p]
        key = data[p + 1 : p + 1 + klen].decode("ascii")
        shard, seq, ts, size = unpack(data, p + 1 + klen)
        start = p + 1 + klen + fixed
        payload = data[start : start + size]
        if crc16(payload) != int.from_bytes(data[start + size : start + size + 2]):
            raise ValueError(f"checksum mismatch at {p}")
        messages.append(Message(key, shard, seq, ts, payload, p))
        p = start + size + 3
    return len(messages)


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
        path, bare = Path(tmp) / "bench.ss", Path(tmp) / "bare.ss"
        write_file(path, args.messages)
        bare_write(bare, args.messages)
        assert read_sync(path) == bare_read(bare) == args.messages
        peer, _ = median_rate(lambda: bare_read(bare), args.repeats)
        rate, rates = median_rate(lambda: read_sync(path), args.repeats)
        print(f"{args.messages} messages of 100 bytes; runs: "
              f"{', '.join(f'{r / 1000:.0f}k' for r in rates)}")  # fmt: skip
        print(row("bare reader (the peer)", peer, peer=peer, peer_name="bare reader"))
        print(row("FileReader.read_messages", rate, peer=peer, peer_name="bare reader"))
        trio_rate, _ = median_rate(lambda: read_trio(path), args.repeats)
        print(
            row("FileSource.read_available (Trio)", trio_rate, peer=peer, peer_name="bare reader")
            + f"   x{trio_rate / rate:4.2f} vs FileReader"
        )
        print(
            f"aim: {AIM / 1000:.0f}k msgs/s ({'met' if min(rate, trio_rate) >= AIM else 'NOT met'})"
        )
        print(reference("Rust reader, CRC checked", f"~{REFERENCE_READER / 1000:.0f}k msgs/s"))


if __name__ == "__main__":
    main()
