"""This process's name where names must differ between processes (a Redis consumer, the target
of a stream file's retry copies): ``host-pid-random``, the same for the whole process, another
one in a forked child."""

from __future__ import annotations

import os
import secrets
import socket

__all__ = ["process_name"]

_named: tuple[int, str] | None = None


def process_name() -> str:
    """``host-pid-random`` of this process (made once; again after a fork)."""
    global _named
    pid = os.getpid()
    if _named is None or _named[0] != pid:
        _named = (pid, f"{socket.gethostname()}-{pid}-{secrets.token_hex(3)}")
    return _named[1]
