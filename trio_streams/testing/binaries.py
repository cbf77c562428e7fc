"""Which server binary the test servers run, what it is, and what it can do.

By default the test servers run the ``redis-server`` on ``PATH``. The environment variable
``TRIO_STREAMS_REDIS_SERVER`` chooses another, by path or by name:

- a path (anything with a ``/``): that binary, e.g. ``/opt/valkey/bin/valkey-server``;
- a name, e.g. ``valkey-9.1``: the ``redis-server`` or ``valkey-server`` in the directory of
  that name under the servers directory (``TRIO_STREAMS_SERVERS_DIR``, by default
  ``~/.cache/trio-streams/servers``), where an install step put it.

Redis and Valkey builds differ in what they can do and in what they log: :func:`server_build`
asks the binary what it is and whether it speaks TLS (it starts it with TLS options and reads
its refusal; no table of versions), and :data:`REPLICA_SYNCED` matches the line either logs
when a replica finished its first sync.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import final

from ..core.errors import TrioStreamsError

__all__ = [
    "REPLICA_SYNCED",
    "SERVERS_DIR_ENV",
    "SERVER_ENV",
    "ServerBuild",
    "ServerLaunchError",
    "redis_binary",
    "server_build",
    "servers_directory",
]

#: Chooses the server binary the test servers run: a path, or a name under
#: :func:`servers_directory`.
SERVER_ENV = "TRIO_STREAMS_REDIS_SERVER"
#: Overrides where named servers live (see :func:`servers_directory`).
SERVERS_DIR_ENV = "TRIO_STREAMS_SERVERS_DIR"

#: The line a replica logs once its first sync with its primary is done: Redis says
#: ``MASTER <-> REPLICA``, Valkey ``PRIMARY <-> REPLICA``.
REPLICA_SYNCED = r"(MASTER|PRIMARY) <-> REPLICA sync: Finished with success"

#: The server binaries a named server directory may hold, in order of preference.
_SERVER_NAMES = ("redis-server", "valkey-server")


class ServerLaunchError(TrioStreamsError):
    """A test server could not be found, started or driven; the message says which and why."""


def servers_directory() -> Path:
    """Where named servers live: ``$TRIO_STREAMS_SERVERS_DIR``, or ``trio-streams/servers``
    under ``$XDG_CACHE_HOME`` (``~/.cache`` when unset)."""
    chosen = os.environ.get(SERVERS_DIR_ENV)
    if chosen:
        return Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "trio-streams" / "servers"


def _chosen_server() -> str:
    """The server binary the environment chooses (see the module's docstring)."""
    chosen = os.environ.get(SERVER_ENV, "")
    if not chosen:
        path = shutil.which("redis-server")
        if path is None:
            raise ServerLaunchError(
                "redis-server is not on PATH: install Debian's redis-server package "
                f"(apt-get install redis-server) or name another binary in {SERVER_ENV}; "
                "the Redis tests need a real server and never skip"
            )
        return path
    if "/" in chosen:
        if not os.access(chosen, os.X_OK) or not Path(chosen).is_file():
            raise ServerLaunchError(f"{SERVER_ENV}={chosen}: no executable file there")
        return chosen
    directory = servers_directory() / chosen
    for name in _SERVER_NAMES:
        candidate = directory / name
        if os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    raise ServerLaunchError(
        f"{SERVER_ENV}={chosen}: no {' or '.join(_SERVER_NAMES)} in {directory} "
        f"(a named server is a directory under {servers_directory()}, set by {SERVERS_DIR_ENV})"
    )


def redis_binary(name: str = "redis-server") -> str:
    """The path of the server binary the test servers run (``name="redis-server"``), or of a
    companion tool such as ``redis-benchmark``: the one beside the chosen server (its
    ``valkey-`` twin for a Valkey), else the one on ``PATH``.

    The path is not resolved: a Valkey binary installed as a link to another tool of the same
    build decides what to be from the name it is started by."""
    server = _chosen_server()
    if name == "redis-server":
        return server
    tool = name.removeprefix("redis-")
    beside = Path(server).parent
    for candidate in (beside / f"redis-{tool}", beside / f"valkey-{tool}"):
        if os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    path = shutil.which(name)
    if path is None:
        raise ServerLaunchError(
            f"{name} is neither beside {server} nor on PATH: install Debian's redis-tools package"
        )
    return path


@final
@dataclass(frozen=True)
class ServerBuild:
    """What a server binary says it is: product (``Redis`` or ``Valkey``), version, and whether
    it was built with TLS."""

    path: str
    product: str
    version: tuple[int, ...]
    tls: bool

    @property
    def label(self) -> str:
        """``<path> (<product> <version>)``: how a skip names the binary it cannot run on."""
        return f"{self.path} ({self.product} {'.'.join(map(str, self.version))})"

    def without_tls(self) -> str | None:
        """Why a test needing TLS cannot run on this build, or ``None`` if it can."""
        return None if self.tls else f"{self.label} is built without TLS"


def server_build(path: str | None = None) -> ServerBuild:
    """Ask ``path`` (by default the chosen server, :func:`redis_binary`) what it is."""
    return _ask(path or redis_binary())


@functools.cache
def _ask(path: str) -> ServerBuild:
    output = _run(path, "--version")
    match = re.search(r"^(\w+) server v=(\d+)\.(\d+)\.(\d+)", output)
    if match is None:
        raise ServerLaunchError(f"{path} --version said {output!r}, not a server version")
    product, *version = match.groups()
    return ServerBuild(path, product, tuple(int(p) for p in version), _speaks_tls(path))


def _speaks_tls(path: str) -> bool:
    """Start ``path`` with a TLS port and certificate files that do not exist, and read why it
    refuses: a build with TLS fails to load them, one without says it has no TLS. Either way it
    exits before listening anywhere."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="trio-streams-tls-probe-") as directory:
        missing = str(Path(directory) / "missing.pem")
        output = _run(
            path, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", missing, "--tls-key-file", missing, "--tls-ca-cert-file", missing,
            "--save", "", "--appendonly", "no", "--dir", directory, "--logfile", "",
            "--daemonize", "no",
        )  # fmt: skip
    if "TLS support" in output or "connection type tls" in output:
        return False  # "Failed finding TLS support": built without it
    if "TLS" in output or "tls" in output:
        return True  # "Failed to configure TLS": it tried to load the files
    raise ServerLaunchError(
        f"{path}, started with a TLS port and missing certificates, said neither that it has "
        f"no TLS nor that it could not load them:\n{output}"
    )


def _run(path: str, *args: str) -> str:
    try:
        done = subprocess.run(
            [path, *args],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServerLaunchError(f"{path} {' '.join(args[:1])} failed: {error}") from error
    return done.stdout + done.stderr
