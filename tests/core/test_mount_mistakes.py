"""Mistakes refused where they are made: a dead letter its own subscription reads, a start
position under the wrong parameter name, an app name that cannot work."""

from __future__ import annotations

from typing import Any

import pytest

from trio_streams import (
    App,
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


# ---- the app's name ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_an_empty_or_whitespace_app_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="App\\(\\) needs a name"):
        App(name)


@pytest.mark.parametrize("name", ["a/b", "shop:eu", "shop#2", "shop@host", "my shop", "x\x00"])
def test_an_app_name_that_cannot_work_in_retry_targets_or_consumer_names_is_refused(
    name: str,
) -> None:
    with pytest.raises(ConfigurationError, match="an app's name cannot hold") as caught:
        App(name)
    assert "\n" not in str(caught.value)


def test_an_app_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="takes a name"):
        App(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["shop", "billing-canary", "orders.v2", "Shop_EU", "café"])
def test_ordinary_app_names_are_accepted(name: str) -> None:
    assert App(name).name == name
