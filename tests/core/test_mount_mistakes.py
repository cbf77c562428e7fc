"""Mistakes refused where they are made: a dead letter its own subscription reads, a start
position under the wrong parameter name, an app name that cannot work."""

from __future__ import annotations

from typing import Any

import pytest

from trio_streams import (
    ConfigurationError,
    MemoryStream,
)
from trio_streams.file import FileStream
from trio_streams.redis import RedisStream

# ---- the parameter the user wrote -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "parameter"),
    [
        (lambda: RedisStream("s", start="0"), "start"),
        (lambda: FileStream("s", start_at="0"), "start_at"),
        (lambda: MemoryStream("s", start_at="0"), "start_at"),
    ],
    ids=["RedisStream", "FileStream", "MemoryStream"],
)
def test_an_error_names_the_parameter_the_user_wrote(make: Any, parameter: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make()
    message = str(caught.value)
    assert f"{parameter} takes a Position, not '0'" in message, message
    if parameter == "start":
        assert "start_at" not in message, message
