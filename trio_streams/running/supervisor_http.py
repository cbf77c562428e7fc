"""``--http`` with ``--workers N``: the supervisor answers for the whole app.

Each worker serves the endpoints of :mod:`.http_endpoints` on a private Unix socket of its
own, in a directory only this user can enter (the supervisor names it in
``TRIO_STREAMS_WORKER_HTTP``; a restarted worker gets a new one). The supervisor alone listens
on ``--http HOST:PORT`` and, at each request, asks every worker and answers for the app:

- ``/metrics`` — every worker's series with a ``worker`` label, and the app's series (sums),
  kept by :class:`~trio_streams.running.worker_metrics.AppFigures` so counters never go backwards;
- ``/readyz`` — 200 only when every worker is ready (running, not degraded), and the
  supervisor is not stopping;
- ``/healthz`` — 200 when the supervisor is supervising and every worker is alive.

Both health paths answer ``{"state", "reason", "workers": {"0": {"state", "reason"}, ...}}``:
the app's state is the worst of its workers' (a worker that does not answer is ``starting``),
and the reason names each worker that is not running. Asking the workers is concurrent and
bounded (:data:`ASK_WITHIN` seconds); a worker that does not answer in time counts as not
answering. Cancelled, the server stops and the open requests are dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import trio

from ..core.app import App, HealthState
from .http_get import NotHttp, get_over

__all__ = [
    "ASK_WITHIN",
    "WORKER_HTTP_ENV",
    "WorkerSlot",
    "app_asgi",
    "app_health",
    "serve_worker_endpoints",
]

#: In a worker: where to serve its endpoints (``unix:PATH``), set by the supervisor.
WORKER_HTTP_ENV = "TRIO_STREAMS_WORKER_HTTP"
#: How long the supervisor waits for one worker's answer (seconds).
ASK_WITHIN = 5.0

#: From the best state to the worst: the app's is its worst worker's.
_RANK = [
    HealthState.RUNNING,
    HealthState.DEGRADED,
    HealthState.STARTING,
    HealthState.SHUTTING_DOWN,
    HealthState.STOPPED,
    HealthState.FAILED,
]


class WorkerSlot(Protocol):
    """What the supervisor's endpoint reads of a worker slot."""

    @property
    def index(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def endpoint(self) -> Path | None: ...
    @property
    def restarts(self) -> int: ...


def serve_worker_endpoints(app: App) -> None:
    """In a supervised worker whose supervisor serves ``--http``: serve the endpoints on the
    private socket it named, as a task of ``app``. Does nothing anywhere else."""
    bind = os.environ.pop(WORKER_HTTP_ENV, None)
    if bind is None:
        return
    from .http_endpoints import endpoints_asgi, serve_asgi

    @app.task
    async def worker_endpoints() -> None:
        await serve_asgi(endpoints_asgi(app), bind)


async def _ask(slot: WorkerSlot, path: str) -> tuple[int, int, bytes] | None:
    """``GET path`` of the worker in ``slot``: its generation, the status and the body; None
    when it does not answer (starting, being restarted, or too slow)."""
    generation, endpoint = slot.generation, slot.endpoint
    if endpoint is None:
        return None
    try:
        with trio.fail_after(ASK_WITHIN):
            stream = await trio.open_unix_socket(str(endpoint))
            status, body = await get_over(stream, "worker", path)
    except (OSError, trio.TooSlowError, NotHttp):
        return None
    return generation, status, body


async def _ask_all(slots: Sequence[WorkerSlot], path: str) -> list[tuple[int, int, bytes] | None]:
    answers: list[tuple[int, int, bytes] | None] = [None] * len(slots)

    async def ask(n: int) -> None:
        answers[n] = await _ask(slots[n], path)

    async with trio.open_nursery() as nursery:
        for n in range(len(slots)):
            nursery.start_soon(ask, n)
    return answers


def _worker_health(answer: tuple[int, int, bytes] | None) -> tuple[bool, dict[str, Any]]:
    if answer is None:
        return False, {"state": HealthState.STARTING.value, "reason": "not answering"}
    _, status, body = answer
    try:
        state = json.loads(body)
        return status == 200, {"state": str(state["state"]), "reason": state.get("reason")}
    except (ValueError, KeyError, TypeError, AttributeError):
        return False, {"state": HealthState.STARTING.value, "reason": f"answered {status}"}


def app_health(
    answers: Sequence[tuple[int, int, bytes] | None], *, stopping: bool
) -> tuple[bool, dict[str, Any]]:
    """Whether the app is good (every worker is, and the supervisor is not stopping), and the
    JSON body that says so."""
    good = not stopping
    workers: dict[str, dict[str, Any]] = {}
    for index, answer in enumerate(answers):
        ok, health = _worker_health(answer)
        good = good and ok
        workers[str(index)] = health
    states = {value.value: value for value in HealthState}
    worst = max(
        (states.get(h["state"], HealthState.STARTING) for h in workers.values()),
        key=_RANK.index,
        default=HealthState.RUNNING,
    )
    if stopping:
        worst = max(worst, HealthState.SHUTTING_DOWN, key=_RANK.index)
    troubles = [
        f"worker {index}: {h['state']}" + (f" ({h['reason']})" if h["reason"] else "")
        for index, h in workers.items()
        if h["state"] != HealthState.RUNNING.value
    ]
    if stopping:
        troubles.insert(0, "the supervisor is stopping")
    reason = "; ".join(troubles) or None
    return good, {"state": worst.value, "reason": reason, "workers": workers}


def app_asgi(
    slots: Sequence[WorkerSlot], stopping: trio.Event
) -> Callable[[Any, Any, Any], Awaitable[None]]:
    """The supervisor's ASGI application: the endpoints of the app its ``slots`` run."""
    from .http_endpoints import answer, http_path, prometheus_or_501

    figures: Any = None  # an AppFigures, made at the first scrape (prometheus-client needed)

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        nonlocal figures
        path = await http_path(scope, receive, send)
        if path is None:
            return
        if path in ("/healthz", "/readyz"):
            good, body = app_health(await _ask_all(slots, path), stopping=stopping.is_set())
            await answer(
                send, 200 if good else 503, json.dumps(body).encode() + b"\n", b"application/json"
            )
        elif path == "/metrics":
            prometheus = await prometheus_or_501(send)
            if prometheus is None:
                return
            from .worker_metrics import AppFigures, WorkerScrape

            if figures is None:
                figures = AppFigures(len(slots))
            answers = await _ask_all(slots, path)
            figures.read(
                WorkerScrape(
                    slot.index,
                    slot.generation if found is None else found[0],
                    found[2].decode() if found is not None and found[1] == 200 else None,
                    slot.restarts,
                )
                for slot, found in zip(slots, answers, strict=True)
            )
            await answer(send, 200, figures.exposition(), prometheus.CONTENT_TYPE_LATEST.encode())
        else:
            await answer(send, 404, b"not found: /metrics, /healthz, /readyz\n", b"text/plain")

    return asgi
