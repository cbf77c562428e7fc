"""The workloads profiled in ``docs/guides/performance.md``, to run under a sampling profiler.

- ``file PATH``: replay the stream file at PATH (write one with ``--write N``) through an app to
  a no-op ``bytes`` handler, with the defaults, as ``file_replay.py`` does;
- ``inprocess N``: publish N JSON messages in process and handle them as a dataclass, as
  ``inprocess_dispatch.py`` does (workers=1).

It times nothing and prints only what it handled: the profile is the figure. Run:
``py-spy record -f flamegraph -o out.svg -- python benchmarks/hot_path_workload.py file PATH``.
Without arguments it runs both workloads once, small (100k messages), on a temporary file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from file_replay import replay_through_the_app
from file_write import write_file
from inprocess_dispatch import framework


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", choices=("file", "inprocess"))
    parser.add_argument(
        "target", nargs="?", help="the stream file (file) or how many messages (inprocess)"
    )
    parser.add_argument("--write", type=int, metavar="N", help="first write N messages to PATH")
    args = parser.parse_args()
    if args.workload is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "replay.ss"
            write_file(path, 100_000)
            print(replay_through_the_app(path, 64, None), "handled from a stream file")
        rate = trio.run(framework, "json", 1, 100_000)
        print(f"100000 handled in process ({rate:.0f} msgs/s)")
        return
    if args.target is None:
        parser.error("give the stream file (file) or how many messages (inprocess)")
    if args.workload == "file":
        path = Path(args.target)
        if args.write:
            write_file(path, args.write)
            return
        print(replay_through_the_app(path, 64, None), "handled")
    else:
        rate = trio.run(framework, "json", 1, int(args.target))
        print(f"{int(args.target)} handled ({rate:.0f} msgs/s)")


if __name__ == "__main__":
    main()
