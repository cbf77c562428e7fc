"""The beacon survey's cost, counted in probes and steps (never timed), and its bracket.

A survey over beacons that never mention the stream probes every beacon once; the work of
finding each probe is amortised, so the whole survey takes at most c·B·log2(B) steps for B
beacons, and the bracket is still the tightest one.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import ClassVar

import pytest

import trio_streams.file.reader as reader_module
from tests.file.survey_oracle import RescanningSurvey
from trio_streams.file import FilePosition
from trio_streams.file.errors import SeekOutOfRangeError
from trio_streams.file.format import Beacon, Marker
from trio_streams.file.reader import FileReader
from trio_streams.file.survey import Survey
from trio_streams.file.writer import StreamWriter

#: The constant c of the bound c·B·log2(B) on a survey's steps.
C = 2


def bound(beacons: int) -> float:
    """c·B·log2(B), made positive for a file of one or two beacons."""
    return C * (beacons + 1) * math.log2(beacons + 2)


def run(survey: Survey, beacons: dict[int, Beacon]) -> list[int]:
    """Drive ``survey`` over ``beacons`` (absent: unreadable) and return the probe order."""
    order: list[int] = []
    seen: set[int] = set()
    while (index := survey.next_probe()) is not None:
        assert index not in seen, f"beacon {index} probed twice"
        seen.add(index)
        order.append(index)
        survey.observe(index, beacons.get(index))
    return order


def random_file(rng: random.Random, count: int, mentioned: float) -> dict[int, Beacon]:
    """Beacons 1..count whose markers for "k" (seq = 10·index) appear with odds ``mentioned``;
    the others carry another stream's marker, or are missing."""
    beacons = {}
    for i in range(1, count + 1):
        if rng.random() < mentioned:
            beacons[i] = Beacon(0, (Marker("k", 0, 10 * i, 10 * i, 0),))
        elif rng.random() < 0.8:
            beacons[i] = Beacon(0, (Marker("other", 0, i, i, 0),))
    return beacons


@pytest.mark.parametrize("count", [1, 2, 3, 100, 20_000])
def test_a_survey_over_beacons_without_markers_probes_each_once_within_c_b_log_b_steps(
    count: int,
) -> None:
    for beacons in ({}, {i: Beacon(0, ()) for i in range(1, count + 1)}):
        survey = Survey(FilePosition.sequence(5), "k", None, count)
        order = run(survey, beacons)
        assert sorted(order) == list(range(1, count + 1))
        assert survey.probes == count
        assert survey.steps <= bound(count)
        # In fact linear: a call and about three pointer hops per beacon.
        assert survey.steps <= 5 * (count + 1)
        assert (survey.left, survey.right) == (0, None)


@pytest.mark.parametrize("mentioned", [0.0, 0.001, 0.01, 0.1, 0.5, 1.0])
def test_a_survey_finds_the_tightest_bracket_within_c_b_log_b_steps(mentioned: float) -> None:
    rng = random.Random(int(mentioned * 1000))
    count = 5_000
    for _ in range(20):
        beacons = random_file(rng, count, mentioned)
        target = rng.randint(0, 10 * count + 20)
        survey = Survey(FilePosition.sequence(target), "k", None, count)
        run(survey, beacons)
        decided = [i for i, b in beacons.items() if b.markers[0].stream_key == "k"]
        left = max((i for i in decided if 10 * i < target), default=0)
        right = min((i for i in decided if 10 * i >= target), default=None)
        assert (survey.left, survey.right) == (left, right)
        assert survey.left_marker == ((10 * left, 10 * left) if left else None)
        assert survey.steps <= bound(count)


def test_the_amortised_survey_probes_in_the_same_order_as_the_rescanning_one() -> None:
    rng = random.Random(7)
    for _ in range(200):
        count = rng.randint(1, 300)
        beacons = random_file(rng, count, rng.choice((0.0, 0.05, 0.3, 0.9)))
        target = FilePosition.sequence(rng.randint(0, 10 * count + 20))
        new, old = Survey(target, "k", 0, count), RescanningSurvey(target, "k", 0, count)
        assert run(new, beacons) == run(old, beacons)
        assert (new.left, new.right, new.left_marker) == (old.left, old.right, old.left_marker)


def test_any_shard_is_right_if_any_marker_of_the_key_reaches_the_target() -> None:
    beacons = {
        1: Beacon(0, (Marker("k", 3, 5, 5, 0), Marker("k", 0, 1, 1, 0))),
        2: Beacon(0, (Marker("k", 3, 20, 20, 0), Marker("k", 0, 2, 2, 0))),
        3: Beacon(0, (Marker("x", 0, 99, 99, 0),)),
    }
    survey = Survey(FilePosition.sequence(10), "k", None, 3)
    run(survey, beacons)
    assert (survey.left, survey.right, survey.left_marker) == (1, 2, (5, 5))
    survey = Survey(FilePosition.sequence(10), "k", 0, 3)
    run(survey, beacons)
    assert (survey.left, survey.right, survey.left_marker) == (2, None, (2, 2))


class CountingSurvey(Survey):
    made: ClassVar[list[CountingSurvey]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        CountingSurvey.made.append(self)


@pytest.fixture
def surveys(monkeypatch: pytest.MonkeyPatch) -> list[CountingSurvey]:
    CountingSurvey.made = []
    monkeypatch.setattr(reader_module, "Survey", CountingSurvey)
    return CountingSurvey.made


def write(path: Path, interval: int, count: int, shard: int = 0) -> None:
    with StreamWriter(path, beacon_interval=interval, created_at_ms=1_700_000_000_000) as out:
        for n in range(1, count + 1):
            out.write_message("k", shard, n, 1_700_000_000_000 + n, b"x" * 40)


def test_seeking_an_absent_key_probes_every_beacon_once_within_c_b_log_b_steps(
    tmp_path: Path, surveys: list[CountingSurvey]
) -> None:
    path = tmp_path / "k.ss"
    write(path, 1024, 20_000)
    beacons = path.stat().st_size // 1024
    with FileReader(path, keys=["absent"]) as reader, pytest.raises(SeekOutOfRangeError):
        reader.seek(FilePosition.sequence(2))
    (survey,) = surveys
    assert survey.probes == beacons
    assert survey.steps <= bound(beacons)


def test_seeking_shard_0_of_a_shard_1_file_probes_every_beacon_once_within_c_b_log_b_steps(
    tmp_path: Path, surveys: list[CountingSurvey]
) -> None:
    path = tmp_path / "k.ss"
    write(path, 1024, 20_000, shard=1)
    beacons = path.stat().st_size // 1024
    with FileReader(path, keys=["k"]) as reader:
        with pytest.raises(SeekOutOfRangeError):
            reader.seek(FilePosition.sequence(9), shard=0)
        (survey,) = surveys
        assert survey.probes == beacons and survey.steps <= bound(beacons)
        reader.seek(FilePosition.sequence(15_000))  # any shard: the markers decide
        assert [m.seq for m in reader.read_messages(1)] == [15_000]
        assert surveys[1].probes <= 2 + 2 * math.log2(beacons)


def test_a_file_whose_interval_fits_no_marker_is_not_surveyed(
    tmp_path: Path, surveys: list[CountingSurvey]
) -> None:
    path = tmp_path / "k.ss"
    write(path, 128, 2_000)
    with FileReader(path, keys=["k"]) as reader:
        reader.seek(FilePosition.sequence(1_500))
        assert [m.seq for m in reader.read_messages(1)] == [1_500]
    assert surveys == []
