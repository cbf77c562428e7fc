"""The health of an app in workers, from its workers' answers (the supervisor's rule)."""

from __future__ import annotations

import json

from trio_streams.running.supervisor_http import app_health


def answer(status: int, state: str, reason: str | None = None) -> tuple[int, int, bytes]:
    return 1, status, json.dumps({"state": state, "reason": reason}).encode()


def test_the_app_is_ready_only_when_every_worker_is() -> None:
    good, body = app_health([answer(200, "running"), answer(200, "running")], stopping=False)
    assert good and body["state"] == "running" and body["reason"] is None
    good, body = app_health(
        [answer(200, "running"), answer(503, "degraded", "redis: timeout")], stopping=False
    )
    assert not good
    assert body["state"] == "degraded"
    assert body["reason"] == "worker 1: degraded (redis: timeout)"
    assert body["workers"]["0"] == {"state": "running", "reason": None}


def test_a_worker_that_does_not_answer_makes_the_app_starting_and_names_it() -> None:
    good, body = app_health([None, answer(200, "running")], stopping=False)
    assert not good
    assert body["state"] == "starting"
    assert body["reason"] == "worker 0: starting (not answering)"


def test_the_worst_worker_state_is_the_apps() -> None:
    answers = [answer(503, "failed", "boom"), None, answer(503, "degraded")]
    good, body = app_health(answers, stopping=False)
    assert not good and body["state"] == "failed"


def test_a_stopping_supervisor_is_neither_ready_nor_healthy_whatever_its_workers_say() -> None:
    good, body = app_health([answer(200, "running")], stopping=True)
    assert not good
    assert body["state"] == "shutting down"
    assert body["reason"] == "the supervisor is stopping"


def test_a_worker_answering_something_else_than_its_health_is_not_taken_as_good() -> None:
    good, body = app_health([(1, 200, b"<html>")], stopping=False)
    assert not good
    assert body["workers"]["0"] == {"state": "starting", "reason": "answered 200"}
