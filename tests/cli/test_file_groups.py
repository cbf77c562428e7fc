"""``trio-streams file stat`` shows the consumer groups of a file, ``trio-streams file group
set-position|reset|delete`` move, reset and delete one, and ``trio-streams top`` shows them."""

from __future__ import annotations

from pathlib import Path

from tests.file.group_tools_support import (
    damage_state,
    load_state,
    member,
    member_process,
    save_group,
    save_state,
    state_bytes,
    write_file,
)
from trio_streams.file.group_state import Delayed

from .support import cli, one_error_line, stderr_lines

KEYS = ("orders", "refunds", "audit")
DUE_MS = 1_900_000_000_000


def _billing(path: Path) -> list[int]:
    """12 messages (orders, refunds, audit in turn); group ``billing`` of orders and refunds
    at message 6, member ``m1`` holding message 4 (refunds:2), a retry waiting, ``m2`` gone."""
    offsets = [r.offset for r in write_file(path, KEYS, 12)]
    state = save_group(
        path,
        "billing",
        ["orders", "refunds"],
        {"orders": offsets[6], "refunds": offsets[6]},
        members=[member("m1", pid=111), member("m2", pid=222)],
        delayed=[Delayed(offset=offsets[0], key="orders", due_ms=DUE_MS, runs=1)],
    )
    batch = state.add_batch("m1", ["orders", "refunds"], offsets[3], offsets[6], 2)
    state.settle(batch, [offsets[3]])
    save_state(path, state)
    return offsets


