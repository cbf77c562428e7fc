"""``python -m trio_streams``: the ``trio-streams`` command, for an environment whose scripts
directory is not on the ``PATH`` (the same ``main``, the same exit statuses)."""

from __future__ import annotations

import sys

from .cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
