"""A consumer group on a stream file: 1, 2 and 4 member processes sharing a replay of one file.

Each contender is a set of processes started together on the same file of 100-byte messages
(one key), each an app with one subscription, handler ``handle(payload: bytes)``:

- **members**: ``FileStream("bench").replay().group(NAME)``, a new group each round (so it
  starts at the beginning); each member ends once the group is done;
- **plain replay (peer)**: one process, ``FileStream("bench").replay()``, the same handler.

A process imports and builds its app, says it is ready, and waits; all are told to go at once,
and the time is taken from there to the last one's end (its app stopped; the interpreter's exit
left out). Two handlers: ``await trio.sleep(0.001)`` (waiting, as on I/O; ``--wait-messages``,
default 4000) and a no-op (``--messages``, default 200k). Every contender runs once per round,
round after round (so a disturbance of the machine hits them all); the medians of the rounds,
and the medians of the per-round ratios, are printed against a peer of the same round: the
waiting handler's members against 1 member (aim: 4 members >= x3.5), the no-op's against the
plain replay (aim: 1 member >= x0.5). The machine has 2 cores: a no-op member is bound by the CPU,
so more members than cores do not go faster.

Run: ``python benchmarks/file_group.py [--messages N] [--wait-messages N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import trio
from _common import PAYLOAD, row

from trio_streams import App
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter

KEY = "bench"
MEMBERS = (1, 2, 4)
#: The aims: the waiting handler's 4 members against 1, the no-op's 1 member against the plain
#: replay.
AIM_SPREAD = 3.5
AIM_COST = 0.5


def write(path: Path, count: int) -> None:
    with StreamWriter(path) as writer:
        for i in range(count):
            writer.append(KEY, PAYLOAD)
            if i % 1000 == 999:
                writer.flush()


def child(path: str, group: str, handler: str) -> None:
    """One process: build the app, say ``ready``, wait for ``go``, serve it to its end, say
    ``done <monotonic seconds> <messages handled>``."""
    app = App("bench")
    broker = app.broker(FileBroker(path, existing_only=True))
    stream = FileStream(KEY).replay()
    if group != "-":
        stream = stream.group(group)
    handled = 0

    if handler == "wait":

        @broker.subscriber(stream)
        async def waiting(payload: bytes) -> None:
            nonlocal handled
            handled += 1
            await trio.sleep(0.001)

    else:

        @broker.subscriber(stream)
        async def noop(payload: bytes) -> None:
            nonlocal handled
            handled += 1

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()

    print("ready", flush=True)
    if sys.stdin.readline() != "go\n":
        raise SystemExit("expected go")
    trio.run(serve)
    print(f"done {time.monotonic()} {handled}", flush=True)


def run(path: Path, count: int, processes: int, group: str, handler: str) -> float:
    """``processes`` processes (members of ``group``, or one plain replay: ``-``) handle the
    file's ``count`` messages between them; their rate, msgs/s."""
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(path), group, handler],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for process in children:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    start = time.monotonic()
    for process in children:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    ends, handled = [], 0
    for process in children:
        assert process.stdout is not None
        word, end, n = process.stdout.readline().split()
        assert word == "done", word
        ends.append(float(end))
        handled += int(n)
    for process in children:
        process.communicate(timeout=600)
        assert process.returncode == 0
    assert handled == count, f"{handled} handled of {count}"
    return count / (max(ends) - start)


def compare(
    path: Path, count: int, handler: str, peer: str, repeats: int
) -> dict[str, tuple[float, float]]:
    """Every contender once per round, ``repeats`` rounds; each one's median rate and median
    ratio to ``peer`` (a contender's name) over the rounds."""
    contenders = {"plain replay": (1, "-")} | {
        f"{n} member{'s' if n > 1 else ''}": (n, "") for n in MEMBERS
    }
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(repeats):
        for name, (processes, group) in contenders.items():
            group = group or f"g{handler}{round_}{processes}"
            rates[name].append(run(path, count, processes, group, handler))
    result = {}
    for name in contenders:
        ratio = statistics.median(r / p for r, p in zip(rates[name], rates[peer], strict=True))
        result[name] = (statistics.median(rates[name]), ratio)
        print(
            row(name, result[name][0], peer=statistics.median(rates[peer]), peer_name=peer)
            + f"   median of per-round ratios x{ratio:.2f}; runs: "
            + ", ".join(f"{r / 1000:.1f}k" for r in rates[name])
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000, help="for the no-op handler")
    parser.add_argument("--wait-messages", type=int, default=4_000, help="for the waiting one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("PATH", "GROUP", "HANDLER"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        waiting, noop = Path(tmp) / "wait.ss", Path(tmp) / "noop.ss"
        write(waiting, args.wait_messages)
        write(noop, args.messages)
        print(
            f"{args.repeats} rounds of every contender, medians; a new group each round; "
            "rates from the start signal to the last process's end"
        )
        print(f"\nhandler awaits trio.sleep(0.001), {args.wait_messages} messages (peer: 1 member)")
        wait = compare(waiting, args.wait_messages, "wait", "1 member", args.repeats)
        print(f"\nno-op handler, {args.messages} messages (peer: the plain replay)")
        cost = compare(noop, args.messages, "noop", "plain replay", args.repeats)
    spread, share = wait["4 members"][1], cost["1 member"][1]
    print(
        f"\naim: waiting handler, 4 members >= x{AIM_SPREAD} of 1 member "
        f"({'met' if spread >= AIM_SPREAD else 'NOT met'}: x{spread:.2f})"
    )
    print(
        f"aim: no-op handler, 1 member >= x{AIM_COST} of the plain replay "
        f"({'met' if share >= AIM_COST else 'NOT met'}: x{share:.2f})"
    )


if __name__ == "__main__":
    main()
