"""Writing 1M messages of 100 bytes to a stream file; CRC candidates compared on the same data.

Prints the median of several runs of the writer (append + flush every 1000 messages + close with
fsync), its ratio against the Rust writer's figure on this machine class (~380k msgs/s) and the
aim (400k msgs/s), then the CRC16/CDMA2000 candidates measured on 1M 100-byte payloads.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import PAYLOAD, median_rate, parse_args, row

from trio_streams.file.writer import StreamWriter

RUST_WRITER = 380_000
AIM = 400_000


def write_file(path: Path, count: int) -> int:
    if path.exists():
        path.unlink()
    writer = StreamWriter(path)
    append = writer.append
    for i in range(count):
        append("bench", PAYLOAD, 1_700_000_000_000 + i)
        if i % 1000 == 999:
            writer.flush()
    writer.close()
    return count


def crc_candidates(count: int) -> None:
    payloads = [os.urandom(100) for _ in range(1000)]
    candidates = {}
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


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.ss"
        rate, rates = median_rate(lambda: write_file(path, args.messages), args.repeats)
        size = path.stat().st_size
    print(f"{args.messages} messages of {len(PAYLOAD)} bytes, {size / 1e6:.0f} MB file, "
          f"runs: {', '.join(f'{r / 1000:.0f}k' for r in rates)}")  # fmt: skip
    print(row("write (append+flush+fsync)", rate, peer=RUST_WRITER, aim=AIM))
    crc_candidates(args.messages)


if __name__ == "__main__":
    main()
