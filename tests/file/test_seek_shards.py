"""Seeking streams that live in a shard other than 0, in several shards, or nowhere in the file.

``shard=None`` (the default) means any shard of the key; an int means exactly that shard. Every
seek is checked against a brute-force oracle over the decoded messages of the file.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import pytest

from trio_streams.core.positions import Position, PositionKind
from trio_streams.file import FilePosition
from trio_streams.file.errors import SeekError, SeekOutOfRangeError
from trio_streams.file.follower import FileSource
from trio_streams.file.format import MAX_U64, Message
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

from .conftest import VECTORS

CONSUMER = VECTORS / "consumer.ss"  # key "hello", shard 1, seq 0..99, then EOS
T0 = 1_700_000_000_000
Row = tuple[str, int, int, int]  # key, shard, seq, timestamp_ms


def write(path: Path, rows: Iterable[Row], *, interval: int) -> list[Message]:
    """Write ``rows`` (payload: a text naming the row) and return the file's messages."""
    with StreamWriter(path, beacon_interval=interval, created_at_ms=T0) as out:
        for key, shard, seq, ts in rows:
            out.write_message(key, shard, seq, ts, f"{key}/{shard}/{seq}".encode())
    with FileReader(path) as reader:
        return list(reader)


def oracle(
    messages: list[Message], position: Position, key: str, shard: int | None
) -> Message | int | None:
    """Where a seek must land, by brute force: on a message; at the tip (an int: the stream's
    last seq, 0 if it has none); or nowhere (None: refused)."""
    mine = [m for m in messages if m.stream_key == key and shard in (None, m.shard)]
    by_seq = position.kind is PositionKind.SEQUENCE
    assert position.value is not None
    for m in mine:
        if (m.seq >= position.value) if by_seq else (m.timestamp_ms > position.value):
            return m
    last = max((m.seq for m in mine), default=0)
    return last if by_seq and position.value <= last + 1 else None


def check_seek(
    reader: FileReader, messages: list[Message], position: Position, key: str, shard: int | None
) -> None:
    expected = oracle(messages, position, key, shard)
    before = reader.offset
    if expected is None:
        with pytest.raises(SeekOutOfRangeError):
            reader.seek(position, key=key, shard=shard)
        assert reader.offset == before
        return
    reader.seek(position, key=key, shard=shard)
    got = reader.read_messages(1)
    if isinstance(expected, Message):
        assert got == [expected], (position, key, shard)
    else:
        assert got == [], (position, key, shard)


def refusal(reader: FileReader, position: Position, shard: int | None = None) -> str:
    offset = reader.offset
    with pytest.raises(SeekOutOfRangeError) as refused:
        reader.seek(position, shard=shard)
    assert reader.offset == offset
    return str(refused.value)


# ---- consumer.ss: every message in shard 1 -------------------------------------------------


def test_replaying_consumer_ss_to_seq_50_and_seeking_to_sequence_50_redelivers_seq_50() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        read = reader.read_messages(51)
        assert read[-1].seq == 50 and read[-1].shard == 1
        reader.seek(FilePosition.sequence(50))
        assert reader.read_messages(1) == [read[-1]]


def test_sequence_1_on_consumer_ss_lands_on_seq_1_not_the_tip() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        reader.seek(FilePosition.sequence(1))
        assert [(m.shard, m.seq) for m in reader.read_messages(1)] == [(1, 1)]


def test_a_position_read_off_any_delivery_of_consumer_ss_redelivers_it() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        delivered = list(reader)
        for message in delivered:
            reader.seek(FilePosition.sequence(message.seq, stream="hello"))
            assert reader.read_messages(1) == [message]


def test_every_timestamp_seek_on_consumer_ss_lands_on_the_first_message_strictly_later() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        messages = list(reader)
        targets = {m.timestamp_ms + d for m in messages for d in (-1, 0)}
        for target in sorted(targets):
            for shard in (None, 1):
                check_seek(reader, messages, FilePosition.timestamp(target), "hello", shard)


def test_the_first_and_last_message_of_consumer_ss_and_one_past_it() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        messages = list(reader)
        for shard in (None, 1):
            reader.seek(FilePosition.sequence(0), shard=shard)
            assert reader.read_messages(1) == [messages[0]]
            reader.seek(FilePosition.sequence(99), shard=shard)
            assert reader.read_messages(1) == [messages[-1]]
            reader.seek(FilePosition.sequence(100), shard=shard)  # the next one: the tip
            assert reader.read_messages(1) == []


def test_sequence_last_plus_2_is_refused_stating_the_real_last_sequence() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        said = refusal(reader, FilePosition.sequence(101))
        assert "sequence 101 is past the last sequence 99 of stream 'hello'" in said
        said = refusal(reader, FilePosition.sequence(101), shard=1)
        assert "past the last sequence 99 of stream 'hello' (shard 1)" in said


