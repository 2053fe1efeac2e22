"""A learned policy serving: DL2's warm-up policy (trained at the DL2 pipeline tests' tiny
size, registered in a temporary warehouse) loaded through its verified checkpoint and
answering over HTTP."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import httpx
import pytest

from pipelines.shadow.launch import ServerProcess
from pipelines.shadow.policies import PolicyUnavailable, load_served_policy
from pipelines.shadow_ingest import shadow_ingest_stage
from pipelines.shadow_replay import compare, shadow_replay_stage
from pipelines.systems.dl2.stages import record_stage, warmup_stage
from tests.learned_eval import tiny_warehouse
from tests.shadow.spool_case import write_spool
from tests.shadow.test_adapter import job, server
from tests.test_dl2_pipeline import CFG
from tracelib.shadow.spool import read_spool, spool_days
from warehouse import connect, read_frame

T = "2026-11-28T12:00:00Z"


@pytest.fixture(scope="module")
def dl2_policy(tmp_path_factory):
    """(warehouse, policy id) of a registered DL2 policy."""
    path = tiny_warehouse(tmp_path_factory.mktemp("dl2-serve") / "wh.duckdb")
    recorded = record_stage(path, CFG)
    return path, warmup_stage(path, CFG, recorded.run_id).policy_id


def test_dl2_decides_over_http(dl2_policy, tmp_path):
    warehouse, policy_id = dl2_policy
    spool = tmp_path / "spool"
    servers = [server(f"s{i}", float(i % 3)) for i in range(12)]
    pending = [job(i, [1, 2, 0.5][i % 3], model=["resnet-50", None][i % 2]) for i in range(10)]
    body = {"schema_version": 1, "cluster": "c", "time": T, "servers": servers, "pending": pending}
    args = ["--policy", "dl2", "--warehouse", str(warehouse), "--spool", str(spool)]
    with ServerProcess(args) as srv:
        health = httpx.get(f"{srv.url}/healthz").json()
        assert health == {"status": "ok", "policy": "dl2", "policy_id": policy_id}
        r = httpx.post(f"{srv.url}/v1/decide", json=body, timeout=60)
        assert r.status_code == 200, r.text
        decision = r.json()
    assert decision["policy"] == "dl2" and decision["policy_id"] == policy_id
    assert decision["start"], "a trained policy starts something on a cluster with free GPUs"
    free = {s["name"]: s["free_gpus"] for s in servers}
    assert sum(s["gpus"] for s in decision["start"]) <= sum(free.values())
    [record] = [r for d in spool_days(spool) for r in read_spool(spool, d)[0]]
    assert record.payload["decision"] == decision


def test_a_policy_id_serves_too_and_unknown_ones_are_refused(dl2_policy):
    warehouse, policy_id = dl2_policy
    served = load_served_policy(policy_id, warehouse)
    assert (served.name, served.policy_id) == ("dl2", policy_id)
    with pytest.raises(PolicyUnavailable, match="no registered policy"):
        load_served_policy("dl2-nonexistent", warehouse)
    with pytest.raises(PolicyUnavailable, match="no warehouse"):
        load_served_policy("dl2", warehouse.replace("wh.duckdb", "missing.duckdb"))


def test_a_tampered_checkpoint_is_refused_at_start(dl2_policy, tmp_path):
    import shutil
    from pathlib import Path

    warehouse, policy_id = dl2_policy
    copy = tmp_path / "copy"
    shutil.copytree(Path(warehouse).parent, copy)
    copied = copy / Path(warehouse).name
    with connect(copied, read_only=True) as con:
        [(ckpt,)] = con.execute(
            "SELECT checkpoint_path FROM policies WHERE policy_id = ?", [policy_id]
        ).fetchall()
    target = next(copy.rglob(Path(ckpt).name))
    target.write_bytes(target.read_bytes()[:-8] + b"tampered")
    with pytest.raises(PolicyUnavailable, match=policy_id):
        load_served_policy(policy_id, copied)


def test_a_day_shadowed_by_a_learned_policy_is_replayed_under_it(dl2_policy):
    """The counterfactual of a shadow day under the learned policy that was shadowed: the
    day's jobs replayed by DL2's newest policy (the learned whole-trace replay) on the
    day's servers, beside what the real scheduler did."""
    warehouse, policy_id = dl2_policy
    write_spool(Path(warehouse).parent / "shadow-spool")
    [day] = shadow_ingest_stage(warehouse, today=date(2026, 11, 28))
    replay = shadow_replay_stage(warehouse, day.source_id, "dl2", day.servers)
    assert replay.eval_id is not None, replay.note
    with connect(warehouse, read_only=True) as con:
        rows = {r["scheduler"]: r for r in compare(con, day.source_id).iter_rows(named=True)}
        policies = read_frame(
            con,
            "SELECT DISTINCT policy FROM eval_summary WHERE eval_id = ? AND scheduler = 'dl2'",
            [replay.eval_id],
        )["policy"].to_list()
    row = rows["dl2"]  # beside the arena's default heuristics, replayed with it
    assert row["workload_set"] == f"replay-arena:{day.source_id}" and "fifo" in rows
    assert policies == [f"{policy_id}+load-balancing"]  # composed as in the arena
    assert row["jobs"] == 2 and row["observed_jct_h"] == pytest.approx(40 / 60)
    # The day's two jobs (A and B, 2 and 4 GPUs) fit the day's 2 x 4 GPUs at once.
    assert row["replayed_queueing_h"] == pytest.approx(0.0)
    assert 0 < row["replayed_jct_h"] < row["observed_jct_h"]
