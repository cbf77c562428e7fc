"""The shipped conformance suite (``trio_streams.testing.conformance``) on every transport of
this repository: in-process streams, stream files, and Redis streams, Pub/Sub and lists."""

import subprocess
import sys

from trio_streams.testing.conformance import ConformanceTests

from .transports import TRANSPORTS


class TestConformance(ConformanceTests):
    transports = TRANSPORTS


def test_importing_the_testing_package_imports_neither_the_suite_nor_pytest_nor_redis() -> None:
    script = (
        "import sys, trio_streams.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest') "
        "or m.startswith(('trio_streams.testing.conformance', 'trio_streams.redis'))))"
    )
    printed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert printed.strip() == "[]"
