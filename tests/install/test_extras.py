"""Which extra brings which optional dependency, and the pip command a missing one names."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from trio_streams.core.extras import EXTRAS, MissingExtra, importing, install_command

ROOT = Path(__file__).resolve().parents[2]
#: Extras that are not features of the package: development and benchmark tools.
TOOLING = {"test", "lint", "bench", "docs", "msgspec"}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0] for requirement in requirements}


def test_every_extra_of_pyproject_is_known_with_the_distributions_it_installs() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    features = {name: deps for name, deps in extras.items() if name not in TOOLING}
    assert set(EXTRAS) == set(features)
    for name, requirements in features.items():
        assert set(EXTRAS[name].distributions) == _requirement_names(requirements), name


#: How the command starts: this interpreter's pip, quoted for the shell.
PIP = f"{shlex.quote(sys.executable)} -m pip install"


def test_an_editable_install_from_this_tree_names_the_tree_with_dash_e() -> None:
    # The development environment is ``pip install -e .`` of this checkout.
    assert install_command("http") == f"{PIP} -e {shlex.quote(f'{ROOT}[http]')}"


def test_the_command_names_this_installations_interpreter() -> None:
    words = shlex.split(install_command("redis"))
    assert words[:4] == [sys.executable, "-m", "pip", "install"]


_PRINT_COMMAND = (
    "from trio_streams.core.extras import install_command; print(install_command('tui'))"
)


def test_an_interpreter_path_with_a_space_is_quoted_for_the_shell(tmp_path: Path) -> None:
    venv = tmp_path / "my venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
        timeout=120,
    )
    python = str(venv / "bin" / "python")
    result = subprocess.run(
        [
            python,
            "-c",
            "from trio_streams.core.extras import install_command; print(install_command('tui'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shlex.split(result.stdout.strip())[:4] == [python, "-m", "pip", "install"]


def _command_from_copy(tmp_path: Path, pyproject: str | None) -> str:
    """``install_command('redis')`` of a copy of the package under ``tmp_path`` (beside the
    given pyproject.toml, if any), imported without site-packages: no installed metadata."""
    shutil.copytree(ROOT / "trio_streams", tmp_path / "trio_streams")
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "from trio_streams.core.extras import install_command; print(install_command('redis'))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def test_a_package_from_an_index_names_the_distribution(tmp_path: Path) -> None:
    assert _command_from_copy(tmp_path, None) == f"{PIP} 'trio-streams[redis]'"


def test_a_checkout_of_another_project_is_not_taken_for_this_one(tmp_path: Path) -> None:
    command = _command_from_copy(tmp_path, '[project]\nname = "other"\n')
    assert command == f"{PIP} 'trio-streams[redis]'"


def test_a_checkout_imported_as_it_is_names_itself(tmp_path: Path) -> None:
    directory = tmp_path / "it's here"  # quoted for the shell as a whole
    directory.mkdir()
    command = _command_from_copy(directory, '[project]\nname = "trio-streams"\n')
    assert command == f"{PIP} -e {shlex.quote(f'{directory}[redis]')}"
    assert shlex.split(command)[-3:] == ["install", "-e", f"{directory}[redis]"]


def test_a_missing_submodule_of_an_installed_extra_is_not_called_a_missing_extra() -> None:
    with pytest.raises(ModuleNotFoundError) as caught, importing("http", "--http"):
        import hypercorn.no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert not isinstance(caught.value, MissingExtra)


def test_a_missing_extra_is_an_import_error_naming_the_extra_and_the_command() -> None:
    error = MissingExtra("prometheus", "trio_streams.prometheus")
    assert isinstance(error, ImportError)
    assert (error.extra, error.name) == ("prometheus", "prometheus_client")
    assert error.command == install_command("prometheus")
    assert str(error) == (
        "trio_streams.prometheus needs the 'prometheus' extra (prometheus-client, not "
        f"installed): {error.command}"
    )


def test_the_error_is_part_of_the_public_api() -> None:
    import trio_streams

    assert trio_streams.MissingExtra is MissingExtra
