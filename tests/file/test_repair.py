"""``trio-streams file repair``: it says what it will do, then moves an unreadable tail aside."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trio_streams.cli.commands import main as cli_main
from trio_streams.file.errors import UnprovenTailError
from trio_streams.file.lock import hold_exclusively
from trio_streams.file.reader import FileReader
from trio_streams.file.repair import apply_repair, plan_repair
from trio_streams.file.writer import StreamWriter

from .test_write_safety import CREATED_AT_MS, frames_of, make

REPO = Path(__file__).resolve().parents[2]


def repair(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``trio-streams file repair ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "trio_streams", "file", "repair", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )


def repair_here(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The same, run in this process (``main`` with its streams swapped): quicker."""
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), io.StringIO(), io.StringIO()
    try:
        code = cli_main(["file", "repair", *args])
        out, err = sys.stdout.getvalue(), sys.stderr.getvalue()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return subprocess.CompletedProcess(args, code, out, err)


def damaged_length(tmp_path: Path, place: int = 12) -> tuple[Path, bytes, int, int]:
    """A file whose frame ``place`` declares 16 MiB too many bytes: (path, bytes, offset,
    messages before it)."""
    path = make(tmp_path, "no-beacons")
    frame = frames_of(path)[place]
    data = bytearray(path.read_bytes())
    data[frame.positions[frame.field("size")[0]]] ^= 0x01
    path.write_bytes(data)
    return path, bytes(data), frame.offset, place


def test_repair_moves_the_unreadable_tail_to_a_side_file_and_truncates(tmp_path: Path) -> None:
    path, data, offset, _ = damaged_length(tmp_path)
    result = repair(str(path), "--yes")
    assert result.returncode == 0, result.stderr
    side = Path(f"{path}.tail-{offset}")
    assert side.read_bytes() == data[offset:]
    assert path.read_bytes() == data[:offset]
    assert f"moved {len(data) - offset} bytes to {side}" in result.stdout


def test_repair_says_what_it_will_do_and_asks_first(tmp_path: Path) -> None:
    path, data, offset, kept = damaged_length(tmp_path)
    result = repair(str(path), stdin="n\n")
    assert result.returncode == 1
    out = result.stdout
    assert f"everything before byte {offset} decodes ({kept} messages)" in out
    assert f"repair moves the {len(data) - offset} bytes from byte {offset}" in out
    assert f"{path}.tail-{offset}" in out
    assert f"{kept} messages stay" in out
    assert "not provably a write cut short by a crash" in out
    assert out.index("repair moves") < out.index("move them? [y/N]")
    assert "refused: nothing changed" in out
    assert path.read_bytes() == data
    assert not Path(f"{path}.tail-{offset}").exists()
    accepted = repair(str(path), stdin="y\n")
    assert accepted.returncode == 0, accepted.stderr
    assert path.read_bytes() == data[:offset]


def test_a_dry_run_only_prints(tmp_path: Path) -> None:
    path, data, offset, _ = damaged_length(tmp_path)
    result = repair_here(str(path), "--dry-run")
    assert result.returncode == 0
    assert f"repair moves the {len(data) - offset} bytes" in result.stdout
    assert "dry run: nothing changed" in result.stdout
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_after_repair_a_writer_appends_and_readers_read_everything_before_the_offset(
    tmp_path: Path,
) -> None:
    path, _, offset, kept = damaged_length(tmp_path)
    with FileReader(path) as reader:
        before = reader.read_messages(kept)
    with pytest.raises(UnprovenTailError):
        StreamWriter(path)
    plan = plan_repair(path)
    fd = os.open(path, os.O_RDWR)
    try:
        lock = hold_exclusively(fd, str(path))
        apply_repair(plan, fd)
        os.close(lock)
    finally:
        os.close(fd)
    with StreamWriter(path) as writer:
        seq, _, at = writer.append("orders", b"after repair", CREATED_AT_MS + 100)
    assert at == offset
    with FileReader(path) as reader:
        after = list(reader)
    assert after[:-1] == before
    assert after[-1].payload == b"after repair"
    assert seq == max(m.seq for m in before if m.stream_key == "orders") + 1


def test_an_existing_side_file_is_never_overwritten(tmp_path: Path) -> None:
    path, data, offset, _ = damaged_length(tmp_path)
    taken = Path(f"{path}.tail-{offset}")
    taken.write_bytes(b"keep me")
    Path(f"{taken}.1").write_bytes(b"and me")
    result = repair_here(str(path), "--yes")
    assert result.returncode == 0, result.stderr
    assert taken.read_bytes() == b"keep me"
    assert Path(f"{taken}.1").read_bytes() == b"and me"
    assert Path(f"{taken}.2").read_bytes() == data[offset:]


