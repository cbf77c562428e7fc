"""``trio-streams publish FILE KEY``: the messages go out to a stream file in one append.

No other writer's message comes between them; the file's lock is held for the append only, so
running apps and other publishers may write the file at the same time. One receipt a line is
printed: ``KEY seq:N ts:MS offset:BYTES``.
"""

from __future__ import annotations

import argparse
import sys

from ..file.envelope import seal
from ..file.format import DEFAULT_BEACON_INTERVAL
from ..file.keys import check_stream_key
from ..file.writer import StreamWriter
from .publish_input import read_messages

__all__ = ["publish_to_file"]


def publish_to_file(args: argparse.Namespace) -> int:
    """Read and check every message of the command line, append them all, print the receipts."""
    messages = read_messages(args, check_stream_key)
    items = [(m.key, seal(m.payload, m.headers), m.timestamp_ms) for m in messages]
    interval = DEFAULT_BEACON_INTERVAL if args.beacon_interval is None else args.beacon_interval
    with StreamWriter(args.target, beacon_interval=interval) as writer:
        receipts = writer.publish_many(items)
    sys.stdout.write("".join(f"{receipt}\n" for receipt in receipts))
    return 0
