import pytest

import trio_streams
from trio_streams.cli.commands import main


def test_version_is_exposed() -> None:
    assert trio_streams.__version__.count(".") == 2


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert trio_streams.__version__ in capsys.readouterr().out
