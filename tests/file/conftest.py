"""Vectors written by the Rust writer, and helpers to read their ndjson descriptions."""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent.parent / "data" / "vectors"
CREATED_AT_MS = 1_700_000_000_000
EOS_TIMESTAMP_MS = 1_700_000_999_999


@dataclass(frozen=True)
class Vector:
    name: str
    path: Path
    beacon_interval: int
    eos: bool

    @property
    def ndjson(self) -> Path:
        return self.path.with_suffix(".ndjson")

    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.ndjson.read_text().splitlines() if line]

    def messages(self) -> list[tuple[str, int, int, int, bytes]]:
        return [as_tuple(row) for row in self.rows()]


def as_tuple(row: dict[str, Any]) -> tuple[str, int, int, int, bytes]:
    payload = (
        row["payload"].encode() if row["encoding"] == "utf8" else base64.b64decode(row["payload"])
    )
    return (row["stream_key"], row["shard"], row["seq"], row["timestamp_ms"], payload)


def _interval(path: Path) -> int:
    """The beacon interval in the header (a u32 after the magic, version, name and created-at)."""
    head = path.read_bytes()[:128]
    return int.from_bytes(head[12 + head[3] : 16 + head[3]], "big")


def _ends_with_eos(path: Path) -> bool:
    """Whether the file's last 56 bytes are the EOS frame (key, shard 0, seq 0, ts, "EOS")."""
    tail = path.read_bytes()[-56:]
    return tail[:22] == b"\x15SEA_STREAMER_INTERNAL" and tail[-6:] == b"EOS\xed\x7c\r"


#: Vectors with an ndjson description (written by the Rust writer from it).
DESCRIBED = [
    Vector(
        p.stem,
        p.with_suffix(".ss"),
        _interval(p.with_suffix(".ss")),
        _ends_with_eos(p.with_suffix(".ss")),
    )
    for p in sorted(VECTORS.glob("*.ndjson"))
]
#: Every .ss vector, including the upstream samples without a description.
ALL_SS = sorted(VECTORS.glob("*.ss"))


@pytest.fixture
def copy_vector(tmp_path: Path) -> Any:
    def copy(path: Path) -> Path:
        target = tmp_path / path.name
        shutil.copyfile(path, target)
        return target

    return copy