def test_shard_0_of_consumer_ss_has_no_messages_and_the_refusal_says_so_and_where_they_are() -> (
    None
):
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        said = refusal(reader, FilePosition.sequence(50), shard=0)
        assert "stream 'hello' (shard 0), which has no messages in this file" in said
        assert "has messages only in shard 1" in said
        assert "past the last sequence 0" not in said
        said = refusal(reader, FilePosition.timestamp(0), shard=0)
        assert "no message of stream 'hello' (shard 0) is later than 0 ms" in said
        assert "it has no messages in this file" in said


def test_an_empty_shard_accepts_sequence_0_and_1_at_the_tip_like_in_process() -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        tip = reader.seek(FilePosition.end())
        reader.seek(FilePosition.beginning())
        for n in (0, 1):
            assert reader.seek(FilePosition.sequence(n), shard=0) == tip
            assert reader.read_messages(1) == []
        refusal(reader, FilePosition.sequence(2), shard=0)


async def test_a_file_source_on_consumer_ss_seeks_to_sequence_50_in_shard_1() -> None:
    async with await FileSource.open(CONSUMER, mode="replay", keys=["hello"]) as source:
        await source.seek(FilePosition.sequence(50))
        batch = source.read_available(1)
        assert [(m.shard, m.seq) for m in batch] == [(1, 50)]


# ---- absent keys and shard 2**64-1 ---------------------------------------------------------


@pytest.mark.parametrize("interval", [128, 1024])
def test_an_absent_key_accepts_sequence_0_and_1_and_refuses_2_saying_it_has_no_messages(
    tmp_path: Path, interval: int
) -> None:
    path = tmp_path / "a.ss"
    write(path, [("a", 0, n, T0 + n) for n in range(1, 300)], interval=interval)
    with FileReader(path) as everything:
        tip = everything.seek(FilePosition.end())
    with FileReader(path, keys=["nobody"]) as reader:
        assert reader.seek(FilePosition.sequence(0)) == tip
        assert reader.seek(FilePosition.sequence(1)) == tip
        said = refusal(reader, FilePosition.sequence(2))
        assert "sequence 2 is past 1, the next sequence of stream 'nobody'" in said
        assert "has no messages in this file" in said and "shard" not in said
        said = refusal(reader, FilePosition.timestamp(0))
        assert "no message of stream 'nobody' is later than 0 ms" in said


@pytest.mark.parametrize("interval", [128, 1024, 4096])
def test_a_key_in_shard_2_pow_64_minus_1_is_found_with_any_shard_and_with_its_shard(
    tmp_path: Path, interval: int
) -> None:
    top = MAX_U64
    assert top == 2**64 - 1
    rows = [(k, s, n, T0 + 3 * n + i) for n in range(1, 200) for i, (k, s) in
            enumerate((("top", top), ("a", 0), ("b", 7)))]  # fmt: skip
    messages = write(tmp_path / "top.ss", rows, interval=interval)
    with FileReader(tmp_path / "top.ss", keys=["top"]) as reader:
        for n in (0, 1, 2, 100, 199, 200, 201):
            for shard in (None, top, 0):
                check_seek(reader, messages, FilePosition.sequence(n), "top", shard)
        said = refusal(reader, FilePosition.sequence(201), shard=top)
        assert f"past the last sequence 199 of stream 'top' (shard {top})" in said


def test_a_shard_outside_u64_is_refused(tmp_path: Path) -> None:
    with FileReader(CONSUMER, keys=["hello"]) as reader:
        for shard in (-1, 2**64):
            with pytest.raises(SeekError, match=r"outside 0\.\.2\*\*64-1"):
                reader.seek(FilePosition.sequence(1), shard=shard)


# ---- a key in two shards -------------------------------------------------------------------


def two_shards(count: int) -> list[Row]:
    """Key "k" in shards 0 and 5, interleaved with the same seqs, and key "x" between them."""
    rows: list[Row] = []
    for n in range(1, count + 1):
        rows += [("k", 0, n, T0 + 10 * n), ("x", 0, n, T0 + 10 * n + 1)]
        rows += [("k", 5, n, T0 + 10 * n + 2)]
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("interval", [128, 4096])
def test_a_key_in_two_shards_lands_exactly_when_every_beacon_has_room_for_every_stream(
    tmp_path: Path, interval: int
) -> None:
    # At 128 there is nothing to survey; at 4096 each beacon has 7 slots for the 3 streams.
    messages = write(tmp_path / "two.ss", two_shards(400), interval=interval)
    with FileReader(tmp_path / "two.ss", keys=["k"]) as reader:
        for n in range(0, 403, 7):
            for shard in (None, 0, 5, 6):
                check_seek(reader, messages, FilePosition.sequence(n), "k", shard)
        for m in messages[::13]:
            for shard in (None, 0, 5):
                check_seek(reader, messages, FilePosition.timestamp(m.timestamp_ms), "k", shard)


