"""The compatibility table of the Redis guide (docs/guides/redis.md, "What each server offers")
says what the server the tests run on really offers.

The server's column is chosen from ``INFO server`` (its name and version: identification, to
pick the column); what it offers is read from its command table (and, for a reply field, from
the reply), as the transport reads it. Run on every server of the matrix, the test checks every
column the matrix covers.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from tests.docs_blocks import DOCS
from trio_streams.redis.client import RedisClient
from trio_streams.redis.client.capabilities import ServerCommands

GUIDE = DOCS / "guides" / "redis.md"
HEADING = "## What each server offers"
COLUMNS = ("Redis 7.0", "Redis 7.2+", "Redis 8.2", "Valkey 8", "Valkey 9")

Probe = Callable[[RedisClient, ServerCommands], Awaitable[bool]]


def _has(*names: str) -> Probe:
    async def probe(redis: RedisClient, commands: ServerCommands) -> bool:
        found = {commands.has(name) for name in names}
        assert len(found) == 1, f"{names}: some present, some not"
        return found.pop()

    return probe


def _takes(*pairs: tuple[str, str]) -> Probe:
    async def probe(redis: RedisClient, commands: ServerCommands) -> bool:
        return any(commands.takes(command, token) for command, token in pairs)

    return probe


async def _keys_from_server(redis: RedisClient, commands: ServerCommands) -> bool:
    spec = commands.keys("xadd")
    return not commands.is_snapshot and spec is not None and spec.first == 1


async def _inactive(redis: RedisClient, commands: ServerCommands) -> bool:
    await redis.execute("XGROUP", "CREATE", "compat", "g", "$", "MKSTREAM")
    await redis.execute("XGROUP", "CREATECONSUMER", "compat", "g", "c")
    [consumer] = await redis.execute("XINFO", "CONSUMERS", "compat", "g")
    fields = consumer.keys() if isinstance(consumer, dict) else consumer[::2]
    return b"inactive" in fields


async def _acked(redis: RedisClient, commands: ServerCommands) -> bool:
    xadd, xtrim = commands.takes("xadd", "ACKED"), commands.takes("xtrim", "ACKED")
    assert xadd == xtrim
    return xadd


#: The first words of each row's first cell, and how the server is asked.
PROBES: dict[str, Probe] = {
    "`XACKDEL` for `delete_on_ack`": _has("xackdel"),
    "`XADD`/`XTRIM` `ACKED` trimming": _acked,
    "command keys from the server": _keys_from_server,
    "`HSETEX`, `HGETEX`, `HGETDEL`": _has("hsetex", "hgetex", "hgetdel"),
    "`HEXPIRE` family": _has("hexpire", "hpexpire", "httl", "hpersist"),
    "`XINFO CONSUMERS` `inactive`": _inactive,
    "`CLIENT SETINFO`": _has("client|setinfo"),
    "`XGROUP SETID ENTRIESREAD`": _takes(("xgroup|setid", "ENTRIESREAD")),
    "`XREADGROUP ... CLAIM`": _takes(("xreadgroup", "CLAIM")),
    "`XADD IDMP`": _takes(("xadd", "IDMP")),
    "`XNACK`": _has("xnack"),
    "`XREADGROUP MAXCOUNT` / `MAXSIZE`": _takes(
        ("xreadgroup", "MAXCOUNT"), ("xreadgroup", "MAXSIZE")
    ),
}


def table() -> tuple[list[str], list[list[str]]]:
    """The header and rows of the guide's table."""
    text = GUIDE.read_text()
    section = text[text.index(HEADING) :]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


async def server_column(redis: RedisClient) -> tuple[str, tuple[int, ...]]:
    """The table's column for the connected server, and its release (identification only)."""
    raw = await redis.execute("INFO", "server")
    info = dict(line.split(":", 1) for line in raw.decode().splitlines() if ":" in line)
    if info.get("server_name") == "valkey":
        version = _version(info["valkey_version"])
        column = f"Valkey {version[0]}"
    else:
        version = _version(info["redis_version"])
        column = (
            "Redis 7.0"
            if version[:2] == (7, 0)
            else "Redis 7.2+"
            if version < (8, 2)
            else "Redis 8.2"
        )
    assert column in COLUMNS, f"the compatibility table has no column for {info}: add one"
    return column, version


def expected(cell: str, version: tuple[int, ...]) -> bool:
    """What a cell says of a server of ``version``: yes, no, or from X.Y."""
    if cell == "yes":
        return True
    if cell == "no":
        return False
    match = re.fullmatch(r"from (\d+)\.(\d+)", cell)
    assert match, f"a cell is yes, no or 'from X.Y', not {cell!r}"
    return version >= (int(match[1]), int(match[2]))


def test_the_table_has_one_row_per_probe_and_a_column_per_server_line() -> None:
    header, rows = table()
    assert header[1:6] == list(COLUMNS)
    assert header[6] == "what trio-streams does with it"
    matched = [[key for key in PROBES if row[0].startswith(key)] for row in rows]
    assert all(len(keys) == 1 for keys in matched), f"rows without one probe: {rows}"
    assert sorted(key for [key] in matched) == sorted(PROBES)  # each probe, one row
    for row in rows:
        for cell in row[1:6]:
            expected(cell, (0,))  # every cell is yes, no or from X.Y


async def test_the_compatibility_table_says_what_the_connected_server_offers(
    redis: RedisClient,
) -> None:
    column, version = await server_column(redis)
    header, rows = table()
    at = header.index(column)
    commands = await redis.server_commands()
    wrong = []
    for row in rows:
        [probe] = [p for key, p in PROBES.items() if row[0].startswith(key)]
        says, has = expected(row[at], version), await probe(redis, commands)
        if says != has:
            wrong.append(
                f"{row[0]}: the table says {row[at]!r}, the server {'has' if has else 'lacks'} it"
            )
    assert wrong == [], f"{column} ({'.'.join(map(str, version))}): " + "; ".join(wrong)
