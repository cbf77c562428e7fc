"""The client→server command counter: where each command ends, whatever the chunking."""

from __future__ import annotations

import pytest

from trio_streams.testing.faults.resp import KEPT_BYTES, CommandCounter, RespError


def pack(command: tuple[str | bytes, ...]) -> bytes:
    """A command as every client library sends it: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(command)]
    for argument in command:
        data = argument.encode() if isinstance(argument, str) else argument
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


COMMANDS: list[tuple[str | bytes, ...]] = [
    ("HELLO", "3", "SETNAME", "worker-7"),
    ("CLIENT", "SETNAME", "reader"),
    ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "50", "STREAMS", "s", ">"),
    ("SET", "k", b"\r\n*2\r\n$3\r\n" * 500),
    ("PING",),
]
WIRE = b"".join(pack(c) for c in COMMANDS)


def ends_of(chunks: list[bytes]) -> tuple[list[int], list[str]]:
    counter = CommandCounter()
    ends, names, offset = [], [], 0
    for chunk in chunks:
        for command in counter.feed(chunk):
            ends.append(offset + command.end)
            names.append(command.name)
        offset += len(chunk)
    return ends, names


def test_each_command_is_found_with_the_offset_just_past_its_last_byte() -> None:
    ends, names = ends_of([WIRE])
    expected, at = [], 0
    for command in COMMANDS:
        at += len(pack(command))
        expected.append(at)
    assert ends == expected
    assert names == ["HELLO", "CLIENT", "XREADGROUP", "SET", "PING"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096])
def test_the_same_commands_are_found_whatever_the_chunking(size: int) -> None:
    chunks = [WIRE[i : i + size] for i in range(0, len(WIRE), size)]
    assert ends_of(chunks) == ends_of([WIRE])


def test_a_connection_name_is_read_from_client_setname_and_hello() -> None:
    counter = CommandCounter()
    names = [c.client_name for c in counter.feed(WIRE)]
    assert names == ["worker-7", "reader", None, None, None]


def test_inline_commands_count_too() -> None:
    counter = CommandCounter()
    seen = counter.feed(b"PING\r\n\r\nCLIENT SETNAME x\r\n")
    assert [(c.name, c.end, c.client_name) for c in seen] == [
        ("PING", 6, None),
        ("CLIENT", 26, "x"),
    ]
    assert counter.count == 2


def test_a_long_argument_is_skipped_not_kept() -> None:
    counter = CommandCounter()
    [command] = counter.feed(pack(("SET", "k", b"v" * 1_000_000)))
    assert command.arguments[2] == b"v" * KEPT_BYTES


def test_bytes_that_are_not_resp_raise_naming_the_command() -> None:
    counter = CommandCounter()
    counter.feed(b"PING\r\n")
    with pytest.raises(RespError, match="command 2: bad length"):
        counter.feed(b"*x\r\n")
