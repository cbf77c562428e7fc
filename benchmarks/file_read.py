"""Reading 1M messages of 100 bytes (CRC checked) from a stream file, as a replay would.

Prints the median of several rounds of the sync reader and of the Trio source's
``read_available`` loop, with ratios against a peer measured in the same rounds on the same
messages: a bare reader (the file read in chunks of 1 MiB, as the library reads, each frame
parsed with ``struct`` and its CRC checked, one ``Message`` per frame, counted and dropped; no
beacons to step over, no key filter), i.e. what decoding alone costs from Python. The three take
turns within each round (interleaved), so a disturbance of the shared machine hits them all.
Then the aim (300k msgs/s) and the upstream Rust reader's figure, as a labelled reference.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_READER, interleaved_rates, parse_args, reference, row
from file_write import bare_write, write_file

from trio_streams.file.follower import FileSource
from trio_streams.file.format import FRAME_FIXED, HEADER_SIZE, Message, crc16
from trio_streams.file.reader import FileReader

AIM = 300_000


#: The bare reader's chunk: what it reads at a time, as the library's reader does (1 MiB).
BARE_CHUNK = 1 << 20


def bare_read(path: Path) -> int:
    """The peer: decode a beacon-free file (:func:`bare_write`) frame by frame, CRC checked,
    streaming it in chunks and keeping no message; with the library's own shortcuts (each key
    decoded once, a ``Message`` built as a plain tuple), so it bounds the library's decoding."""
    unpack, fixed = FRAME_FIXED.unpack_from, FRAME_FIXED.size
    new = tuple.__new__
    keys: dict[bytes, str] = {}
    count = 0
    with open(path, "rb", buffering=0) as f:
        f.seek(HEADER_SIZE)
        data = b""
        p = 0
        offset = HEADER_SIZE  # of data[0] in the file
        while chunk := f.read(BARE_CHUNK):
            offset += p
            data = data[p:] + chunk
            p, end = 0, len(data)
            while p < end:
                klen = data[p]
                start = p + 1 + klen + fixed
                if start > end:
                    break
                shard, seq, ts, size = unpack(data, p + 1 + klen)
                pe = start + size
                if pe + 3 > end:
                    break
                kb = data[p + 1 : p + 1 + klen]
                key = keys.get(kb) or keys.setdefault(kb, kb.decode("ascii"))
                payload = data[start:pe]
                if crc16(payload) != (data[pe] << 8) | data[pe + 1]:
                    raise ValueError(f"checksum mismatch at {offset + p}")
                new(Message, (key, shard, seq, ts, payload, offset + p))
                count += 1
                p = pe + 3
        if p != len(data):
            raise ValueError("the file ends inside a frame")
    return count


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
        assert read_sync(path) == bare_read(bare) == read_trio(path) == args.messages
        contenders = {
            "bare reader (the peer)": lambda: bare_read(bare),
            "FileReader.read_messages": lambda: read_sync(path),
            "FileSource.read_available (Trio)": lambda: read_trio(path),
        }
        rates = interleaved_rates(contenders, args.repeats)
    peer = statistics.median(rates["bare reader (the peer)"])
    print(f"{args.messages} messages of 100 bytes; median of {args.repeats} interleaved rounds; "
          "rounds (k msgs/s):")  # fmt: skip
    for name, runs in rates.items():
        print(f"  {name:<34} {', '.join(f'{r / 1000:.0f}' for r in runs)}")
    for name, runs in rates.items():
        print(row(name, statistics.median(runs), peer=peer, peer_name="bare reader"))
    sync, trio_rate = (statistics.median(rates[n]) for n in list(contenders)[1:])
    print(f"FileSource vs FileReader: x{trio_rate / sync:4.2f}")
    print(f"aim: {AIM / 1000:.0f}k msgs/s ({'met' if min(sync, trio_rate) >= AIM else 'NOT met'})")
    print(reference("Rust reader, CRC checked", f"~{REFERENCE_READER / 1000:.0f}k msgs/s"))


if __name__ == "__main__":
    main()
