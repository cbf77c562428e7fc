"""Writer and follower processes of one stream file, for the concurrent-append tests.

``python -m tests.file.many_writers write PATH ID COUNT KEYS [--batch N]`` appends COUNT
messages, payload ``ID:n`` (n from 0), the n-th on key ``k{n % KEYS}``, flushing every 1..N
messages (a random batch); after each flush it prints ``ack n`` for the last message it wrote,
unbuffered; with ``--report``, it prints ``ready`` once open and waits for a line on its standard
input to start, and prints a last line ``caught-up decoded N tips M``: the messages it decoded
to catch up with the others after opening and the tip records it adopted instead. (A crash
mid-append is the kit's: ``KillPoint.during_append`` in an ``AppProcess``.)

``python -m tests.file.many_writers follow PATH`` follows the file live from its tip (start it
on a file nobody wrote yet to see every message), prints ``ready`` once its reader is open, then
one ``key seq payload`` line per message, and exits after the first message of key ``end``.

:func:`reencoded` is the oracle: the file as one writer would have written its messages.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import trio

from trio_streams.file.encoder import FrameEncoder
from trio_streams.file.follower import FileSource
from trio_streams.file.format import HEADER_SIZE, encode_header
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter


def reencoded(path: Path | str) -> bytes:
    """The project's encoder's bytes for the messages decoded from ``path``, EOS included."""
    with FileReader(path, internal=True, on_eos="include") as reader:
        header = reader.header
        encoder = FrameEncoder(header.beacon_interval, HEADER_SIZE)
        encoder.beacon_now()  # at interval 128 the first beacon follows the header at once
        for message in reader:
            encoder.write(
                message.stream_key,
                message.shard,
                message.seq,
                message.timestamp_ms,
                message.payload,
            )
        reader.check_finished()
    return encode_header(header) + encoder.take()


def _write(args: argparse.Namespace) -> None:
    rng = random.Random(args.id)
    writer = StreamWriter(args.path, beacon_interval=args.interval)
    opening = writer.decoded_to_catch_up
    out = sys.stdout.buffer
    if args.report:  # start with the others
        out.write(b"ready\n")
        out.flush()
        sys.stdin.readline()
    n = args.start
    while n < args.count:
        batch = min(rng.randint(1, args.batch), args.count - n)
        for _ in range(batch):
            writer.append(f"k{n % args.keys}", f"{args.id}:{n}".encode())
            n += 1
        writer.flush()
        out.write(b"ack %d\n" % (n - 1))
        out.flush()
    writer.close()
    if args.report:
        out.write(
            b"caught-up decoded %d tips %d\n"
            % (writer.decoded_to_catch_up - opening, writer.tips_adopted)
        )


async def _follow(args: argparse.Namespace) -> None:
    out = sys.stdout.buffer
    async with await FileSource.open(args.path, mode="live") as source:
        out.write(b"ready\n")
        out.flush()
        while True:
            batch = source.read_available(4096)
            if not batch:
                await source.wait()
                continue
            out.write(
                b"".join(b"%s %d %s\n" % (m.stream_key.encode(), m.seq, m.payload) for m in batch)
            )
            out.flush()
            if any(m.stream_key == "end" for m in batch):
                return


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="role", required=True)
    write = sub.add_parser("write")
    write.add_argument("path")
    write.add_argument("id")
    write.add_argument("count", type=int)
    write.add_argument("keys", type=int)
    write.add_argument("--start", type=int, default=0)
    write.add_argument("--batch", type=int, default=64)
    write.add_argument("--interval", type=int, default=1024)
    write.add_argument("--report", action="store_true")
    follow = sub.add_parser("follow")
    follow.add_argument("path")
    args = parser.parse_args()
    if args.role == "write":
        _write(args)
    else:
        trio.run(_follow, args)


if __name__ == "__main__":
    main()
