"""A small seeded campaign in the normal suite: every transport but the cluster's and the
pipeline window (which the full campaign, ``nox -s chaos``, covers) under the same mix of
faults, for a few seconds each (about 45 s in all).
Every "lost" and "settled without a run" is 0 and no effect of the atomic window is applied
twice; the table is printed (``pytest -s``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .campaign import campaign
from .history import table

SEED = 27
#: Every workload but those on the cluster and the pipeline window (the atomic one stands for
#: both windows), to stay under a minute.
ONLY = (
    "streams group",
    "atomic window",
    "reliable list",
    "simple list",
    "pubsub",
    "stream file",
)


@pytest.mark.slow
async def test_a_small_seeded_campaign_loses_nothing_and_settles_nothing_without_a_run(
    tmp_path: Path,
) -> None:
    rows = await campaign(
        seed=SEED, minutes=0.2, directory=tmp_path, only=ONLY, backlog_stops=1, with_cluster=False
    )
    print(table(rows))
    assert {row.transport for row in rows} == {
        "streams group",
        "atomic window",
        "reliable list",
        "simple list",
        "pubsub",
        "stream file: durable consumers",
        "stream file: live tail",
    }
    assert all(sum(row.faults.values()) > 0 for row in rows), table(rows)
    assert [defect for row in rows for defect in row.defects] == [], table(rows)