def test_file_stat_shows_each_group_its_position_lag_members_held_and_delayed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    broken = tmp_path / "f.ss.groups" / "broken"
    broken.mkdir()
    damage_state(broken, b"{}")
    with member_process(path, "billing", "m1"):
        result = cli("file", "stat", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("groups:           2")
    size = path.stat().st_size
    assert lines[start + 1 : start + 5] == [
        "  billing: orders, refunds (unordered)",
        f"    position:     byte {offsets[3]}, next unsettled refunds:2",
        f"    lag:          5 messages, {size - offsets[3]} bytes",
        "    held:         1 message",
    ]
    assert lines[start + 5].startswith(f"    delayed:      1 retry, next due {DUE_MS} ms (in ")
    assert lines[start + 6] == "    members:      2"
    assert lines[start + 7].startswith("      m1: pid 111 on here, alive, holds 1, lease until ")
    assert lines[start + 8].startswith("      m2: pid 222 on here, dead, holds 0, lease until ")
    assert lines[start + 9].startswith("  broken: error: ")
    assert str(broken) in lines[start + 9]


def test_file_stat_of_a_file_without_groups_says_none(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    write_file(path, KEYS, 3)
    result = cli("file", "stat", str(path))
    assert result.returncode == 0 and "groups:           none" in result.stdout.splitlines()


def test_set_position_moves_the_group_and_says_what_it_skipped(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    before = state_bytes(path, "billing")
    dry = cli("file", "group", "set-position", str(path), "billing", "end", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == (
        f"group 'billing' of {path}: orders:2 -> byte {path.stat().st_size}, would skip 6 "
        "messages (orders:2 .. refunds:4); 1 held stay held (dry run: nothing moved)\n"
    )
    assert state_bytes(path, "billing") == before
    result = cli("file", "group", "set-position", str(path), "billing", "seq:4", "--key", "refunds")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"group 'billing' of {path}: orders:2 -> refunds:4, skipped 5 messages "
        "(orders:2 .. orders:4); 1 held stay held\n"
    )
    assert load_state(path, "billing").cursors == {"orders": offsets[10], "refunds": offsets[10]}


def test_set_position_of_a_multi_key_group_without_a_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    before = state_bytes(path, "billing")
    result = cli("file", "group", "set-position", str(path), "billing", "seq:2")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        f"trio-streams file group set-position: error: group 'billing' of {path}: "
        "Position.sequence(2) must name one of the group's streams ['orders', 'refunds']",
        "  --key KEY names the stream of a seq:N or ts:MS position",
    ]
    assert state_bytes(path, "billing") == before


def test_bad_command_lines_are_refused_before_anything_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    for argv, why in [
        (["set-position", str(path), "billing", "seq:x"], "argument POSITION: position 'seq:x'"),
        (["set-position", str(path), ".hidden", "end"], "argument GROUP: group name '.hidden'"),
        (["set-position", str(path), "billing", "end", "--key", "orders"], "--key goes with"),
        (["reset", str(path), "billing", "--key", "orders"], "--key goes with"),
    ]:
        prefix = f"trio-streams file group {argv[0]}: error: "
        line = one_error_line(cli("file", "group", *argv), 2, prefix)
        assert why in line, line


def test_the_group_commands_are_refused_while_a_member_runs(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    before = state_bytes(path, "billing")
    with member_process(path, "billing", "m1") as process:
        for argv in (
            ["set-position", str(path), "billing", "end"],
            ["reset", str(path), "billing"],
            ["delete", str(path), "billing"],
        ):
            result = cli("file", "group", *argv)
            assert result.returncode == 1, result.stdout
            first = stderr_lines(result)[0]
            assert first.startswith(f"trio-streams file group {argv[0]}: error: {path}: ")
            assert "members: 'm1'" in first and "Traceback" not in result.stderr
            assert "stop the group's members first" in result.stderr
        assert state_bytes(path, "billing") == before
        process.kill()
    result = cli("file", "group", "set-position", str(path), "billing", "end")
    assert result.returncode == 0, result.stderr


def test_reset_forgets_what_the_group_held_and_delete_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    reset = cli("file", "group", "reset", str(path), "billing", "--to", "beginning")
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout == (
        f"group 'billing' of {path} reset: orders:2 -> orders:1; forgot 1 held message, "
        "1 delayed retry and 2 gone members (m1, m2)\n"
    )
    state = load_state(path, "billing")
    assert (state.cursors, state.batches, state.delayed, state.members) == (
        {"orders": 128, "refunds": 128}, [], [], {},
    )  # fmt: skip
    delete = cli("file", "group", "delete", str(path), "billing")
    assert (delete.returncode, delete.stdout) == (0, f"deleted group 'billing' of {path}\n")
    assert not (tmp_path / "f.ss.groups" / "billing").exists()
    again = cli("file", "group", "delete", str(path), "billing")
    assert again.returncode == 1
    assert stderr_lines(again) == [
        f"trio-streams file group delete: error: {path} has no consumer group 'billing' (its "
        "groups: none)",
        "  a group of a stream file is created by its first member's start",
    ]


def test_reset_of_an_unreadable_state_says_to_delete_it(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    write_file(path, KEYS, 3)
    directory = tmp_path / "f.ss.groups" / "billing"
    directory.mkdir(parents=True)
    damage_state(directory, b"not json")
    result = cli("file", "group", "reset", str(path), "billing")
    assert result.returncode == 1
    first, hint = stderr_lines(result)
    assert "unreadable" in first and first.endswith("and cannot be reset")
    assert "`trio-streams file group delete FILE GROUP` removes it" in hint
    assert cli("file", "group", "delete", str(path), "billing").returncode == 0


def test_top_of_a_file_shows_its_groups(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    with member_process(path, "billing", "m1"):
        result = cli("top", str(path), "--once", "--interval", "0.01")
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    header = lines.index(["groups:"]) + 1
    assert lines[header] == [
        "GROUP", "KEYS", "POSITION", "NEXT", "LAG", "LAG-BYTES", "MEMBERS", "HELD", "DELAYED",
        "NEXT-DUE",
    ]  # fmt: skip
    row = lines[header + 1]
    size = path.stat().st_size
    assert row[:9] == [
        "billing", "orders,refunds", str(offsets[3]), "refunds:2", "5", str(size - offsets[3]),
        "1/2", "1", "1",
    ]  # fmt: skip
    assert row[9].endswith("s")  # the retry is due in that many seconds
