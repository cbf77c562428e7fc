"""Real ``redis-server`` processes for tests: a standalone server on a free loopback port.

A test of an app on Redis needs a real server, not a mock: :class:`RedisServer` starts one on a
free loopback port with no persistence (``--save "" --appendonly no``, files in a temporary
directory) and reads its log on a thread, so callers wait for what the server *says* ("Ready
to accept connections") with a timeout instead of sleeping::

    with RedisServer() as server:
        app = App("svc")
        app.broker(RedisBroker(server.url))
        ...
        server.kill()      # a crash; server.restart() brings it back on the same port

Only Debian's ``redis-server`` package (or any ``redis-server`` on ``PATH``) is needed; when the
binary is missing, :func:`redis_binary` fails with instructions, nothing is skipped.
``TRIO_STREAMS_REDIS_SERVER`` runs another build, Redis or Valkey, by path or by name
(:mod:`trio_streams.testing.binaries`). Put a
:class:`~trio_streams.testing.faults.FaultProxy` in front of it to cut, stall or delay the
connections of the app under test.

The functions here are synchronous (they run before and around Trio, in fixtures); inside a
Trio task, prefer ``trio.to_thread.run_sync(server.restart)`` for a restart that takes time.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, final

from .binaries import REPLICA_SYNCED, ServerBuild, ServerLaunchError, redis_binary, server_build

__all__ = [
    "REPLICA_SYNCED",
    "START_TIMEOUT",
    "Address",
    "LogWatcher",
    "RedisServer",
    "ServerBuild",
    "ServerLaunchError",
    "TlsFiles",
    "command",
    "free_port",
    "poll_until",
    "redis_binary",
    "server_build",
]

#: Seconds a server gets to report it is ready (a loaded 2-core machine needs slack).
START_TIMEOUT = 30.0

Address = tuple[str, int]


#: Ports handed out by :func:`free_port` in this process (cluster buses included): a port free
#: now may be given to another server before the first one binds it (a cluster node's bus port
#: is ``port + 10000``, inside the range the OS hands out), so none is handed out twice.
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1", *, bus_offset: int | None = None) -> int:
    """A port free on ``host`` right now (and ``port + bus_offset`` too, for cluster buses),
    never one this process handed out before, as a port or as a bus."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind((host, 0))
            port: int = probe.getsockname()[1]
        if port in _handed_out:
            continue
        if bus_offset is None:
            _handed_out.add(port)
            return port
        bus_port = port + bus_offset
        if bus_port < 65536 and bus_port not in _handed_out:
            with socket.socket() as bus:
                try:
                    bus.bind((host, bus_port))
                except OSError:
                    continue
            _handed_out.update((port, bus_port))
            return port
    raise ServerLaunchError(f"no free port pair on {host} after 100 tries")


class LogWatcher:
    """Reads a process's output on a thread; lets callers wait for a line matching a pattern."""

    def __init__(self, stream: Any, name: str) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(
            target=self._pump, args=(stream,), name=f"log:{name}", daemon=True
        )
        self._thread.start()

    def _pump(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            with self._changed:
                self.lines.append(raw.decode("utf-8", "replace").rstrip())
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def mark(self) -> int:
        """A position: :meth:`wait_for` with ``since=mark`` only looks at later lines."""
        with self._changed:
            return len(self.lines)

    def wait_for(self, pattern: str, *, timeout: float, since: int = 0, what: str = "") -> str:
        """The first line at or after ``since`` matching ``pattern``; raises after ``timeout``."""
        regex = re.compile(pattern)
        checked = since
        with self._changed:
            while True:
                for line in self.lines[checked:]:
                    if regex.search(line):
                        return line
                checked = len(self.lines)
                if self._closed:
                    raise ServerLaunchError(
                        f"{what or 'process'} exited before logging /{pattern}/; "
                        f"last lines:\n{self.tail()}"
                    )
                if not self._changed.wait(timeout):
                    raise ServerLaunchError(
                        f"{what or 'process'} did not log /{pattern}/ within {timeout}s; "
                        f"last lines:\n{self.tail()}"
                    )

    def tail(self, count: int = 15) -> str:
        return "\n".join(self.lines[-count:])


def command(
    address: Address, *args: Any, ssl_context: ssl.SSLContext | None = None, timeout: float = 10
) -> Any:
    """Run one command synchronously (for fixtures, outside Trio); error replies raise."""
    import hiredis

    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection(address, timeout=timeout))
        if ssl_context is not None:  # the wrapper is a socket of its own, closed on its own
            sock = stack.enter_context(ssl_context.wrap_socket(sock, server_hostname=address[0]))
        sock.sendall(hiredis.pack_command(tuple(args)))
        reader = hiredis.Reader()
        while True:
            reply = reader.gets()
            if reply is not False:
                break
            chunk = sock.recv(65536)
            if not chunk:
                raise ServerLaunchError(f"{address} closed the connection during {args[0]}")
            reader.feed(chunk)
    if isinstance(reply, hiredis.ReplyError):
        raise ServerLaunchError(f"{args[0]} on {address[0]}:{address[1]} failed: {reply}")
    return reply


