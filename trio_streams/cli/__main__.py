"""``python -m trio_streams.cli``: the same command as ``trio-streams`` and
``python -m trio_streams``."""

from __future__ import annotations

import sys

from .commands import main

if __name__ == "__main__":
    sys.exit(main())
