"""``trio-streams file write FILE``: write the messages of an ndjson input (``file decode
--format ndjson``'s output) into a stream file, all or nothing."""

from __future__ import annotations

import argparse
import os
import sys

from ..file.errors import StreamFileError
from ..file.format import DEFAULT_BEACON_INTERVAL, Header, encode_header
from ..file.ndjson_input import InputError, check_against, read_input
from ..file.writer import StreamWriter
from .args import error_line

__all__ = ["write"]


def write(args: argparse.Namespace) -> int:
    # The whole input is read and checked before the file is touched: all or nothing.
    try:
        given = read_input(sys.stdin, beacon_interval=args.beacon_interval)
    except InputError as exc:
        raise SystemExit(error_line(str(exc))) from None
    header = given.header
    # Options win over the header line, which wins over the defaults; all only matter when the
    # file is created (an existing file keeps its header).
    interval: int | None = args.beacon_interval
    created_at_ms: int | None = args.created_at_ms
    file_name: str | None = args.file_name
    if header is not None:
        interval = header.beacon_interval if interval is None else interval
        created_at_ms = header.created_at_ms if created_at_ms is None else created_at_ms
        file_name = header.file_name if file_name is None else file_name
    interval = DEFAULT_BEACON_INTERVAL if interval is None else interval
    try:  # what the options give the header of a new file
        encode_header(
            Header(file_name or os.path.basename(args.file), created_at_ms or 0, interval)
        )
    except StreamFileError as exc:
        raise SystemExit(error_line(exc.reason)) from None
    # The given sequence numbers are checked against the file's, then written: no other
    # writer may append in between.
    existed = os.path.lexists(args.file)
    writer = StreamWriter(
        args.file,
        beacon_interval=interval,
        created_at_ms=created_at_ms,
        file_name=file_name,
        exclusive=True,
    )
    try:
        check_against(given.rows, writer.last_sequences(), writer.path)
    except InputError as exc:
        writer.close()
        if not existed:  # created just now: leave no file behind, as other refusals do
            os.unlink(args.file)
        raise SystemExit(error_line(f"{exc}; nothing was written")) from None
    try:
        for row in given.rows:
            writer.write_message(row.stream_key, row.shard, row.seq, row.timestamp_ms, row.payload)
    finally:
        writer.close(eos=args.eos, eos_timestamp_ms=args.eos_timestamp_ms)
    return 0
