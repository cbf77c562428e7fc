"""How long ``trio-streams --help``, ``publish`` (to a stream file) and ``file decode`` take
to start and finish, against the interpreter's own start measured beside them.

Each command runs N times in a fresh interpreter, in interleaved rounds (every command once a
round, in a rotating order), beside two peers timed in the same rounds: ``python -c pass`` (the
interpreter starting and stopping, the floor of any Python command) and ``python -c "import
trio"`` (what a command pays if it imports Trio). With ``--before DIR`` (a source tree of an
earlier trio-streams, e.g. ``git archive REV trio_streams | tar -x -C DIR``), the same commands
run from it in the same rounds too, for before/after figures of one run. Bytecode is written and
used as an installed package's is (a warm-up run of each command writes it).

Printed: the median wall time and CPU time (user + system) of each, the aim (a command starts
and finishes within 0.25 s), the ratios to the peers, then the modules each command spends the
most time importing (``python -X importtime``, one run).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _processes import Timings, import_times, python_env, timed

#: The aim: each command done within this many seconds (wall, median round).
AIM_S = 0.25


def commands(folder: Path) -> dict[str, list[str]]:
    """The commands measured, each as ``trio-streams`` arguments; ``folder`` holds their files
    (the file ``file decode`` reads is written there first, with 100 messages)."""
    return {
        "--help": ["--help"],
        "publish": ["publish", str(folder / "published.ss"), "orders", "hello"],
        "file decode": ["file", "decode", str(folder / "small.ss")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--before", type=Path, default=None, metavar="DIR")
    parser.add_argument("--top", type=int, default=8, help="import entries shown per command")
    args = parser.parse_args()
    python = sys.executable
    trees = {"after": python_env()}
    if args.before is not None:
        trees["before"] = python_env(args.before)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([python, "-c", "pass"], trees["after"]),
            'python -c "import trio"': ([python, "-c", "import trio"], trees["after"]),
        }
        for tree, env in trees.items():
            for name, arguments in commands(folder).items():
                runs[f"{name} ({tree})"] = ([python, "-m", "trio_streams", *arguments], env)
        _write_small_file(python, trees["after"], folder / "small.ss")
        for argv, env in runs.values():  # warm-up: bytecode written, caches filled
            timed(argv, env, Timings())
        timings = {name: Timings() for name in runs}
        names = list(runs)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                argv, env = runs[name]
                timed(argv, env, timings[name])

        floor = timings["python -c pass"]
        trio_import = timings['python -c "import trio"']
        print(f"{args.rounds} interleaved rounds; medians (wall, and CPU = user + system)")
        print(f"{'':34} {'wall':>9} {'CPU':>9}   vs python -c pass   aim <= {AIM_S:.2f} s")
        for name, timing in timings.items():
            aim = ""
            if name.endswith(")"):
                aim = "met" if timing.wall_median <= AIM_S else "NOT met"
            print(
                f"{name:34} {timing.wall_median * 1000:7.1f}ms {timing.cpu_median * 1000:7.1f}ms"
                f"   x{timing.wall_median / floor.wall_median:5.2f} wall"
                f" x{timing.cpu_median / floor.cpu_median:5.2f} CPU   {aim}"
            )
        print(
            f"peer: import trio adds {(trio_import.wall_median - floor.wall_median) * 1000:.1f} ms "
            f"wall, {(trio_import.cpu_median - floor.cpu_median) * 1000:.1f} ms CPU to a start"
        )
        if "before" in trees:
            for name in commands(folder):
                before, after = timings[f"{name} (before)"], timings[f"{name} (after)"]
                print(
                    f"{name}: after / before x{after.wall_median / before.wall_median:.2f} wall, "
                    f"x{after.cpu_median / before.cpu_median:.2f} CPU (same rounds)"
                )
        for name, (argv, env) in runs.items():
            if not name.endswith(")"):
                continue
            rows = import_times(argv, env)
            total = sum(own for own, _, _ in rows)
            print(f"\n{name}: {len(rows)} modules imported, {total / 1000:.1f} ms in all (one run)")
            for own, cumulative, module in sorted(rows, reverse=True)[: args.top]:
                print(
                    f"  {own / 1000:6.1f} ms self {cumulative / 1000:7.1f} ms cumulative  {module}"
                )


def _write_small_file(python: str, env: dict[str, str], path: Path) -> None:
    """A stream file of 100 messages, written with the library in its own process."""
    code = (
        "import sys\nfrom trio_streams.file.writer import StreamWriter\n"
        "with StreamWriter(sys.argv[1]) as w:\n"
        "    w.publish_many([('orders', b'x' * 100, None)] * 100)\n"
    )
    timed([python, "-c", code, str(path)], env, Timings())


if __name__ == "__main__":
    main()