def test_the_side_file_is_written_and_fsynced_before_the_file_is_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data, offset, _ = damaged_length(tmp_path)
    side = Path(f"{path}.tail-{offset}")
    events: list[str] = []
    real_fsync, real_ftruncate = os.fsync, os.ftruncate

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(f"fsync {os.readlink(f'/proc/self/fd/{fd}')}")

    def ftruncate(fd: int, length: int) -> None:
        assert side.read_bytes() == data[offset:], "truncating before the tail was saved"
        events.append(f"truncate {length}")
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    fd = os.open(path, os.O_RDWR)
    try:
        apply_repair(plan_repair(path, fd), fd)
    finally:
        os.close(fd)
    assert events.index(f"fsync {side}") < events.index(f"truncate {offset}")
    assert events[-1] == f"fsync {path}"


def test_a_file_that_decodes_needs_nothing(tmp_path: Path) -> None:
    path = make(tmp_path, "beacons")
    data = path.read_bytes()
    result = repair_here(str(path), "--yes")
    assert result.returncode == 0
    assert f"all {len(data)} bytes decode" in result.stdout
    assert "nothing to repair" in result.stdout
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_crash_cut_tail_is_moved_aside_too_and_called_a_cut(tmp_path: Path) -> None:
    path = make(tmp_path, "beacons")
    data = path.read_bytes()
    last = frames_of(path)[-1]
    path.write_bytes(data[:-40])
    plan = plan_repair(path)
    assert plan.offset == last.offset
    assert "a write cut short by a crash" in plan.reason
    assert "not provably" not in plan.reason


def test_repair_waits_for_the_lock_and_refuses_after_wait_seconds(tmp_path: Path) -> None:
    path, data, _, _ = damaged_length(tmp_path)
    fd = os.open(path, os.O_RDWR)
    lock = hold_exclusively(fd, str(path))  # as `file write` in another process holds it
    try:
        result = repair(str(path), "--yes", "--wait", "0.2")
    finally:
        os.close(lock)
        os.close(fd)
    assert result.returncode == 1
    assert "held the file's lock for 0.2 s" in result.stderr
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_an_open_writer_does_not_keep_repair_out(tmp_path: Path) -> None:
    path, data, offset, kept = damaged_length(tmp_path)
    with FileReader(path) as reader:
        before = reader.read_messages(kept)
    with pytest.raises(UnprovenTailError):
        StreamWriter(path)
    writer = StreamWriter(tmp_path / "other.ss")  # open writers hold no lock between appends
    result = repair(str(path), "--yes")
    writer.close()
    assert result.returncode == 0, result.stderr
    assert path.read_bytes() == data[:offset]
    with StreamWriter(path) as again:
        assert again.publish("orders", b"after").offset == offset
    with FileReader(path) as reader:
        assert list(reader)[:-1] == before


def test_a_writer_open_before_a_repair_continues_after_it(tmp_path: Path) -> None:
    path, data, offset, kept = damaged_length(tmp_path)
    head = data[:offset]
    path.write_bytes(head)
    writer = StreamWriter(path)  # open on the good part
    path.write_bytes(data)  # then the damage appears after it
    with pytest.raises(UnprovenTailError):
        writer.publish("orders", b"refused")
    assert path.read_bytes() == data
    assert repair(str(path), "--yes").returncode == 0
    receipt = writer.publish("orders", b"after repair")
    writer.close()
    assert receipt.offset == offset
    with FileReader(path) as reader:
        messages = list(reader)
    assert len(messages) == kept + 1
    assert messages[-1].payload == b"after repair"
    assert b"refused" not in path.read_bytes()


def test_a_damaged_header_cannot_be_repaired(tmp_path: Path) -> None:
    path = make(tmp_path, "beacons")
    data = bytearray(path.read_bytes())
    data[0] = ord("X")
    path.write_bytes(data)
    result = repair_here(str(path), "--yes")
    assert result.returncode == 1
    assert "not a stream file" in result.stderr
    assert path.read_bytes() == data


def test_a_corrupt_frame_in_the_middle_is_moved_aside_with_everything_after_it(
    tmp_path: Path,
) -> None:
    path = make(tmp_path, "beacons")
    frame = frames_of(path)[5]
    data = bytearray(path.read_bytes())
    data[frame.positions[frame.field("checksum")[0]]] ^= 0x01
    path.write_bytes(data)
    plan = plan_repair(path)
    assert plan.offset == frame.offset
    assert plan.messages == 5
    assert "checksum" in plan.reason


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"], ["--yes"]])
def test_repair_of_an_empty_file_has_nothing_to_repair_since_the_next_writer_starts_it(
    tmp_path: Path, dry_run: list[str]
) -> None:
    empty = tmp_path / "e.ss"
    empty.touch()
    result = repair(str(empty), *dry_run)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{empty}: empty (0 bytes), as a writer killed before its header leaves it; "
        "nothing to repair: the next writer writes the header"
    ]
    assert empty.stat().st_size == 0
    assert list(tmp_path.iterdir()) == [empty]  # no side file