def test_a_key_in_two_shards_with_rotating_markers_lands_on_a_later_message_never_a_wrong_one(
    tmp_path: Path,
) -> None:
    # At 1024 each beacon has one slot for 3 streams: "any shard" may bracket past the first
    # match in file order (documented), but never lands on a message that misses the target;
    # naming the shard is exact.
    messages = write(tmp_path / "two.ss", two_shards(400), interval=1024)
    order = {m.offset: i for i, m in enumerate(messages)}
    with FileReader(tmp_path / "two.ss", keys=["k"]) as reader:
        for n in range(1, 401, 3):
            position = FilePosition.sequence(n)
            first = oracle(messages, position, "k", None)
            assert isinstance(first, Message)
            reader.seek(position)
            (landed,) = reader.read_messages(1)
            assert landed.stream_key == "k" and landed.seq >= n
            assert order[landed.offset] >= order[first.offset]
            for shard in (0, 5):
                check_seek(reader, messages, position, "k", shard)


# ---- interval 128: no marker fits, 20k messages, random targets against the oracle ----------


@pytest.mark.slow
def test_every_seek_in_a_20k_message_file_at_interval_128_lands_where_a_linear_scan_says(
    tmp_path: Path,
) -> None:
    rng = random.Random(128)
    rows: list[Row] = []
    # Sequence numbers of a stream follow each other (readers hold them to it); "b" starts at
    # 0, as SeaStreamer's own sample does.
    seqs = {("a", 0): 0, ("b", 1): -1, ("c", 0): 0, ("c", 3): 0}
    ts = T0
    for _ in range(20_000):
        stream = rng.choice([("a", 0), ("a", 0), ("b", 1), ("c", 0), ("c", 3)])
        seqs[stream] += 1
        ts += rng.choice((0, 1, 1, 5))
        rows.append((*stream, seqs[stream], ts))
    messages = write(tmp_path / "many.ss", rows, interval=128)
    assert len(messages) == 20_000
    for key, shards in (("a", (None, 0, 1)), ("b", (None, 1, 0)), ("c", (None, 0, 3))):
        with FileReader(tmp_path / "many.ss", keys=[key]) as reader:
            top = max(m.seq for m in messages if m.stream_key == key)
            for _ in range(12):
                shard = rng.choice(shards)
                n = rng.choice((rng.randint(0, top + 3), top, top + 1, top + 2))
                check_seek(reader, messages, FilePosition.sequence(n), key, shard)
                t = rng.randint(T0 - 1, ts + 1)
                check_seek(reader, messages, FilePosition.timestamp(t), key, shard)


@pytest.mark.parametrize("interval", [1024, 4096])
def test_every_seek_in_a_file_with_rotating_markers_lands_where_a_linear_scan_says(
    tmp_path: Path, interval: int
) -> None:
    # Ten keys, one shard each (three of them not 0): more streams than marker slots.
    rng = random.Random(interval)
    streams = [(f"k{i}", (0, 0, 0, 1, 9, 0, 0, MAX_U64, 0, 0)[i]) for i in range(10)]
    seqs = dict.fromkeys(streams, 0)
    rows: list[Row] = []
    for i in range(8_000):
        stream = streams[min(int(rng.expovariate(0.4)), 9)]
        seqs[stream] += 1
        rows.append((*stream, seqs[stream], T0 + i // 3))
    messages = write(tmp_path / "keys.ss", rows, interval=interval)
    for key, shard in streams[:6] + streams[7:8]:
        with FileReader(tmp_path / "keys.ss", keys=[key]) as reader:
            for _ in range(15):
                n = rng.randint(0, seqs[(key, shard)] + 2)
                for which in (None, shard):
                    check_seek(reader, messages, FilePosition.sequence(n), key, which)
                t = rng.randint(T0 - 1, T0 + 8_000 // 3 + 1)
                check_seek(reader, messages, FilePosition.timestamp(t), key, None)


def test_beacons_larger_than_the_first_read_of_a_probe_are_read_whole_and_seeks_stay_exact(
    tmp_path: Path,
) -> None:
    # 14 markers of 100-character keys make 1785-byte beacons at interval 8192.
    rng = random.Random(8192)
    keys = [f"{i:02d}" + "k" * 98 for i in range(20)]
    seqs = dict.fromkeys(keys, 0)
    rows: list[Row] = []
    for i in range(6_000):
        key = rng.choice(keys)
        seqs[key] += 1
        rows.append((key, 0, seqs[key], T0 + i))
    messages = write(tmp_path / "long.ss", rows, interval=8192)
    for key in keys[:4]:
        with FileReader(tmp_path / "long.ss", keys=[key]) as reader:
            for _ in range(10):
                n = rng.randint(0, seqs[key] + 2)
                check_seek(reader, messages, FilePosition.sequence(n), key, None)
                t = rng.randint(T0 - 1, T0 + 6_001)
                check_seek(reader, messages, FilePosition.timestamp(t), key, 0)
