"""``trio-streams file stat FILE``: a stream file's header, streams, counts, sequence ranges
and beacons, then its consumer groups."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from ..file.format import HEADER_SIZE
from ..file.groups import list_groups
from ..file.reader import FileReader
from .file_groups import print_groups

__all__ = ["stat"]

#: Files at least this large show a progress bar on ``stat`` (when stderr is a terminal).
_PROGRESS_FROM_BYTES = 32 << 20


@dataclass
class _StreamStats:
    count: int = 0
    first_seq: int = 0
    last_seq: int = 0
    first_ts: int = 0
    last_ts: int = 0
    bytes: int = 0


def stat(args: argparse.Namespace) -> int:
    out = sys.stdout
    with FileReader(args.file, internal=True, on_eos="include") as reader:
        header = reader.header
        size = reader.file_size()
        show_progress = args.progress or (size >= _PROGRESS_FROM_BYTES and sys.stderr.isatty())
        streams: dict[tuple[str, int], _StreamStats] = {}
        beacons = 0
        last_beacon = None
        eos_count = 0
        shown = -1
        while True:
            batch = reader.read_messages(8192)
            for m in batch:
                if m.is_eos:
                    eos_count += 1
                    continue
                stats = streams.get((m.stream_key, m.shard))
                if stats is None:
                    stats = streams[(m.stream_key, m.shard)] = _StreamStats(
                        first_seq=m.seq, first_ts=m.timestamp_ms
                    )
                stats.count += 1
                stats.last_seq = max(stats.last_seq, m.seq)
                stats.first_seq = min(stats.first_seq, m.seq)
                stats.first_ts = min(stats.first_ts, m.timestamp_ms)
                stats.last_ts = max(stats.last_ts, m.timestamp_ms)
                stats.bytes += len(m.payload)
            if reader.decoder.last_beacon is not last_beacon:
                last_beacon = reader.decoder.last_beacon
            if show_progress:
                percent = reader.offset * 100 // max(size, 1)
                if percent != shown:
                    shown = percent
                    bar = "#" * (percent // 4)
                    sys.stderr.write(f"\rscanning [{bar:<25}] {percent:3d}%")
                    sys.stderr.flush()
            if not batch and reader.at_eof:
                break
        if show_progress:
            sys.stderr.write("\n")
        reader.check_finished()
        beacons = max(0, size - 1) // header.beacon_interval if size > HEADER_SIZE else 0
        out.write(f"file:             {reader.path}\n")
        out.write(f"header name:      {header.file_name}\n")
        out.write(f"created at:       {header.created_at_ms} ms\n")
        out.write(f"beacon interval:  {header.beacon_interval} bytes\n")
        out.write(f"size:             {size} bytes\n")
        out.write(f"beacons:          {beacons}\n")
        out.write(f"end of stream:    {'yes' if eos_count else 'no'}\n")
        out.write(f"messages:         {sum(s.count for s in streams.values())}\n")
        for (key, shard), s in sorted(streams.items()):
            out.write(
                f"  {key} shard {shard}: {s.count} messages, seq {s.first_seq}..{s.last_seq}, "
                f"ts {s.first_ts}..{s.last_ts} ms, {s.bytes} payload bytes\n"
            )
    print_groups(list_groups(args.file), out)
    return 0
