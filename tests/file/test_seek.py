"""Seeking by sequence number and by timestamp on every key of every vector, and the survey."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_streams.file import FilePosition
from trio_streams.file.errors import SeekError, SeekOutOfRangeError
from trio_streams.file.format import Beacon, Marker, Message
from trio_streams.file.reader import FileReader
from trio_streams.file.survey import Survey

from .conftest import ALL_SS


def _by_stream(path: Path) -> dict[tuple[str, int], list[Message]]:
    """Every message in the file, by stream: a seek finds messages after an end-of-stream
    message too (reading through one stops there; see ``_read_on``)."""
    streams: dict[tuple[str, int], list[Message]] = {}
    with FileReader(path, on_eos="include") as reader:
        for message in reader:
            streams.setdefault((message.stream_key, message.shard), []).append(message)
    return streams


def _read_on(messages: list[Message], path: Path, after: Message) -> list[Message]:
    """What reading through the file yields after ``after``: up to the next end-of-stream."""
    with FileReader(path, on_eos="include", internal=True) as reader:
        everything = list(reader)
    start = everything.index(after) + 1
    stop = next((i for i in range(start, len(everything)) if everything[i].is_eos), None)
    return [m for m in everything[start:stop] if m in messages]


def _landing(reader: FileReader) -> Message:
    batch = reader.read_messages(1)
    assert batch, "seek landed at the end"
    return batch[0]


@pytest.mark.parametrize("path", ALL_SS, ids=lambda p: p.name)
def test_seek_by_sequence_lands_on_every_message(path: Path) -> None:
    for (key, shard), messages in _by_stream(path).items():
        with FileReader(path, keys=[key]) as reader:
            for message in messages:
                reader.seek(FilePosition.sequence(message.seq), shard=shard)
                assert _landing(reader) == message
            # Before the first message: lands on the first.
            reader.seek(FilePosition.sequence(0), shard=shard)
            assert _landing(reader) == messages[0]


@pytest.mark.parametrize("path", ALL_SS, ids=lambda p: p.name)
def test_seek_by_timestamp_lands_strictly_later(path: Path) -> None:
    for (key, shard), messages in _by_stream(path).items():
        with FileReader(path, keys=[key]) as reader:
            for message in messages:
                for target in (message.timestamp_ms - 1, message.timestamp_ms):
                    expected = next((m for m in messages if m.timestamp_ms > target), None)
                    if expected is None:
                        with pytest.raises(SeekOutOfRangeError):
                            reader.seek(FilePosition.timestamp(target), shard=shard)
                        continue
                    reader.seek(FilePosition.timestamp(target), shard=shard)
                    assert _landing(reader) == expected


@pytest.mark.parametrize("path", ALL_SS, ids=lambda p: p.name)
def test_seek_past_the_end_is_refused_and_leaves_the_reader_where_it_was(path: Path) -> None:
    for (key, shard), messages in _by_stream(path).items():
        with FileReader(path, keys=[key]) as reader:
            first = reader.read_messages(3)
            offset = reader.offset
            with pytest.raises(SeekOutOfRangeError) as refused:
                reader.seek(FilePosition.sequence(messages[-1].seq + 2), shard=shard)
            assert key in str(refused.value)
            with pytest.raises(SeekOutOfRangeError):
                reader.seek(FilePosition.timestamp(messages[-1].timestamp_ms), shard=shard)
            assert reader.offset == offset
            rest = list(reader)
            assert first == messages[:3]
            assert rest == _read_on(messages, path, first[-1])


def test_sequence_one_past_the_last_lands_at_the_end(tmp_path: Path) -> None:
    path = next(p for p in ALL_SS if p.name == "one-key-1024.ss")
    with FileReader(path, keys=["orders"]) as reader:
        reader.seek(FilePosition.sequence(201))
        assert reader.read_messages(10) == []


def test_seek_needs_a_key_when_reading_several() -> None:
    path = next(p for p in ALL_SS if p.name == "three-keys-2048.ss")
    with FileReader(path) as reader, pytest.raises(SeekError):
        reader.seek(FilePosition.sequence(3))


def test_beginning_and_end() -> None:
    path = next(p for p in ALL_SS if p.name == "five-keys-4096-noeos.ss")
    with FileReader(path) as reader:
        reader.seek(FilePosition.end())
        assert reader.offset == path.stat().st_size
        assert reader.read_messages(5) == []
        reader.seek(FilePosition.beginning())
        assert reader.read_messages(1)[0].offset == 128


def _mock(present: dict[int, int], size: int = 10) -> dict[int, Beacon]:
    """Beacons 1..size; those in ``present`` carry a marker for key "k" with that seq."""
    return {
        i: Beacon(0, (Marker("k", 0, present[i], 0, 0),) if i in present else ())
        for i in range(1, size + 1)
    }


def _survey(beacons: dict[int, Beacon], target: int) -> tuple[int, int | None]:
    survey = Survey(FilePosition.sequence(target), "k", 0, len(beacons))
    probes = 0
    while (index := survey.next_probe()) is not None:
        survey.observe(index, beacons[index])
        probes += 1
        assert probes <= len(beacons)
    return survey.left, survey.right


def test_survey_brackets_like_upstream() -> None:
    seqs = {i: i * 10 for i in range(1, 11)}
    assert _survey(_mock(seqs), 35) == (3, 4)
    assert _survey(_mock({i: s for i, s in seqs.items() if i != 4}), 35) == (3, 5)
    assert _survey(_mock({i: s for i, s in seqs.items() if i not in (3, 4)}), 35) == (2, 5)
    assert _survey(_mock({8: 80, 9: 90}), 35) == (0, 8)
    assert _survey(_mock({}), 35) == (0, None)
    assert _survey(_mock(seqs), 5) == (0, 1)
    assert _survey(_mock(seqs), 500) == (10, None)
