"""The modules of the flat layout still import under their old paths, as the same module objects
as their new homes, with a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import logging.config
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import trio_streams
from trio_streams._moved import MOVED


def _forget(name: str) -> None:
    sys.modules.pop(name, None)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_module_path_is_its_new_home_with_a_warning(old: str, new: str) -> None:
    _forget(old)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new
    assert module.__spec__ is not None and module.__spec__.name == new  # its own, kept


def test_every_new_home_exists_and_no_old_path_is_still_a_file() -> None:
    package = Path(trio_streams.__file__).parent
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        where = package.joinpath(*old.split(".")[1:])
        assert not where.with_suffix(".py").exists() and not where.is_dir(), old


def test_a_logging_config_naming_the_old_formatter_path_still_configures() -> None:
    _forget("trio_streams.logs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        logging.config.dictConfig(
            {
                "version": 1,
                "disable_existing_loggers": False,
                "formatters": {"json": {"()": "trio_streams.logs.JsonFormatter"}},
            }
        )


def test_a_name_that_never_existed_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("trio_streams.no_such_module")


def test_importing_the_package_imports_nothing_for_the_old_paths() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import trio_streams\n"
        "added = sorted(set(sys.modules) - before)\n"
        "print(' '.join(added))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["trio_streams", "trio_streams._moved"]


def test_the_old_logger_names_did_not_move() -> None:
    """Loggers are configured by name: the modules moved, their loggers' names did not."""
    from trio_streams.running import http_endpoints, supervisor

    assert getattr(supervisor, "_log", None) is logging.getLogger("trio_streams.supervisor")
    assert getattr(http_endpoints, "_log", None) is logging.getLogger("trio_streams.http_endpoints")
