"""Reading damaged copies of a stream file and sorting the outcomes by kind."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trio_streams.file.errors import StreamFormatError
from trio_streams.file.format import Message
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

#: What a damaged copy did to a reader, one of:
#: ``detected`` — a typed error naming the file and a byte offset, every message before it intact;
#: ``harmless`` — every message read back exactly;
#: ``timestamp only`` — every message intact but a timestamp (the format cannot tell);
#: ``garbled then detected`` — a changed message was returned before the error;
#: ``silent`` — no error, and a message was lost, added, or changed in key, shard, seq or payload.
KINDS = ("detected", "harmless", "timestamp only", "garbled then detected", "silent")


def three_keys_file(path: Path, *, beacon_interval: int = 1 << 20) -> list[Message]:
    """About 3 KB: 60 messages, 20 on each of 3 keys, 48-byte frames; its messages."""
    with StreamWriter(path, beacon_interval=beacon_interval, created_at_ms=1_700_000_000_000) as w:
        for n in range(60):
            key = ("k0", "k1", "k2")[n % 3]
            w.append(key, f"payload-{n:06d}".encode(), 1_700_000_000_000 + 7 * n)
    return read_all(path)[0]


def read_all(path: Path) -> tuple[list[Message], StreamFormatError | None]:
    """The messages a replay returns (internal ones included), and the error that ended it."""
    out: list[Message] = []
    try:
        with FileReader(path, internal=True, on_eos="include") as reader:
            for message in reader:
                out.append(message)
    except StreamFormatError as error:
        return out, error
    return out, None


def _ident(m: Message) -> tuple[str, int, int, bytes]:
    return (m.stream_key, m.shard, m.seq, m.payload)


def classify(original: list[Message], path: Path) -> tuple[str, StreamFormatError | None]:
    got, error = read_all(path)
    if error is not None:
        if error.offset is None or error.path != str(path):
            return "silent", error
        intact = [_ident(m) for m in got] == [_ident(m) for m in original[: len(got)]]
        return ("detected" if intact else "garbled then detected"), error
    if [_ident(m) for m in got] != [_ident(m) for m in original]:
        return "silent", None
    if [m.timestamp_ms for m in got] != [m.timestamp_ms for m in original]:
        return "timestamp only", None
    return "harmless", None


@dataclass
class Census:
    """Counts by kind over every single-bit flip of a file, with an example of each kind."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)

    def add(self, kind: str, offset: int, bit: int, error: StreamFormatError | None) -> None:
        self.counts[kind] += 1
        self.examples.setdefault(kind, [])
        if len(self.examples[kind]) < 5:
            self.examples[kind].append((offset, bit, "" if error is None else str(error)))

    def block(self, title: str) -> str:
        lines = [title]
        for kind in KINDS:
            lines.append(f"  {kind:<22} {self.counts[kind]:>6}")
        lines.append(f"  {'copies':<22} {sum(self.counts.values()):>6}")
        return "\n".join(lines)
