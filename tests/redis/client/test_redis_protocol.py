"""The sans-io core: reply parsing on any byte split, pipelines of mixed replies and errors."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_streams.redis.client import (
    AskError,
    CommandEncodingError,
    ExecAbortError,
    MovedError,
    NoPermissionError,
    RedisProtocolError,
    Replies,
    ReplyError,
    WatchError,
)
from trio_streams.redis.client.errors import ReadOnlyError, reply_error
from trio_streams.redis.client.pipeline import TransactionBlock, fold_replies
from trio_streams.redis.client.protocol import (
    NEED_DATA,
    PushFrame,
    ReplyParser,
    pack_command,
    pack_commands,
)


class Err:
    """An error reply in the expected model (compared by type and text)."""

    def __init__(self, line: str) -> None:
        self.line = line


class Push:
    def __init__(self, items: list[Any]) -> None:
        self.items = items


class Attributed:
    """A value sent after a RESP3 attribute frame (``|``): it parses as the value alone."""

    def __init__(self, attributes: dict[bytes, Any], value: Any) -> None:
        self.attributes = attributes
        self.value = value


def encode(value: Any) -> bytes:
    """RESP3 encoding of a model value (the server side of the wire)."""
    if value is None:
        return b"_\r\n"
    if value is True or value is False:
        return b"#t\r\n" if value else b"#f\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if isinstance(value, Err):
        return b"-" + value.line.encode() + b"\r\n"
    if isinstance(value, Push):
        return b">%d\r\n" % len(value.items) + b"".join(encode(v) for v in value.items)
    if isinstance(value, Attributed):
        pairs = b"".join(encode(k) + encode(v) for k, v in value.attributes.items())
        return b"|%d\r\n" % len(value.attributes) + pairs + encode(value.value)
    if isinstance(value, dict):
        return b"%%%d\r\n" % len(value) + b"".join(encode(k) + encode(v) for k, v in value.items())
    if isinstance(value, list):
        return b"*%d\r\n" % len(value) + b"".join(encode(v) for v in value)
    raise AssertionError(value)


def same(parsed: Any, model: Any) -> bool:
    if isinstance(model, Attributed):
        return same(parsed, model.value)
    if isinstance(model, Err):
        return isinstance(parsed, ReplyError) and parsed.message == model.line
    if isinstance(model, Push):
        return type(parsed) is PushFrame and same(list(parsed), model.items)
    if isinstance(model, list):
        return (
            isinstance(parsed, list)
            and len(parsed) == len(model)
            and all(same(p, m) for p, m in zip(parsed, model, strict=True))
        )
    if isinstance(model, dict):
        return isinstance(parsed, dict) and all(same(parsed[k], v) for k, v in model.items())
    return type(parsed) is type(model) and parsed == model


error_lines = st.sampled_from(
    [
        "ERR unknown command 'FOO'",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "MOVED 3999 127.0.0.1:6381",
        "ASK 12182 [::1]:7000",
        "NOPERM this user has no permissions to run the 'set' command",
        "READONLY You can't write against a read only replica.",
        "EXECABORT Transaction discarded because of previous errors.",
        "BUSYGROUP Consumer Group name already exists",
    ]
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.binary(max_size=40),
    error_lines.map(Err),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.binary(min_size=1, max_size=8), inner, max_size=3),
    ),
    max_leaves=12,
)


def parse_all(data: bytes, cuts: list[int], *, settle: bool = False) -> list[Any]:
    """Feed ``data`` cut at ``cuts``; with ``settle``, tell the parser after every reply that
    nothing more is awaited (as a connection does at the end of each exchange)."""
    parser = ReplyParser()
    out: list[Any] = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(points):
        parser.feed(data[start:end])
        while (reply := parser.next_reply()) is not NEED_DATA:
            out.append(reply)
            if settle:
                parser.settled()
    assert not parser.has_buffered_data()
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    replies=st.lists(st.one_of(values, st.lists(scalars, max_size=3).map(Push)), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_mixed_replies_errors_and_pushes_parse_in_order_on_any_split(
    replies: list[Any], cuts: list[int]
) -> None:
    data = b"".join(encode(r) for r in replies)
    parsed = parse_all(data, cuts)
    assert len(parsed) == len(replies)
    for got, want in zip(parsed, replies, strict=True):
        assert same(got, want), (got, want)


@settings(max_examples=200, deadline=None)
@given(
    commands=st.lists(
        st.lists(
            st.one_of(st.binary(max_size=30), st.text(max_size=10), st.integers()),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=10,
    )
)
def test_packed_pipeline_parses_back_to_its_commands(commands: list[list[Any]]) -> None:
    def as_bytes(arg: Any) -> bytes:
        return arg if isinstance(arg, bytes) else str(arg).encode()

    parsed = parse_all(pack_commands(commands), [])
    assert parsed == [[as_bytes(a) for a in command] for command in commands]


#: Bulk strings that hold bytes an attribute frame is made of: data, never cut out.
lookalikes = st.sampled_from(
    [b"|", b"\n|", b"\r\n|1\r\n+a\r\n+b\r\n", b"x\r\n|0\r\n", b"|1\r\n$1\r\na\r\n:1\r\n"]
)
keys = st.one_of(st.binary(min_size=1, max_size=8), lookalikes)
attributes = st.dictionaries(keys, st.one_of(scalars, st.lists(scalars, max_size=2)), max_size=2)
attributed_scalars = st.one_of(scalars, lookalikes)
attributed_values = st.recursive(
    st.one_of(
        attributed_scalars, st.tuples(attributes, attributed_scalars).map(lambda t: Attributed(*t))
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(keys, inner, max_size=3),
        st.tuples(attributes, st.lists(inner, max_size=3)).map(lambda t: Attributed(*t)),
    ),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    replies=st.lists(attributed_values, max_size=10),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    settle=st.booleans(),
)
def test_attribute_frames_are_dropped_wherever_they_appear_on_any_split(
    replies: list[Any], cuts: list[int], settle: bool
) -> None:
    data = b"".join(encode(r) for r in replies)
    parsed = parse_all(data, cuts, settle=settle)
    assert len(parsed) == len(replies)
    for got, want in zip(parsed, replies, strict=True):
        assert same(got, want), (got, want)


def test_attribute_frame_before_a_reply_does_not_shift_later_replies() -> None:
    # What Redis 7 sends for DEBUG PROTOCOL attrib, then PING's reply.
    data = (
        b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n"
        b"$39\r\nSome real reply following the attribute\r\n+PONG\r\n"
    )
    for cut in range(len(data) + 1):
        assert parse_all(data, [cut], settle=True) == [
            b"Some real reply following the attribute",
            b"PONG",
        ]


def test_attribute_frame_in_a_later_chunk_of_a_long_reply_is_dropped() -> None:
    # The array's header and first elements arrive before the chunk with the attribute: the
    # parser goes back to where the array began.
    head = b"*3\r\n$3\r\none\r\n"
    tail = b"|1\r\n+ttl\r\n:5\r\n$3\r\ntwo\r\n:3\r\n+after\r\n"
    parser = ReplyParser()
    parser.feed(b":0\r\n")
    assert parser.next_reply() == 0
    parser.settled()
    parser.feed(head)
    assert parser.next_reply() is NEED_DATA
    parser.feed(tail)
    assert parser.next_reply() == [b"one", b"two", 3]
    assert parser.next_reply() == b"after"
    assert parser.next_reply() is NEED_DATA
    assert not parser.has_buffered_data()


def test_a_bar_inside_bulk_data_is_never_taken_for_an_attribute() -> None:
    payload = b"a\r\n|1\r\n+k\r\n+v\r\n"
    data = b"$%d\r\n%s\r\n" % (len(payload), payload) + b":7\r\n"
    for cut in range(len(data) + 1):
        assert parse_all(data, [cut], settle=True) == [payload, 7]


def test_false_is_a_reply_not_a_lack_of_data() -> None:
    parser = ReplyParser()
    assert parser.next_reply() is NEED_DATA
    parser.feed(b"#f\r\n:1")
    assert parser.next_reply() is False
    assert parser.next_reply() is NEED_DATA
    assert parser.has_buffered_data()


def test_error_replies_are_typed_by_code() -> None:
    moved = reply_error("MOVED 3999 127.0.0.1:6381")
    assert isinstance(moved, MovedError)
    assert (moved.slot, moved.target) == (3999, ("127.0.0.1", 6381))
    ask = reply_error("ASK 1 [::1]:7000")
    assert isinstance(ask, AskError)
    assert ask.target == ("::1", 7000)
    assert isinstance(reply_error("NOPERM no"), NoPermissionError)
    assert isinstance(reply_error("READONLY no"), ReadOnlyError)
    assert isinstance(reply_error("EXECABORT no"), ExecAbortError)
    # A redirect whose text is not what a server sends stays a plain reply error.
    odd = reply_error("MOVED sideways")
    assert type(odd) is ReplyError
    assert odd.code == "MOVED"


def test_reply_error_names_command_and_server_once_raised() -> None:
    error = reply_error("WRONGTYPE bad").with_context("LPUSH orders", ("127.0.0.1", 6379))
    assert str(error) == "WRONGTYPE bad (command LPUSH orders on redis 127.0.0.1:6379)"


def test_malformed_bytes_raise_a_protocol_error() -> None:
    parser = ReplyParser()
    parser.feed(b"$x\r\n")
    with pytest.raises(RedisProtocolError, match="Bad bulk string length"):
        parser.next_reply()


def test_unsendable_argument_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(CommandEncodingError, match=r"argument 2 \(a dict\) of command SET k"):
        pack_command(("SET", "k", {"a": 1}))  # type: ignore[arg-type]


def test_replies_raise_first_error_in_place() -> None:
    first, second = reply_error("ERR one"), reply_error("ERR two")
    replies = Replies([b"OK", first, 3, second])
    assert replies.errors == [(1, first), (3, second)]
    with pytest.raises(ReplyError, match="ERR one"):
        replies.raise_first()
    assert Replies([1, 2]).raise_first() == [1, 2]


# -- pipelines with MULTI/EXEC blocks: the wire replies fold back to one reply per item ---------

block_outcomes = st.one_of(
    # EXEC ran: its replies, some of them errors (a command failing at run time).
    st.lists(st.one_of(scalars, error_lines.map(Err)), min_size=1, max_size=4).map(
        lambda replies: ("ran", replies)
    ),
    # A command was rejected while queueing: EXECABORT, nothing ran.
    st.integers(min_value=1, max_value=4).map(lambda n: ("aborted", n)),
    # A watched key changed: EXEC replies nil.
    st.integers(min_value=1, max_value=4).map(lambda n: ("watched", n)),
)
items = st.lists(
    st.one_of(scalars.map(lambda r: ("command", r)), block_outcomes), min_size=1, max_size=10
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(items=items, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_pipeline_with_transaction_blocks_folds_one_reply_per_item(
    items: list[tuple[str, Any]], cuts: list[int]
) -> None:
    queued: list[Any] = []
    wire: list[Any] = []
    for kind, detail in items:
        if kind == "command":
            queued.append(("GET", "k"))
            wire.append(detail)
            continue
        count = len(detail) if kind == "ran" else detail
        queued.append(TransactionBlock([("INCR", "k")] * count))
        wire.append(b"OK")  # MULTI
        if kind == "aborted":
            wire += [b"QUEUED"] * (count - 1) + [Err("ERR unknown command 'X'")]
            wire.append(Err("EXECABORT Transaction discarded because of previous errors."))
        else:
            wire += [b"QUEUED"] * count
            wire.append(detail if kind == "ran" else None)

    parsed = Replies(parse_all(b"".join(encode(r) for r in wire), cuts))
    folded = fold_replies(queued, parsed, ("127.0.0.1", 6379))
    assert len(folded) == len(items)
    for got, (kind, detail) in zip(folded, items, strict=True):
        if kind == "command":
            assert same(got, detail)
        elif kind == "ran":
            assert same(list(got), detail)
        elif kind == "aborted":
            assert isinstance(got, ExecAbortError)
            assert [e.message for e in got.errors] == ["ERR unknown command 'X'"]
        else:
            assert isinstance(got, WatchError)
