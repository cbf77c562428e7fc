"""``trio-streams file repair FILE``: move the part of a stream file that does not decode into
a side file, then truncate the file where it stops decoding."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

from ..file.errors import StreamFileError, StreamFileNotFoundError
from ..file.lock import hold_exclusively
from ..file.repair import RepairPlan, apply_repair, plan_repair

__all__ = ["repair"]


def _describe(plan: RepairPlan, out: TextIO) -> None:
    if plan.size == 0:
        out.write(
            f"{plan.path}: empty (0 bytes), as a writer killed before its header leaves it; "
            "nothing to repair: the next writer writes the header\n"
        )
        return
    if plan.offset is None:
        out.write(
            f"{plan.path}: all {plan.size} bytes decode ({plan.messages} messages); "
            "nothing to repair\n"
        )
        return
    out.write(
        f"{plan.path}: {plan.size} bytes; everything before byte {plan.offset} decodes "
        f"({plan.messages} messages)\n"
        f"from byte {plan.offset}: {plan.reason}\n"
        f"repair moves the {plan.tail_bytes} bytes from byte {plan.offset} to the end into "
        f"{plan.side_file} (a new file), then truncates {plan.path} to {plan.offset} bytes; "
        f"{plan.messages} messages stay\n"
    )


def _confirmed(out: TextIO) -> bool:
    out.write("move them? [y/N] ")
    out.flush()
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    if sys.stdin is None or not sys.stdin.isatty():
        out.write("\n")  # the answer was not echoed
    return answer.strip().lower() in ("y", "yes")


def repair(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.dry_run:
        plan = plan_repair(args.file)
        _describe(plan, out)
        if plan.offset is not None:
            out.write("dry run: nothing changed\n")
        return 0
    try:
        fd = os.open(args.file, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise StreamFileNotFoundError(f"cannot open: {exc.strerror}", path=args.file) from exc
    try:
        plan = plan_repair(args.file, fd)
        _describe(plan, out)
        if plan.offset is None:
            return 0
        if not args.yes and not _confirmed(out):
            out.write("refused: nothing changed\n")
            return 1
        # No writer may append while the tail is moved; the file must be as it was planned.
        lock = hold_exclusively(fd, args.file, timeout=args.wait)
        try:
            if plan_repair(args.file, fd) != plan:
                raise StreamFileError(
                    "the file changed since it was scanned; nothing was changed, run repair again",
                    path=args.file,
                )
            side = apply_repair(plan, fd)
        finally:
            os.close(lock)
    finally:
        os.close(fd)
    out.write(
        f"moved {plan.tail_bytes} bytes to {side}; {plan.path} now ends at byte {plan.offset}\n"
    )
    return 0
