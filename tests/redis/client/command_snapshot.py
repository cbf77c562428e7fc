"""Writes the committed command snapshot (``trio_streams/redis/client/command_keys.py``) from
the command tables of real servers: the union of every server of the test matrix.

    python -m tests.redis.client.command_snapshot /usr/bin /tmp/bin82 /tmp/bin91 /tmp/bin80

Each argument is a directory holding a ``redis-server`` (Redis, or a Valkey build linked under
that name); each is started in turn, its ``COMMAND`` read, and the tables merged. Two servers
that disagree on a command's keys stop it: the snapshot speaks for every server it lists.
``--check`` compares instead of writing (the test of the snapshot does the same against the
one server it runs on).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import trio

from tests.redis_servers import redis_server
from trio_streams.redis.client import connect
from trio_streams.redis.client.command_keys import format_line
from trio_streams.redis.client.keys import KeySpec

SNAPSHOT_FILE = (
    Path(__file__).resolve().parents[3] / "trio_streams" / "redis" / "client" / "command_keys.py"
)
_BEGIN = '_TABLE = """\\\n'
_END = '"""\n'


async def read_table(url: str) -> tuple[str, dict[str, KeySpec]]:
    """The server's name and version (for the report) and its key table."""
    async with connect(url) as redis:
        info = await redis.execute("INFO", "server")
        commands = await redis.server_commands()
    fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
    name = fields.get("server_name", "redis")
    version = fields.get("valkey_version", fields.get("redis_version", "?"))
    table = {name: spec for name in commands.names() if (spec := commands.keys(name))}
    return f"{name} {version}", table


def table_of(directory: str) -> tuple[str, dict[str, KeySpec]]:
    """Start the ``redis-server`` of ``directory`` and read its table."""
    saved = os.environ["PATH"]
    os.environ["PATH"] = f"{directory}{os.pathsep}{saved}"
    try:
        with redis_server() as server:
            return trio.run(read_table, server.url)
    finally:
        os.environ["PATH"] = saved


def merge(tables: list[tuple[str, dict[str, KeySpec]]]) -> dict[str, KeySpec]:
    """The union of the tables; raises SystemExit naming a command two servers disagree on."""
    merged: dict[str, tuple[str, KeySpec]] = {}
    for server, table in tables:
        for name, spec in table.items():
            seen = merged.get(name)
            if seen is None:
                merged[name] = (server, spec)
            elif format_line(name, seen[1]) != format_line(name, spec):
                raise SystemExit(
                    f"{name}: {seen[0]} says {format_line(name, seen[1])!r}, {server} says "
                    f"{format_line(name, spec)!r}"
                )
    return {name: spec for name, (_, spec) in sorted(merged.items())}


def render(table: dict[str, KeySpec]) -> str:
    return "".join(format_line(name, spec) + "\n" for name, spec in table.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", help="directories holding a redis-server")
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    tables = [table_of(d) for d in args.directories]
    for server, table in tables:
        print(f"{server}: {len(table)} commands", file=sys.stderr)
    text = render(merge(tables))
    source = SNAPSHOT_FILE.read_text()
    start = source.index(_BEGIN) + len(_BEGIN)
    end = source.index(_END, start)
    if args.check:
        if source[start:end] != text:
            raise SystemExit(f"{SNAPSHOT_FILE} differs from the servers' union: regenerate it")
        print("the snapshot is the servers' union", file=sys.stderr)
        return
    SNAPSHOT_FILE.write_text(source[:start] + text + source[end:])
    print(f"wrote {SNAPSHOT_FILE}", file=sys.stderr)


if __name__ == "__main__":
    main()
