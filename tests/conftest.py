"""Shared test configuration. Transport-specific fixtures live beside their tests."""

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _run_journals_of_their_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test keeps its consumers' run journals (trio_streams/redis/journal.py) in a
    directory of its own, inherited by the processes it starts: a server at a port an earlier
    test used never meets that test's journals."""
    directory = tmp_path_factory.mktemp("state")
    before = os.environ.get("TRIO_STREAMS_STATE_DIR")
    os.environ["TRIO_STREAMS_STATE_DIR"] = str(directory)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRIO_STREAMS_STATE_DIR", None)
        else:
            os.environ["TRIO_STREAMS_STATE_DIR"] = before
