"""GET /v1/mai/stats is admitted like any request and served from a snapshot at most a second old:
however often callers ask, the holder and the ledger are asked at most once a second."""

import asyncio

import pytest

from serve_app.edge.keys import KeyRing, NamedKey, digest
from serve_app.edge.snapshot import Snapshot
from serve_app.fleet.stats_holder import StatsHolder

from .fakes import ScriptedVLM
from .ingress_replica import CONFIG, client_of, holder_handle, replica

pytestmark = pytest.mark.unit


async def test_callers_within_the_age_share_one_reading_and_a_failed_one_is_not_kept():
    now, reads = [0.0], []

    async def read():
        reads.append(now[0])
        await asyncio.sleep(0.01)
        if len(reads) == 3:
            raise RuntimeError("the holder restarting")
        return len(reads)

    snapshot = Snapshot(read, max_age_s=1.0, clock=lambda: now[0])
    assert await asyncio.gather(*(snapshot.get() for _ in range(20))) == [1] * 20  # one reading, shared
    now[0] = 0.99
    assert await snapshot.get() == 1
    now[0] = 1.0
    assert await snapshot.get() == 2  # a second old: read again
    now[0] = 2.5
    with pytest.raises(RuntimeError):
        await snapshot.get()
    assert await snapshot.get() == 4 and reads == [0.0, 1.0, 2.5, 2.5]


def test_the_stats_are_admitted_under_the_keys_quota_and_read_the_holder_once_a_second():
    holder, snapshots = StatsHolder(CONFIG.cascade.audit), []

    def snapshot():
        snapshots.append(1)
        return holder.snapshot()

    handle = holder_handle(holder.report, snapshot)
    key = NamedKey(name="viewer", sha256=digest("sk-viewer"), requests_per_minute=5)
    ingress = replica(ScriptedVLM({}), ScriptedVLM({}), CONFIG, api_keys=KeyRing.of((key,)), stats=handle)
    ingress.fleet_stats.max_age_s = 3600  # however slow this machine, the reads fall within its age
    client = client_of(ingress)
    headers = {"Authorization": "Bearer sk-viewer"}
    statuses = [client.get("/v1/mai/stats", headers=headers).status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2
    refused = client.get("/v1/mai/stats", headers=headers).json()["error"]
    assert refused["param"] == "requests_per_minute"
    assert len(snapshots) == 1  # five answers within its age: one reading of the holder
    assert client.get("/v1/mai/stats").status_code == 401
