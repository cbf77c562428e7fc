"""The tip record: a writer that catches up with others' appends reads it instead of decoding.

One test per sentence of the contract (:mod:`trio_streams.file.tip`): a record that matches the
file spares the decode; the file comes out byte for byte as it does when every writer decodes
(and as one writer would have written it); a record that is stale, damaged, torn, of another
file, of another boot or of bytes since changed is ignored and the writer decodes; a writer
killed between its data and its record, or in the middle of its record, leaves the next writer
to decode exactly what it appended.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trio_streams.file.catchup as catchup_module
import trio_streams.file.tip as tip_module
from trio_streams.file.decoder import FrameDecoder
from trio_streams.file.errors import StreamFormatError
from trio_streams.file.format import Message
from trio_streams.file.reader import FileReader
from trio_streams.file.repair import apply_repair, plan_repair
from trio_streams.file.tip import TipFile, tip_path
from trio_streams.file.writer import StreamWriter

from .many_writers import reencoded

ROOT = Path(__file__).parents[2]
T0 = 1_700_000_000_000


class _Counted:
    decoded = 0


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> type[_Counted]:
    """Counts every message the catch-up decodes (independently of the writers' counters)."""

    class CountingDecoder(FrameDecoder):
        def next_messages(self, limit: int) -> list[Message]:
            batch = super().next_messages(limit)
            _Counted.decoded += len(batch)
            return batch

    _Counted.decoded = 0
    monkeypatch.setattr(catchup_module, "FrameDecoder", CountingDecoder)
    return _Counted


@pytest.fixture
def no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers never find a record: every catch-up decodes, as before records existed."""
    monkeypatch.setattr(TipFile, "read", lambda self, size, known=None: None)


def _decoded(path: Path) -> list[tuple[str, int, bytes]]:
    with FileReader(path, internal=True, on_eos="include") as reader:
        out = [(m.stream_key, m.seq, m.payload) for m in reader]
        reader.check_finished()
    return out


def _dense(path: Path) -> None:
    seqs: dict[str, list[int]] = {}
    for key, seq, _ in _decoded(path):
        if key != "SEA_STREAMER_INTERNAL":
            seqs.setdefault(key, []).append(seq)
    for key, got in seqs.items():
        assert got == list(range(1, len(got) + 1)), key


def _pair(path: Path, interval: int = 1024) -> tuple[StreamWriter, StreamWriter]:
    first = StreamWriter(path, beacon_interval=interval, created_at_ms=T0)
    first.publish("k", b"first", T0)
    return first, StreamWriter(path)


# ---- a record that matches the file spares the decode ------------------------------------------


def test_a_writer_that_finds_a_record_matching_the_file_decodes_nothing(
    tmp_path: Path, decoded: type[_Counted]
) -> None:
    path = tmp_path / "tip.ss"
    one, two = _pair(path)
    two.publish("k", b"two", T0)
    one.publish("k", b"one", T0)  # each has now seen the other append: they take turns
    opened = decoded.decoded
    for n in range(50):
        for writer, tag in ((one, b"a"), (two, b"b")):
            for i in range(n % 7 + 1):
                writer.append(f"k{i % 3}", tag + bytes(n * 10), T0 + n)
            writer.flush()
    assert decoded.decoded == opened  # not one message decoded since
    assert one.tips_adopted == 49 and two.tips_adopted == 50  # one's first found nothing new
    one.close()
    two.close()
    assert path.read_bytes() == reencoded(path)
    _dense(path)


def test_a_writer_alone_records_the_tip_when_it_closes(tmp_path: Path) -> None:
    path = tmp_path / "alone.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        writer.append("k", b"one")
    fd = os.open(path, os.O_RDONLY)
    try:
        tip = TipFile(fd, str(path)).read(path.stat().st_size)
    finally:
        os.close(fd)
    assert tip is not None and tip.streams[0][:3] == (b"\x01k", 0, 1)


# ---- byte for byte as decoding makes it --------------------------------------------------------


def _interleaved(path: Path, seed: int, interval: int) -> bytes:
    """Writers taking turns in random batches, some closing with an end-of-stream message and
    new ones opening; explicit timestamps so two runs make the same messages."""
    rng = random.Random(seed)
    writers = [
        StreamWriter(path, beacon_interval=interval, created_at_ms=T0, file_name="s.ss")
        for _ in range(3)
    ]
    ts = T0
    for step in range(300):
        w = rng.randrange(len(writers))
        for _ in range(rng.randint(1, 6)):
            size = rng.choice([0, 3, 40, 300, interval * 2])
            ts += rng.choice([0, 1, 7])
            writers[w].append(rng.choice(["a", "bb", "c-1", "d.x"]), bytes(size), ts)
        if rng.random() < 0.1:
            writers[w].close(eos=True, eos_timestamp_ms=ts)
            writers[w] = StreamWriter(path)
        else:
            writers[w].flush()
        if rng.random() < 0.05:
            writers[w].publish("e", b"published %d" % step, ts)
    for writer in writers:
        writer.close()
    return path.read_bytes()


@pytest.mark.parametrize("interval", [128, 571, 1024, 4096])
def test_files_written_with_records_are_byte_identical_to_files_written_by_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: int
) -> None:
    with_records = _interleaved(tmp_path / "records.ss", interval, interval)
    with monkeypatch.context() as patched:
        patched.setattr(TipFile, "read", lambda self, size, known=None: None)
        decoding = _interleaved(tmp_path / "decoding.ss", interval, interval)
    assert with_records == decoding
    assert with_records == reencoded(tmp_path / "records.ss")
    _dense(tmp_path / "records.ss")


@pytest.mark.parametrize("interval", [128, 1024])
def test_an_end_of_stream_in_the_record_is_overwritten_as_decoding_would(
    tmp_path: Path, decoded: type[_Counted], interval: int
) -> None:
    path = tmp_path / "eos.ss"
    staying, leaving = _pair(path, interval)
    for n in range(20):
        leaving.append("k", bytes(n * 9), T0 + n)
    leaving.close(eos=True, eos_timestamp_ms=T0 + 99)
    assert _decoded(path)[-1][2] == b"EOS"
    opened = decoded.decoded
    staying.publish("k", b"after", T0 + 100)
    assert decoded.decoded == opened and staying.tips_adopted == 1
    staying.close()
    assert [p for _, _, p in _decoded(path)][-2:] == [bytes(19 * 9), b"after"]
    assert path.read_bytes() == reencoded(path)


def test_a_write_out_with_an_end_of_stream_among_other_messages_records_nothing(
    tmp_path: Path, decoded: type[_Counted]
) -> None:
    """What such a batch leaves trailing is not told apart cheaply: no record, the next writer
    decodes, and continues after all of it (the end-of-stream message is not the last)."""
    path = tmp_path / "middle.ss"
    one, two = _pair(path, 128)
    two.write_eos(T0 + 1)
    two.append("k", bytes(20_000), T0 + 2)  # 16 KiB or more: recorded, but for the message
    two.flush()
    opened = decoded.decoded
    one.publish("k", b"last", T0 + 3)
    assert decoded.decoded - opened == 2 and one.tips_adopted == 0
    one.close()
    two.close()
    assert [p for _, _, p in _decoded(path)] == [b"first", b"EOS", bytes(20_000), b"last"]
    assert path.read_bytes() == reencoded(path)


# ---- a record that does not match is ignored ---------------------------------------------------


def test_a_record_of_a_shorter_file_spares_the_decode_of_what_it_describes(
    tmp_path: Path, decoded: type[_Counted]
) -> None:
    path = tmp_path / "stale.ss"
    one, two = _pair(path)
    two.publish("k", b"recorded", T0 + 1)
    silent = StreamWriter(path)  # opening records the tip: the file up to "recorded"
    silent._tip = None  # appends without recording (as a writer before records did)
    silent.publish("k", b"unrecorded", T0 + 2)
    opened = decoded.decoded
    one.publish("k", b"next", T0 + 3)
    assert decoded.decoded - opened == 1  # "unrecorded" only, not "recorded"
    assert one.tips_adopted == 1
    for writer in (one, two, silent):
        writer.close()
    assert path.read_bytes() == reencoded(path)
    _dense(path)


def _damaged(path: Path, how: str) -> None:
    record = bytearray(Path(tip_path(str(path))).read_bytes())
    if how == "cut":
        record = record[: len(record) // 2]
    elif how == "empty":
        record = bytearray()
    else:
        at = {"magic": 0, "length": 8, "boot": 12, "size": 50, "body": -12, "crc": -1}[how]
        record[at] ^= 0x01
    Path(tip_path(str(path))).write_bytes(record)


@pytest.mark.parametrize("how", ["magic", "length", "boot", "size", "body", "crc", "cut", "empty"])
def test_a_damaged_record_is_ignored(tmp_path: Path, decoded: type[_Counted], how: str) -> None:
    path = tmp_path / "damaged.ss"
    one, two = _pair(path)
    for n in range(5):
        two.append("k", bytes(4000), T0 + n)
    two.flush()  # recorded: 16 KiB or more
    _damaged(path, how)
    opened = decoded.decoded
    one.publish("k", b"next", T0 + 9)
    assert decoded.decoded - opened == 5
    one.close()
    two.close()
    assert path.read_bytes() == reencoded(path)
    _dense(path)


def test_a_record_of_another_file_is_ignored(tmp_path: Path, decoded: type[_Counted]) -> None:
    """Two files with the same bytes: the record of one names the other's inode."""
    paths = [tmp_path / "a" / "same.ss", tmp_path / "b" / "same.ss"]
    writers = []
    for path in paths:
        path.parent.mkdir()
        one, two = _pair(path)
        two.publish("k", bytes(20_000), T0 + 1)  # recorded: 16 KiB or more
        two.close()
        writers.append(one)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    shutil.copy(tip_path(str(paths[1])), tip_path(str(paths[0])))
    opened = decoded.decoded
    writers[0].publish("k", b"next", T0 + 2)
    assert decoded.decoded - opened == 1 and writers[0].tips_adopted == 0
    for writer in writers:
        writer.close()


def test_a_record_of_another_boot_is_ignored(
    tmp_path: Path, decoded: type[_Counted], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "boot.ss"
    one, _ = _pair(path)
    with monkeypatch.context() as patched:
        patched.setattr(tip_module, "_BOOT", b"\x01" * 16)
        before_reboot = StreamWriter(path)
        before_reboot.publish("k", bytes(20_000), T0 + 1)
        before_reboot.close()
    opened = decoded.decoded
    one.publish("k", b"next", T0 + 2)
    assert decoded.decoded - opened == 1 and one.tips_adopted == 0
    one.close()


def test_a_record_whose_file_ends_in_other_bytes_is_ignored(
    tmp_path: Path, decoded: type[_Counted]
) -> None:
    """The same size, the last payload changed in place: the record is not trusted, and the
    decode finds the damage."""
    path = tmp_path / "changed.ss"
    one, two = _pair(path)
    two.publish("k", bytes(20_000), T0 + 1)
    two.close()
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # in the last payload: its checksum no longer matches
    with open(path, "r+b") as f:
        f.write(data)
    with pytest.raises(StreamFormatError):
        one.publish("k", b"next", T0 + 2)
    assert one.tips_adopted == 0
    os.close(one._fd)


def test_a_repair_removes_the_record(tmp_path: Path) -> None:
    path = tmp_path / "repair.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        writer.append("k", bytes(20_000))
    assert os.path.exists(tip_path(str(path)))
    with open(path, "ab") as f:
        f.write(b"\x01k" + bytes(10))  # a frame cut short
    plan = plan_repair(str(path))
    fd = os.open(path, os.O_RDWR)
    try:
        apply_repair(plan, fd)
    finally:
        os.close(fd)
    assert not os.path.exists(tip_path(str(path)))


def test_a_new_file_removes_a_record_left_beside_its_name(tmp_path: Path) -> None:
    path = tmp_path / "new.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        writer.append("k", bytes(20_000))
    path.unlink()
    assert os.path.exists(tip_path(str(path)))
    StreamWriter(path).close()
    assert not os.path.exists(tip_path(str(path)))


# ---- writers killed -9 -------------------------------------------------------------------------

_KILLED = textwrap.dedent(
    """
    import os, signal, sys, types
    import trio_streams.file.tip as tip
    from trio_streams.file.writer import StreamWriter

    path, where = sys.argv[1], sys.argv[2]
    writer = StreamWriter(path)
    writer.publish("k", bytes(20_000), 1_700_000_000_100)  # recorded: 16 KiB or more
    if where == "before the record":
        tip.TipFile.write = lambda self, tip: os.kill(os.getpid(), signal.SIGKILL)
    else:  # half of the record written, then killed
        torn = types.ModuleType("os")
        torn.__dict__.update(os.__dict__)

        def pwrite(fd, data, offset):
            os.pwrite(fd, data[: len(data) // 2], offset)
            os.kill(os.getpid(), signal.SIGKILL)

        torn.pwrite = pwrite
        tip.os = torn
    for n in range(50):
        writer.append("k", bytes(1000), 1_700_000_000_200 + n)
    writer.flush()
    """
)


@pytest.mark.parametrize(
    ("where", "decodes", "adopts"),
    [
        ("before the record", 50, 1),  # its append, after its last record
        ("in the middle of the record", 51, 0),  # its last record is torn: since one wrote
    ],
)
def test_a_writer_killed_between_its_data_and_its_record_leaves_the_next_to_decode_its_append(
    tmp_path: Path, decoded: type[_Counted], where: str, decodes: int, adopts: int
) -> None:
    path = tmp_path / "killed.ss"
    survivor = StreamWriter(path, beacon_interval=4096, created_at_ms=T0)
    survivor.publish("k", b"before", T0)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED, str(path), where], cwd=ROOT, timeout=120, check=False
    )
    assert killed.returncode == -9
    assert [p for _, _, p in _decoded(path)][-1] == bytes(1000)  # its data is in the file
    opened = decoded.decoded
    receipt = survivor.publish("k", b"after", T0 + 999)
    assert decoded.decoded - opened == decodes
    assert survivor.tips_adopted == adopts
    survivor.close()
    assert receipt.seq == 53
    assert path.read_bytes() == reencoded(path)
    _dense(path)


# ---- writer processes --------------------------------------------------------------------------


def test_writer_processes_adopt_each_others_records_and_make_one_writers_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "processes.ss"
    StreamWriter(path, beacon_interval=4096).close()
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.file.many_writers",
                "write",
                str(path),
                f"w{i}",
                "2000",
                "3",
                "--batch",
                "200",
                "--report",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        for i in range(3)
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write(b"go\n")
        writer.stdin.flush()
    reports = []
    for writer in writers:
        out, _ = writer.communicate(timeout=600)
        assert writer.returncode == 0
        reports.append(out.decode().splitlines()[-1].split())
    assert all(report[:2] == ["caught-up", "decoded"] for report in reports)
    # Without records each writer would decode what the two others appended: 8000 messages.
    assert sum(int(report[2]) for report in reports) < 3000, reports
    assert sum(int(report[4]) for report in reports) > 0, reports
    assert path.read_bytes() == reencoded(path)
    _dense(path)
