"""Which stream keys a file holds: to refuse a key named on the command line that it does not.

:func:`check_file_keys` reads the file from the start only until every key asked for has been
seen, so a key that is there usually costs a page or two; a key that is not costs one pass over
the file (the page cache's, for a file just written), after which nothing has been printed or
sent yet.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from .._names import check_names
from .format import INTERNAL_KEY
from .reader import FileReader

__all__ = ["check_file_keys"]

#: Messages decoded per read while looking.
_BATCH = 8192


def check_file_keys(path: str | os.PathLike[str], keys: Collection[str] | None) -> None:
    """Raise :class:`~trio_streams._names.NameNotFound` if a key of ``keys`` has no message in
    the file at ``path``, listing the keys it holds, closest first. None or empty: any key."""
    keys = [key for key in keys or () if key != INTERNAL_KEY]  # always there, never listed
    if not keys:
        return
    wanted = set(keys)
    seen: set[str] = set()
    with FileReader(path) as reader:
        while not wanted <= seen:
            batch = reader.read_messages(_BATCH)
            if not batch:
                if reader.at_eof or reader.eos is not None:
                    break
                continue
            seen.update(message.stream_key for message in batch)
    check_names("stream key", keys, seen, os.fspath(path))
