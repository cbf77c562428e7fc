"""``/metrics``, ``/healthz`` and ``/readyz`` over HTTP, served from the app's own nursery.

:func:`serve_endpoints` runs `Hypercorn <https://hypercorn.readthedocs.io/>`_ (its Trio worker)
with a small ASGI application of our own:

- ``GET /healthz`` — the process is alive: 200 while the app is starting, running, degraded or
  draining; 503 once it failed or stopped;
- ``GET /readyz`` — the app is worth sending work to: 200 only while it is running and not
  degraded; 503 otherwise. Both answer ``{"state": ..., "reason": ...}`` as JSON;
- ``GET /metrics`` — the Prometheus text format of the registry the app's
  :class:`~trio_streams.prometheus.PrometheusMiddleware` records into (the default registry of
  ``prometheus-client`` unless it was given another).

``trio-streams run MODULE:APP --http 127.0.0.1:9100`` starts it as an app task: it answers
once every subscription is running, and is cancelled with the app's other tasks at shutdown
(after the drain). Off by default. Needs the extras ``http`` (Hypercorn) and, for
``/metrics``, ``prometheus``.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from types import ModuleType
from typing import Any

import trio

from ..core.app import App, HealthState
from ..core.errors import TrioStreamsError
from ..core.extras import MissingExtra, importing
from ..core.groups import open_nursery

__all__ = [
    "EndpointError",
    "answer",
    "check_free",
    "endpoints_asgi",
    "http_path",
    "parse_address",
    "prometheus_or_501",
    "serve_asgi",
    "serve_endpoints",
]

_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_log = logging.getLogger("trio_streams.http_endpoints")
#: What the endpoints answer, as the line saying where they listen names them.
_PATHS = ("/metrics", "/healthz", "/readyz")

_ALIVE = frozenset(
    {
        HealthState.STARTING,
        HealthState.RUNNING,
        HealthState.DEGRADED,
        HealthState.SHUTTING_DOWN,
    }
)


async def prometheus_or_501(send: _Send) -> ModuleType | None:
    """``prometheus_client`` for ``/metrics``; without it, None once a 501 naming the extra
    and how to install it was answered."""
    try:
        with importing("prometheus", "/metrics"):
            import prometheus_client
    except MissingExtra as exc:
        await answer(send, 501, f"{exc}\n".encode(), b"text/plain; charset=utf-8")
        return None
    return prometheus_client


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9100`` for IPv6) as a pair; ``ValueError`` saying what is wrong.
    Port 0 is any free port: the listening line names the one chosen."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9100), got {text!r}")
    return host.strip("[]"), int(port)


def endpoints_asgi(app: App, registry: Any = None) -> Callable[[Any, Any, Any], Awaitable[None]]:
    """The ASGI application that answers the three endpoints for ``app``."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        path = await http_path(scope, receive, send)
        if path is None:
            return
        health = app.health.value
        if path in ("/healthz", "/readyz"):
            good = (
                health.state in _ALIVE
                if path == "/healthz"
                else health.state is HealthState.RUNNING
            )
            body = json.dumps({"state": health.state.value, "reason": health.reason}).encode()
            await answer(send, 200 if good else 503, body + b"\n", b"application/json")
        elif path == "/metrics":
            prometheus = await prometheus_or_501(send)
            if prometheus is None:
                return
            body = prometheus.generate_latest(
                registry if registry is not None else _registry_of(app, prometheus.REGISTRY)
            )
            await answer(send, 200, body, prometheus.CONTENT_TYPE_LATEST.encode())
        else:
            await answer(send, 404, b"not found: /metrics, /healthz, /readyz\n", b"text/plain")

    return asgi


def _registry_of(app: App, default: Any) -> Any:
    """The registry of the app's Prometheus middleware (the app's own, a broker's or a
    subscription's), if it has one."""
    middlewares = list(app.middlewares)
    for broker in app.brokers:
        middlewares += broker.middlewares
        for subscription in broker.subscriptions:
            middlewares += subscription.middlewares
    for middleware in middlewares:
        registry = getattr(middleware, "registry", None)
        if registry is not None:
            return registry
    return default


async def http_path(scope: Any, receive: Any, send: _Send) -> str | None:
    """The path of a ``GET`` (or ``HEAD``) to answer; None when there is nothing to answer (a
    lifespan, which this completes, or another method, answered 405 here)."""
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return None
    if scope["type"] != "http":
        return None
    if scope.get("method", "GET") not in ("GET", "HEAD"):
        await answer(send, 405, b"only GET\n", b"text/plain; charset=utf-8")
        return None
    return str(scope.get("path", ""))


async def answer(send: _Send, status: int, body: bytes, content_type: bytes) -> None:
    """Send a whole response: ``status``, its length and type, and ``body``."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def serve_endpoints(
    app: App,
    host: str,
    port: int,
    *,
    registry: Any = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the endpoints on ``host:port`` (port 0: any free one) until cancelled; then the
    listening socket closes and open connections are dropped. Started (``nursery.start``), it
    answers the addresses it listens on (``http://127.0.0.1:9100``)."""
    where = check_free(host, port)
    await serve_asgi(endpoints_asgi(app, registry), where, announce=True, task_status=task_status)


async def serve_asgi(
    asgi: Callable[[Any, Any, Any], Awaitable[None]],
    bind: str,
    *,
    announce: bool = False,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``asgi`` with Hypercorn's Trio server on ``bind`` (``HOST:PORT``, or
    ``unix:PATH``), quietly (no access log), until cancelled: then it stops at once.

    With ``announce`` (the ``--http`` address a user asked for, not a worker's private
    socket), one INFO line says where it listens, once the socket is bound: from then on a
    request is answered."""
    with importing("http", "--http"):
        from hypercorn.config import Config
        from hypercorn.trio import serve

    config = Config()
    config.bind = [bind]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.0
    async with open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(serve, asgi, config, mode="asgi"))
        if announce:
            _log.info("--http: listening on %s (%s)", ", ".join(binds), ", ".join(_PATHS))
        task_status.started(binds)


def check_free(host: str, port: int) -> str:
    """Bind ``host:port`` as the server will, and let go: a taken address is a clear
    :class:`EndpointError` here rather than a traceback from inside the server's nursery.
    Returns the address as Hypercorn binds it (``HOST:PORT``, ``[::1]:PORT``)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise EndpointError(
                f"--http {where}: cannot listen there: {exc.strerror or exc}"
            ) from None
    return where


class EndpointError(TrioStreamsError):
    """The HTTP endpoints cannot be served (the address is taken, or not this machine's)."""
