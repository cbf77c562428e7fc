"""Members of a consumer group on a stream file, and writers, as real processes.

``trio-streams run tests.file.group_apps:member --factory`` is one member of group ``g`` (or
``GROUP_NAME``) of ``GROUP_FILE``, configured by environment variables (``trio-streams run``
takes the app, not its settings):

- ``GROUP_KEYS``: the stream keys, comma-separated; ``GROUP_ORDERED=1``: an ordered group;
  ``GROUP_LEASE``: its lease in seconds; ``GROUP_REPLAY=1``: a replay group, whose members end
  once the group is done (otherwise a live group from the beginning of the file, run until
  stopped).
- ``GROUP_WORKERS``: the subscriber's workers; ``GROUP_CLAIM``: the group's claim size (16).
- ``GROUP_CALLS``: each call of the handler appends ``<id> <attempt> <pid>`` to this file, as
  its first step (the ledger's runs begin earlier, as a delivery's handling begins: one may be
  on record whose handler was never called, in a process killed meanwhile).
- ``GROUP_LEDGER``: every handler run and settle is written to this
  :class:`~trio_streams.testing.faults.Ledger` (the message's id is its payload).
- ``GROUP_SLEEP_MS``: each run takes a random moment up to this (settles out of order).
- ``GROUP_GATE`` and ``GROUP_GATE_SIZE``: a member's first run marks the gate directory, then
  every run waits until ``GROUP_GATE_SIZE`` members have marked it (so each member provably
  took part before the work is done).
- ``GROUP_RETRY_AFTER`` (seconds) and ``GROUP_RETRY_EVERY`` (n): a message whose number is a
  multiple of n asks ``retry_after`` every time it runs (``GROUP_RETRY_AFTER`` absent: it is
  acknowledged); ``GROUP_POISON`` (n): such a message raises every time it runs.
- ``GROUP_WAIT_ON`` (a message id) and ``GROUP_WAIT_FOR`` (a path): the run of that message
  waits until that file exists.
- ``GROUP_MAX_ATTEMPTS`` and ``GROUP_DEAD_LETTER``: the subscriber's ``max_attempts`` and
  ``dead_letter``.

``python -m tests.file.group_apps write PATH LEDGER NAME COUNT KEYS LANES`` appends COUNT
messages, payload ``NAME:n`` (n from 1) on key ``NAME.k{n % KEYS}``, recording each in the ledger
before appending it (its lane its key if LANES is 1), flushing every 1..20 messages, and prints
``done``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import trio

from trio_streams import App, Context, Position
from trio_streams.core.outcome import Outcome, ack, retry_after
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.sources import DEFAULT_LEASE
from trio_streams.file.writer import StreamWriter
from trio_streams.testing.faults import Ledger, ledger_middleware

#: Bound of a gate's wait: far beyond what a loaded machine needs to start a few members.
GATE_TIMEOUT = 60.0


def _print(line: str) -> None:
    os.write(1, line.encode() + b"\n")  # one write per line: a pipe never splits it


def number(ident: str) -> int:
    """The number of a message id ``name:n``."""
    return int(ident.rpartition(":")[2])


def group_source(
    keys: list[str], name: str, *, ordered: bool, lease: float, claim: int, replay: bool
) -> FileStream:
    """``FileStream(*keys).group(name, ...)``, replayed or live from the file's beginning."""
    stream = (
        FileStream(*keys).replay() if replay else FileStream(*keys, start_at=Position.beginning())
    )
    return stream.group(name, ordered=ordered, lease=lease, claim=claim)


async def _gate(directory: Path, size: int, first: bool) -> None:
    """Mark the gate at this member's first run, then wait until ``size`` members have."""
    if first:
        (directory / str(os.getpid())).touch()
    with trio.fail_after(GATE_TIMEOUT):
        while len(os.listdir(directory)) < size:  # noqa: ASYNC110 - marked by other processes
            await trio.sleep(0.01)


def member() -> App:
    env = os.environ
    ledger = Ledger(env["GROUP_LEDGER"])
    app = App(
        "group-member",
        middlewares=[ledger_middleware(ledger, id_of=lambda d: d.payload.decode())],
    )
    broker = app.broker(FileBroker(env["GROUP_FILE"], existing_only=True))
    source = group_source(
        env["GROUP_KEYS"].split(","),
        env.get("GROUP_NAME", "g"),
        ordered=env.get("GROUP_ORDERED") == "1",
        lease=float(env.get("GROUP_LEASE", DEFAULT_LEASE)),
        claim=int(env.get("GROUP_CLAIM", "16")),
        replay=env.get("GROUP_REPLAY") == "1",
    )
    sleep_ms = float(env.get("GROUP_SLEEP_MS", "0"))
    gate = Path(env["GROUP_GATE"]) if "GROUP_GATE" in env else None
    gate_size = int(env.get("GROUP_GATE_SIZE", "0"))
    retry_every = int(env.get("GROUP_RETRY_EVERY", "0"))
    delay = float(env["GROUP_RETRY_AFTER"]) if "GROUP_RETRY_AFTER" in env else None
    poison = int(env.get("GROUP_POISON", "0"))
    wait_on = env.get("GROUP_WAIT_ON")
    wait_for = Path(env.get("GROUP_WAIT_FOR", "."))
    options: dict[str, object] = {}
    if "GROUP_MAX_ATTEMPTS" in env:
        options["max_attempts"] = int(env["GROUP_MAX_ATTEMPTS"])
    if "GROUP_DEAD_LETTER" in env:
        options["dead_letter"] = env["GROUP_DEAD_LETTER"]
    runs = 0
    calls = os.open(env["GROUP_CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @broker.subscriber(
        source,
        workers=int(env.get("GROUP_WORKERS", "1")),
        name="member",
        **options,  # type: ignore[arg-type]
    )
    async def handle(payload: bytes, ctx: Context) -> Outcome:
        nonlocal runs
        runs += 1
        ident = payload.decode()
        os.write(calls, f"{ident} {ctx.attempt} {os.getpid()}\n".encode())  # one whole line
        if gate is not None:
            await _gate(gate, gate_size, runs == 1)
        if ident == wait_on:
            with trio.fail_after(GATE_TIMEOUT):
                while not os.path.exists(wait_for):  # noqa: ASYNC110, ASYNC240 - made by the test
                    await trio.sleep(0.01)
        if sleep_ms:
            await trio.sleep(random.random() * sleep_ms / 1000)
        else:
            await trio.lowlevel.checkpoint()
        n = number(ident)
        if poison and n % poison == 0:
            raise RuntimeError(f"poison message {ident}")
        if retry_every and n % retry_every == 0 and delay is not None:
            return retry_after(delay)
        return ack()

    return app


def write(path: str, ledger_path: str, name: str, count: int, keys: int, lanes: bool) -> None:
    rng = random.Random(name)
    with Ledger(ledger_path) as ledger, StreamWriter(path) as writer:
        n = 1
        while n <= count:
            for _ in range(min(rng.randint(1, 20), count - n + 1)):
                ident, key = f"{name}:{n}", f"{name}.k{n % keys}"
                ledger.published(ident, lane=key if lanes else None)
                writer.append(key, ident.encode())
                n += 1
            writer.flush()
            time.sleep(0.001)  # pacing: the appends span the members' work
    _print("done")


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command != "write":
        raise SystemExit(f"{__name__}: unknown command {command!r}")
    path, ledger_path, name, count, keys, lanes = args
    write(path, ledger_path, name, int(count), int(keys), lanes == "1")