def poll_until(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Re-check a condition no log line announces, until it holds or ``timeout`` passes.

    Used only where a server offers no event to wait for; the interval is short and the
    deadline explicit, so a broken condition fails loudly instead of hanging.
    """
    deadline = time.monotonic() + timeout
    interval = 0.01
    while not check():
        if time.monotonic() > deadline:
            raise ServerLaunchError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 2, 0.2)


@final
@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1/localhost, and a client
    certificate, generated with trustme."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @classmethod
    def generate(cls, directory: Path) -> TlsFiles:
        import trustme

        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("client@trio-streams.test")
        files = cls(
            ca=directory / "ca.pem",
            server_cert=directory / "server.pem",
            server_key=directory / "server.key",
            client_cert=directory / "client.pem",
            client_key=directory / "client.key",
        )
        ca.cert_pem.write_to_path(str(files.ca))
        server.cert_chain_pems[0].write_to_path(str(files.server_cert))
        server.private_key_pem.write_to_path(str(files.server_key))
        client.cert_chain_pems[0].write_to_path(str(files.client_cert))
        client.private_key_pem.write_to_path(str(files.client_key))
        return files

    def client_context(self, *, with_client_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


class RedisServer:
    """One real ``redis-server`` (or sentinel) process on a free loopback port, keeping nothing
    on disk.

    ``with RedisServer() as server:`` starts it (returning once it logs that it accepts
    connections) and kills it on exit, removing the temporary directory it made. Inside, a test
    may :meth:`kill` it (a crash), :meth:`stop` it, :meth:`pause` it (a hung server),
    :meth:`restart` it on the same port, and run :meth:`command` synchronously.

    Without ``directory`` the server makes its own temporary directory; ``port=0`` picks a
    free one. ``tls`` serves TLS only, with the files given; ``sentinel_config`` runs a
    sentinel with that configuration instead of a data node.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        extra_args: Sequence[str] = (),
        tls: TlsFiles | None = None,
        tls_auth_clients: str = "optional",
        sentinel_config: str | None = None,
        name: str = "redis",
    ) -> None:
        self._own_directory: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._own_directory = tempfile.TemporaryDirectory(prefix="trio-streams-redis-")
            directory = Path(self._own_directory.name)
        self.directory = directory
        self.host = host
        self.port = port or free_port(host)
        self.extra_args = extra_args
        self.tls = tls
        #: ``yes`` makes clients present a certificate; ``optional`` lets them choose.
        self.tls_auth_clients = tls_auth_clients
        self.sentinel_config = sentinel_config
        self.name = name
        self.process: subprocess.Popen[bytes] | None = None
        self.log: LogWatcher | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {self.name} {self.host}:{self.port} {state}>"

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the process (if running) and remove the directory this server made."""
        try:
            self.kill()
        finally:
            if self._own_directory is not None:
                self._own_directory.cleanup()
                self._own_directory = None

    @property
    def address(self) -> Address:
        return (self.host, self.port)

    @property
    def url(self) -> str:
        """``redis://`` (or ``rediss://`` with the CA and client certificate) of this server."""
        if self.tls is None:
            return f"redis://{self.host}:{self.port}"
        return (
            f"rediss://{self.host}:{self.port}?ssl_ca_certs={self.tls.ca}"
            f"&ssl_certfile={self.tls.client_cert}&ssl_keyfile={self.tls.client_key}"
        )

    def argv(self) -> list[str]:
        binary = redis_binary()
        if self.sentinel_config is not None:
            config = self.directory / f"sentinel-{self.port}.conf"
            if not config.exists():  # sentinel rewrites it; keep its state across restarts
                config.write_text(
                    f"port {self.port}\nbind {self.host}\ndir {self.directory}\n"
                    + self.sentinel_config
                )
            return [binary, str(config), "--sentinel", "--logfile", "", "--daemonize", "no"]
        argv = [binary, "--bind", self.host, "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.directory), "--logfile", "", "--daemonize", "no"]
        argv += ["--dbfilename", f"dump-{self.port}.rdb", "--repl-diskless-sync-delay", "0"]
        if self.tls is None:
            argv += ["--port", str(self.port)]
        else:
            argv += ["--port", "0", "--tls-port", str(self.port)]
            argv += ["--tls-cert-file", str(self.tls.server_cert)]
            argv += ["--tls-key-file", str(self.tls.server_key)]
            argv += ["--tls-ca-cert-file", str(self.tls.ca)]
            argv += ["--tls-auth-clients", self.tls_auth_clients]
        return argv + list(self.extra_args)

    def start(self, *, timeout: float = START_TIMEOUT) -> Self:
        """Start the process and return once it accepts connections."""
        if self.running:
            raise ServerLaunchError(f"{self.name} on port {self.port} is already running")
        self.process = subprocess.Popen(
            self.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.log = LogWatcher(self.process.stdout, f"{self.name}:{self.port}")
        ready = "Sentinel ID is" if self.sentinel_config is not None else "Ready to accept"
        try:
            self.log.wait_for(ready, timeout=timeout, what=f"{self.name} on port {self.port}")
        except ServerLaunchError:
            self.kill()
            raise
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for_log(self, pattern: str, *, timeout: float = START_TIMEOUT, since: int = 0) -> str:
        """Wait for this server to log a line matching ``pattern`` (see :meth:`log_mark`)."""
        if self.log is None:
            raise ServerLaunchError(f"{self.name} on port {self.port} was never started")
        return self.log.wait_for(
            pattern, timeout=timeout, since=since, what=f"{self.name} on port {self.port}"
        )

    def log_mark(self) -> int:
        return self.log.mark() if self.log is not None else 0

    def command(self, *args: Any) -> Any:
        context = self.tls.client_context() if self.tls else None
        return command(self.address, *args, ssl_context=context)

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reap()

    def kill(self) -> None:
        """SIGKILL: the server dies without closing anything gracefully (a crash)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._reap()

    def pause(self) -> None:
        """SIGSTOP: the server stops answering but its sockets stay open (a hung server)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def restart(self, *, timeout: float = START_TIMEOUT) -> Self:
        """Stop if running, then start again on the same port."""
        self.stop()
        return self.start(timeout=timeout)

    def _reap(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
