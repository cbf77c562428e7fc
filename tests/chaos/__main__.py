"""``python -m tests.chaos [--minutes M] [--seed S] [--only WORD ...]``: run the campaign and
print its table; exit status 1 when a row shows a defect (each printed below the table)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import trio

from .campaign import NAMES, campaign
from .history import table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="about how long (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="the seed of every choice (default 1)")
    parser.add_argument(
        "--only",
        nargs="*",
        default=(),
        metavar="WORD",
        help=f"run only the workloads whose name holds a WORD: {', '.join(NAMES)}",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the ledgers and the consumers' output in DIR (default: a temporary one)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.keep is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-")))
        else:
            directory = args.keep
            directory.mkdir(parents=True, exist_ok=True)
        rows = trio.run(
            lambda: campaign(
                seed=args.seed, minutes=args.minutes, directory=directory, only=args.only
            )
        )
    print(table(rows))
    print(
        f"seed {args.seed}, --minutes {args.minutes:g}: "
        f"{time.monotonic() - started:.0f} s on this machine"
    )
    defects = [defect for row in rows for defect in row.defects]
    for defect in defects:
        print(f"DEFECT {defect}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
