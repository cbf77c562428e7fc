"""Real ``redis-server`` processes for tests and benchmarks: standalone, TLS, cluster, sentinel.

Every server listens on a free loopback port, keeps nothing on disk (``--save "" --appendonly
no``, files in a temporary directory) and logs to a pipe that a watcher thread reads, so tests
wait for what a server *says* ("Ready to accept connections", "Cluster state changed: ok",
"+switch-master") with a timeout instead of sleeping. Servers can be stopped, killed (SIGKILL)
and restarted on the same port inside a test.

Only Debian's ``redis-server`` package is needed: sentinels run as ``redis-server --sentinel``.
When the binary is missing, :func:`redis_binary` fails with instructions; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from trio_streams.errors import TrioStreamsError

#: Seconds a server gets to report it is ready (a loaded 2-core machine needs slack).
START_TIMEOUT = 30.0

Address = tuple[str, int]

#: An ACL user that may read and write keys under ``app:`` and run nothing dangerous.
ACL_USER = "app"
ACL_PASSWORD = "app-secret"
ACL_RULES = (ACL_USER, "on", f">{ACL_PASSWORD}", "~app:*", "&*", "+@all", "-@dangerous")
#: The default user's password on a server started with ``--requirepass``.
ADMIN_PASSWORD = "admin-secret"


class ServerLaunchError(TrioStreamsError):
    """A test server could not be found, started or driven; the message says which and why."""


def redis_binary(name: str = "redis-server") -> str:
    """The path of ``name``, or a clear error naming the package to install."""
    path = shutil.which(name)
    if path is None:
        raise ServerLaunchError(
            f"{name} is not on PATH: install Debian's redis-server package "
            "(apt-get install redis-server); the Redis tests need a real server and never skip"
        )
    return path


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

    with socket.create_connection(address, timeout=timeout) as raw:
        sock = ssl_context.wrap_socket(raw, server_hostname=address[0]) if ssl_context else raw
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


@dataclass
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


@dataclass
class RedisServer:
    """One ``redis-server`` (or sentinel) process on a loopback port."""

    directory: Path
    port: int = 0
    host: str = "127.0.0.1"
    extra_args: Sequence[str] = ()
    tls: TlsFiles | None = None
    #: ``yes`` makes clients present a certificate; ``optional`` lets them choose.
    tls_auth_clients: str = "optional"
    sentinel_config: str | None = None
    name: str = "redis"
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    log: LogWatcher | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port(self.host)

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

    def start(self, *, timeout: float = START_TIMEOUT) -> RedisServer:
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

    def restart(self, *, timeout: float = START_TIMEOUT) -> RedisServer:
        """Stop if running, then start again on the same port."""
        self.stop()
        return self.start(timeout=timeout)

    def _reap(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


class _Group:
    """A set of servers sharing one temporary directory, stopped together."""

    def __init__(self, directory: Path | None = None) -> None:
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="trio-streams-redis-")
        self.directory = directory or Path(self._tmp.name)  # type: ignore[union-attr]
        self.servers: list[RedisServer] = []

    def add(self, server: RedisServer) -> RedisServer:
        self.servers.append(server)
        return server

    def start(self) -> Self:
        """Start every server of the group and wait until the group is ready."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for server in reversed(self.servers):
            with contextlib.suppress(OSError):
                server.kill()
        if self._tmp is not None:
            self._tmp.cleanup()


@contextlib.contextmanager
def redis_server(
    *extra_args: str, tls: bool = False, tls_auth_clients: str = "optional"
) -> Iterator[RedisServer]:
    """A running standalone server (TLS with generated certificates if ``tls``)."""
    group = _Group()
    try:
        files = TlsFiles.generate(group.directory) if tls else None
        server = group.add(
            RedisServer(
                group.directory, extra_args=extra_args, tls=files, tls_auth_clients=tls_auth_clients
            )
        )
        yield server.start()
    finally:
        group.stop()


