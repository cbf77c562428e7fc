"""What a failing handler mounted on a recording writes into it (the incident guide in
docs/guides/record-and-top.md): retry copies, unless ``max_attempts=1``."""

from __future__ import annotations

from pathlib import Path

from trio_streams.core.delivery import RETRY_COUNT_HEADER
from trio_streams.file import FileStream
from trio_streams.file.envelope import open_envelope
from trio_streams.file.reader import FileReader

from .apps import file_app, run_to_end, write_numbers


def _retry_counts(path: Path) -> list[str | None]:
    with FileReader(path) as reader:
        return [open_envelope(m.payload)[1].get(RETRY_COUNT_HEADER) for m in reader]


async def _replay_failing_on_2(path: Path, *, max_attempts: int) -> list[int]:
    app, broker = file_app(path, existing_only=True)
    runs: list[int] = []

    @broker.subscriber(FileStream("s").replay(), name="sub", max_attempts=max_attempts)
    async def handle(n: int) -> None:
        runs.append(n)
        if n == 2:
            raise ValueError("two fails")

    await run_to_end(app)
    return runs


async def test_a_failing_handler_on_a_recording_appends_its_retry_copies_to_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "incident.ss"
    write_numbers(path, 3)
    runs = await _replay_failing_on_2(path, max_attempts=3)
    assert runs == [1, 2, 3, 2, 2]
    assert _retry_counts(path) == [None, None, None, "1", "2"]


async def test_with_max_attempts_1_each_failure_shows_once_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "work.ss"
    write_numbers(path, 3)
    before = path.read_bytes()
    runs = await _replay_failing_on_2(path, max_attempts=1)
    assert runs == [1, 2, 3]
    assert path.read_bytes() == before
