"""The tools of the consumer groups of a stream file: ``list_groups``, ``move_group``,
``reset_group`` and ``delete_group`` (``trio_streams.file.groups``), on real files, with member
liveness given by real processes holding their life locks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trio_streams.core.group_moves import GroupNotFound, PositionRefused
from trio_streams.core.positions import Position
from trio_streams.file import (
    GroupInfo,
    GroupLockedError,
    GroupStateError,
    MemberInfo,
    delete_group,
    list_groups,
    move_group,
    reset_group,
)
from trio_streams.file.errors import StreamFileError, StreamFileNotFoundError
from trio_streams.file.group_state import Delayed
from trio_streams.file.group_store import GroupStore

from .group_tools_support import (
    damage_state,
    damaged_state,
    load_state,
    member,
    member_process,
    now_ms,
    save_group,
    save_state,
    state_bytes,
    write_file,
)

KEYS = ("orders", "refunds", "audit")
DUE_MS = 1_900_000_000_000


def _billing(path: Path, *, alive: str | None = None, lease_ms: int = 60_000) -> list[int]:
    """12 messages (orders, refunds, audit in turn) and group ``billing`` of orders and refunds:
    its cursor at message 6 (orders:3), member ``m1`` holding a batch of messages 3 (orders:2,
    settled) and 4 (refunds:2, not), a retry of message 0 (orders:1) waiting, member ``m2``
    gone; the offsets of the messages."""
    receipts = write_file(path, KEYS, 12)
    offsets = [r.offset for r in receipts]
    state = save_group(
        path,
        "billing",
        ["orders", "refunds"],
        {"orders": offsets[6], "refunds": offsets[6]},
        members=[member("m1", lease_ms=lease_ms), member("m2")],
        delayed=[Delayed(offset=offsets[0], key="orders", due_ms=DUE_MS, runs=1)],
    )
    batch = state.add_batch("m1", ["orders", "refunds"], offsets[3], offsets[6], 2)
    state.settle(batch, [offsets[3]])
    save_state(path, state)
    return offsets


# ---- list_groups ---------------------------------------------------------------------------------


def test_list_groups_reports_each_group_position_lag_members_held_and_delayed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    size = path.stat().st_size
    save_group(path, "audit-log", ["audit"], {"audit": size}, ordered=True)
    with member_process(path, "billing", "m1"):
        audit, billing = list_groups(path)
    assert billing == GroupInfo(
        name="billing",
        keys=("orders", "refunds"),
        ordered=False,
        position=offsets[3],  # the batch's start: before it everything is settled or delayed
        first_unsettled=("refunds", 2),  # orders:2 at the position is settled
        # refunds:2 (held), then orders:3, refunds:3, orders:4, refunds:4 (not taken yet); not
        # orders:2 (settled in its batch), orders:1 (a waiting retry) nor any audit message.
        lag_messages=5,
        lag_bytes=size - offsets[3],
        members=(
            MemberInfo("m1", 4242, "here", True, 1, billing.members[0].lease_until_ms),
            MemberInfo("m2", 4242, "here", False, 0, billing.members[1].lease_until_ms),
        ),
        held=1,
        delayed=1,
        next_due_ms=DUE_MS,
    )
    assert audit == GroupInfo(
        "audit-log", ("audit",), True, size, None, 0, 0, held=0, delayed=0, next_due_ms=None
    )


def test_the_lag_of_an_ordered_group_leaves_out_what_is_settled_behind_a_cursor(
    tmp_path: Path,
) -> None:
    # orders is read up to message 9, refunds up to 8 with a batch holding 4 and 7: between the
    # position (4) and orders' cursor, orders:3 (message 6) was settled and is in no batch.
    offsets = [r.offset for r in write_file(tmp_path / "f.ss", KEYS, 12)]
    path = tmp_path / "f.ss"
    state = save_group(
        path,
        "billing",
        ["orders", "refunds"],
        {"orders": offsets[9], "refunds": offsets[8]},
        ordered=True,
        members=[member("m1")],
    )
    state.add_batch("m1", ["refunds"], offsets[4], offsets[8], 2, offsets=[offsets[4], offsets[7]])
    save_state(path, state)
    [info] = list_groups(path)
    assert (info.position, info.first_unsettled) == (offsets[4], ("refunds", 2))
    assert (info.lag_messages, info.held) == (4, 2)  # refunds:2 and :3 held, orders:4, refunds:4


def test_a_group_whose_state_does_not_decode_is_reported_with_its_error_not_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    broken = tmp_path / "f.ss.groups" / "aardvark"
    broken.mkdir()
    damage_state(broken, b'{"format": 1, "group": "aardv')  # cut short
    aardvark, billing = list_groups(path)
    assert aardvark.name == "aardvark" and billing.name == "billing"
    assert aardvark.error is not None and "unreadable" in aardvark.error
    assert str(broken) in aardvark.error
    assert billing.error is None and billing.lag_messages == 5
    assert damaged_state(broken) == b'{"format": 1, "group": "aardv'  # untouched


def test_a_state_written_for_another_file_of_the_same_name_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    write_file(path, KEYS, 3)
    save_group(path, "billing", ["orders"], {"orders": 128}, created_at_ms=1_600_000_000_000)
    [info] = list_groups(path)
    assert info.error is not None and "of another file" in info.error
    with pytest.raises(GroupStateError, match="of another file"):
        move_group(path, "billing", Position.beginning())


def test_list_groups_passes_over_what_is_not_a_group_and_needs_the_file(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    write_file(path, KEYS, 3)
    assert list_groups(path) == []
    (tmp_path / "f.ss.groups").mkdir()
    (tmp_path / "f.ss.groups" / "README").write_text("not a group")
    (tmp_path / "f.ss.groups" / ".hidden").mkdir()
    assert list_groups(path) == []
    empty = tmp_path / "f.ss.groups" / "new"
    (empty / "members").mkdir(parents=True)  # a group whose first state is not written yet
    [info] = list_groups(path)
    assert info.name == "new" and info.error is not None and "no state yet" in info.error
    with pytest.raises(StreamFileNotFoundError):
        list_groups(tmp_path / "missing.ss")


def test_a_scan_budget_bounds_the_reading_and_says_the_lag_is_a_lower_bound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    write_file(path, ["orders"], 2000, payload_bytes=1000)  # 2 MB: reads go a chunk at a time
    save_group(path, "billing", ["orders"], {"orders": 128})
    [whole] = list_groups(path)
    [bounded] = list_groups(path, scan_budget=2000)
    assert (whole.lag_messages, whole.lag_counted) == (2000, True)
    assert bounded.lag_counted is False and 0 < bounded.lag_messages < 2000
    assert bounded.lag_bytes == whole.lag_bytes
    [roomy] = list_groups(path, scan_budget=path.stat().st_size)
    assert (roomy.lag_messages, roomy.lag_counted) == (2000, True)


# ---- move_group ----------------------------------------------------------------------------------


def test_a_move_sets_every_cursor_and_leaves_batches_and_delayed_as_they_are(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    before = load_state(path, "billing")
    move = move_group(path, "billing", Position.sequence(4, stream="refunds"))
    after = load_state(path, "billing")
    assert after.cursors == {"orders": offsets[10], "refunds": offsets[10]}
    assert after.batches == before.batches and after.delayed == before.delayed
    assert after.members == before.members
    # From the position (message 3) to refunds:4 (message 10): orders:2 .. orders:4.
    assert (move.was, move.now, move.moved) == ("orders:2", "refunds:4", True)
    assert (move.skipped, move.replayed, move.first, move.last) == (5, 0, "orders:2", "orders:4")
    assert (move.pending, move.consumers, move.stream) == (1, ("m1", "m2"), str(path))


def test_a_move_back_replays_and_a_move_to_the_end_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    receipts = write_file(path, ["orders"], 5)
    save_group(path, "billing", ["orders"], {"orders": receipts[3].offset})
    back = move_group(path, "billing", Position.beginning())
    assert (back.was, back.now, back.replayed, back.skipped) == ("orders:4", "orders:1", 3, 0)
    assert (back.first, back.last) == ("orders:1", "orders:3")
    end = move_group(path, "billing", Position.end())
    size = path.stat().st_size
    assert (end.was, end.now, end.skipped) == ("orders:1", f"byte {size}", 5)
    assert load_state(path, "billing").cursors == {"orders": size}
    [info] = list_groups(path)
    assert (info.lag_messages, info.lag_bytes, info.first_unsettled) == (0, 0, None)
    instant = move_group(path, "billing", Position.timestamp(receipts[1].timestamp_ms))
    assert instant.now == "orders:3"  # the first message strictly later


def test_a_dry_run_moves_nothing_and_says_what_the_move_would_do(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    before = state_bytes(path, "billing")
    move = move_group(path, "billing", Position.end(), dry_run=True)
    assert move.moved is False and move.skipped == 6
    assert state_bytes(path, "billing") == before


def test_a_move_is_refused_while_a_member_is_live_and_allowed_once_it_is_killed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    before = state_bytes(path, "billing")
    with member_process(path, "billing", "m1") as process:
        for dry_run in (False, True):
            with pytest.raises(GroupLockedError, match=r"live members: 'm1' \(pid 4242"):
                move_group(path, "billing", Position.end(), dry_run=dry_run)
        assert state_bytes(path, "billing") == before
        process.kill()
        # Its lease still runs, but its process is gone: nothing can hold up the move.
        assert load_state(path, "billing").members["m1"].lease_until_ms > now_ms()
        assert move_group(path, "billing", Position.end()).moved


def test_a_member_alive_whose_lease_ran_out_does_not_hold_up_a_move(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path, lease_ms=-1000)
    with member_process(path, "billing", "m1"):
        assert list_groups(path)[0].members[0].alive
        assert move_group(path, "billing", Position.end()).moved


def test_a_sequence_or_instant_of_a_multi_key_group_must_name_one_of_its_streams(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    before = state_bytes(path, "billing")
    refused = [
        (Position.sequence(2), "must name one of the group's streams"),
        (Position.timestamp(0), "must name one of the group's streams"),
        (Position.sequence(2, stream="audit"), "names a stream the group does not read"),
        (Position.entry("1-0"), "is a Redis entry id"),
        (Position.sequence(99, stream="orders"), "past the last sequence 4 of stream 'orders'"),
    ]
    for position, why in refused:
        with pytest.raises(PositionRefused, match=why):
            move_group(path, "billing", position)
    assert state_bytes(path, "billing") == before


def test_a_single_key_group_takes_a_sequence_without_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    receipts = write_file(path, ["orders", "audit"], 6)
    save_group(path, "billing", ["orders"], {"orders": 128})
    move = move_group(path, "billing", Position.sequence(2))
    assert (move.now, move.skipped) == ("orders:2", 1)
    assert load_state(path, "billing").cursors == {"orders": receipts[2].offset}


def test_a_group_that_does_not_exist_is_named_with_the_groups_there_are(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    for call in (
        lambda: move_group(path, "shipping", Position.end()),
        lambda: reset_group(path, "shipping"),
        lambda: delete_group(path, "shipping"),
    ):
        with pytest.raises(GroupNotFound, match=r"no consumer group 'shipping' \(its groups: "):
            call()


# ---- reset_group ---------------------------------------------------------------------------------


def test_a_reset_moves_and_forgets_held_work_delayed_retries_and_gone_members(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    store = GroupStore(str(path), "billing")
    with member_process(path, "billing", "m1") as process:
        with pytest.raises(GroupLockedError, match="running members: 'm1'"):
            reset_group(path, "billing", Position.beginning())
        (Path(store.member_path("m1", ".runs"))).write_bytes(b"journal")
        process.kill()
    reset = reset_group(path, "billing", Position.sequence(2, stream="orders"))
    assert (reset.held, reset.delayed, reset.members) == (1, 1, ("m1", "m2"))
    assert (reset.move.was, reset.move.now, reset.move.skipped) == ("orders:2", "orders:2", 0)
    state = load_state(path, "billing")
    assert state.cursors == {"orders": offsets[3], "refunds": offsets[3]}
    assert (state.batches, state.delayed, state.members) == ([], [], {})
    assert os.listdir(store.members_directory) == []  # the gone members' lock and journal
    [info] = list_groups(path)
    assert (info.lag_messages, info.held, info.first_unsettled) == (6, 0, ("orders", 2))


def test_a_reset_without_a_position_starts_again_where_the_group_stands(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    offsets = _billing(path)
    reset = reset_group(path, "billing")
    assert reset.move.now == "orders:2"
    assert load_state(path, "billing").cursors == {"orders": offsets[3], "refunds": offsets[3]}


def test_a_state_that_does_not_decode_cannot_be_moved_or_reset_but_can_be_deleted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    write_file(path, KEYS, 3)
    directory = tmp_path / "f.ss.groups" / "billing"
    (directory / "members").mkdir(parents=True)
    damage_state(directory, b"\0" * 64)  # zeroed
    with pytest.raises(GroupStateError, match="unreadable"):
        move_group(path, "billing", Position.end())
    with pytest.raises(GroupStateError, match="cannot be reset") as refused:
        reset_group(path, "billing")
    assert "file group delete" in (refused.value.hint() or "")
    assert damaged_state(directory) == b"\0" * 64
    delete_group(path, "billing")
    assert not directory.exists()


# ---- delete_group --------------------------------------------------------------------------------


def test_delete_is_refused_while_a_member_process_runs_even_past_its_lease(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    _billing(path, lease_ms=-1000)
    directory = tmp_path / "f.ss.groups" / "billing"
    with member_process(path, "billing", "m1") as process:
        with pytest.raises(GroupLockedError, match="running members: 'm1'"):
            delete_group(path, "billing")
        assert (directory / "state.1.json").exists()
        process.kill()
    delete_group(path, "billing")
    assert not directory.exists()
    assert (tmp_path / "f.ss.groups").is_dir() and path.exists()


def test_delete_removes_only_the_files_a_group_keeps_and_says_what_it_left(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    _billing(path)
    directory = tmp_path / "f.ss.groups" / "billing"
    (directory / "members" / "m2.runs").write_bytes(b"journal")
    (directory / "state.1.json.tmp").write_bytes(b"half")
    (directory / "notes.txt").write_text("mine")
    with pytest.raises(
        StreamFileError, match=r"holds files that are not the group's \(notes"
    ) as left:
        delete_group(path, "billing")
    assert type(left.value) is StreamFileError  # not a GroupStateError: the group is gone
    assert sorted(os.listdir(directory)) == ["notes.txt"]
    with pytest.raises(GroupNotFound):  # no state: nothing to move
        move_group(path, "billing", Position.end())