class RedisClusterServers(_Group):
    """A cluster of ``primaries`` primaries (and ``replicas`` replicas per primary)."""

    def __init__(self, *, primaries: int = 3, replicas: int = 0) -> None:
        super().__init__()
        self.primaries: list[RedisServer] = []
        self.replicas: list[RedisServer] = []
        self._primary_count = primaries
        self._replica_count = replicas

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{s.host}:{s.port}" for s in self.primaries)

    def _node(self, role: str) -> RedisServer:
        port = free_port(bus_offset=10000)
        return self.add(
            RedisServer(
                self.directory,
                port=port,
                name=f"cluster {role}",
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    f"nodes-{port}.conf",
                    "--cluster-node-timeout",
                    "2000",
                ],
            )
        )

    def start(self) -> Self:
        self.primaries = [self._node("primary") for _ in range(self._primary_count)]
        self.replicas = [
            self._node("replica") for _ in range(self._primary_count * self._replica_count)
        ]
        marks = {}
        for server in self.servers:
            server.start()
            marks[server.port] = server.log_mark()
        per = 16384 // len(self.primaries)
        for index, server in enumerate(self.primaries):
            last = 16383 if index == len(self.primaries) - 1 else (index + 1) * per - 1
            server.command("CLUSTER", "ADDSLOTSRANGE", index * per, last)
        first = self.primaries[0]
        for server in self.servers[1:]:
            first.command("CLUSTER", "MEET", server.host, server.port)
        for server in self.servers:
            server.wait_for_log("Cluster state changed: ok", since=marks[server.port])
        for index, replica in enumerate(self.replicas):
            primary = self.primaries[index // self._replica_count]
            node_id = primary.command("CLUSTER", "MYID").decode()
            mark = replica.log_mark()
            self._replicate(replica, node_id)
            replica.wait_for_log("MASTER <-> REPLICA sync: Finished with success", since=mark)
        return self

    @staticmethod
    def _replicate(replica: RedisServer, node_id: str) -> None:
        # The replica may not have heard of the primary yet through gossip; it says so.
        mark = replica.log_mark()
        try:
            replica.command("CLUSTER", "REPLICATE", node_id)
        except ServerLaunchError:
            replica.wait_for_log(node_id[:8], since=mark)  # gossip introduced it
            replica.command("CLUSTER", "REPLICATE", node_id)

    def node_for_slot(self, slot: int) -> RedisServer:
        for server in self.primaries:
            for entry in server.command("CLUSTER", "SLOTS"):
                if entry[0] <= slot <= entry[1] and entry[2][1] == server.port:
                    return server
        raise ServerLaunchError(f"no primary serves slot {slot}")

    def move_slot(self, slot: int, target: RedisServer) -> None:
        """Migrate ``slot`` (and its keys) to ``target``, announcing it to every node."""
        source = self.node_for_slot(slot)
        if source is target:
            return
        target_id = target.command("CLUSTER", "MYID")
        source_id = source.command("CLUSTER", "MYID")
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := source.command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            source.command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for server in self.primaries:
            server.command("CLUSTER", "SETSLOT", slot, "NODE", target_id)


class RedisSentinelServers(_Group):
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels watching service ``name``."""

    def __init__(
        self, *, service: str = "trio-streams", replicas: int = 1, sentinels: int = 2
    ) -> None:
        super().__init__()
        self.service = service
        self._replica_count = replicas
        self._sentinel_count = sentinels
        self.data_nodes: list[RedisServer] = []
        self.sentinels: list[RedisServer] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"{s.host}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def primary(self) -> RedisServer:
        """The data node the sentinels currently name as primary."""
        host, port = self.sentinels[0].command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        for server in self.data_nodes:
            if server.port == int(port):
                return server
        raise ServerLaunchError(f"sentinels name unknown primary {host!r}:{port!r}")

    def start(self) -> Self:
        primary = self.add(RedisServer(self.directory, name="sentinel-set primary")).start()
        self.data_nodes = [primary]
        for _ in range(self._replica_count):
            replica = self.add(
                RedisServer(
                    self.directory,
                    name="sentinel-set replica",
                    extra_args=["--replicaof", primary.host, str(primary.port)],
                )
            )
            replica.start()
            replica.wait_for_log("MASTER <-> REPLICA sync: Finished with success")
            self.data_nodes.append(replica)
        # Failovers in tests are forced (SENTINEL FAILOVER), never waited for. With a quorum of
        # one, a sentinel starved of CPU for a second on a loaded machine would otherwise take
        # a healthy primary for dead and fail over on its own, under a test's feet.
        config = (
            f"sentinel monitor {self.service} {primary.host} {primary.port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 10000\n"
            f"sentinel failover-timeout {self.service} 4000\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        for _ in range(self._sentinel_count):
            sentinel = self.add(
                RedisServer(self.directory, name="sentinel", sentinel_config=config)
            )
            self.sentinels.append(sentinel.start())
        for sentinel in self.sentinels:  # each must know the replica before it can fail over
            for replica in self.data_nodes[1:]:
                sentinel.wait_for_log(rf"\+slave slave {replica.host}:{replica.port} ")
        self._wait_replicas_promotable()
        return self

    def _wait_replicas_promotable(self, timeout: float = START_TIMEOUT) -> None:
        """Sentinels promote only a replica they have read INFO from recently (no log line says
        when); after a failover the demoted primary qualifies only once it is reconfigured."""

        def ready() -> bool:
            for sentinel in self.sentinels:
                replicas = sentinel.command("SENTINEL", "REPLICAS", self.service)
                fields = [dict(zip(r[::2], r[1::2], strict=True)) for r in replicas]
                good = [
                    f
                    for f in fields
                    if f.get(b"flags") == b"slave"
                    and int(f.get(b"info-refresh", b"99999")) < 5000
                    and f.get(b"master-link-status") == b"ok"
                ]
                if not good:
                    return False
            return True

        poll_until(ready, timeout=timeout, what=f"sentinels of {self.service!r} to see replicas")

    def failover(self, *, timeout: float = START_TIMEOUT) -> RedisServer:
        """Force a failover and return the new primary once the sentinels switched to it."""
        old = self.primary()
        self._wait_replicas_promotable(timeout)
        marks = [s.log_mark() for s in self.sentinels]
        self.sentinels[0].command("SENTINEL", "FAILOVER", self.service)
        for sentinel, mark in zip(self.sentinels, marks, strict=True):
            sentinel.wait_for_log(
                rf"\+switch-master {re.escape(self.service)} .* {old.port} ",
                timeout=timeout,
                since=mark,
            )
        return self.primary()


def redis_version() -> tuple[int, ...]:
    """The installed redis-server's version, e.g. ``(7, 0, 15)``."""
    output = subprocess.run(
        [redis_binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", output)
    if match is None:
        raise ServerLaunchError(f"cannot read the version from {output!r}")
    return tuple(int(p) for p in match.groups())
