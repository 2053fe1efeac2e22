"""The wire models accept the contract's examples and reject bad input naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.imports import packages_loaded_by
from tracelib.shadow.schemas import (
    Decision,
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    ObserveBatch,
    Snapshot,
    parse_quantity,
)

T = "2026-11-28T12:00:00Z"


def snapshot_body() -> dict:
    """A small valid snapshot: two servers (one half-used, with a fractional GPU free)."""
    return {
        "schema_version": 1,
        "cluster": "lab",
        "time": T,
        "servers": [
            {
                "name": "a",
                "gpu_type": "V100",
                "gpus": 4,
                "free_gpus": 1.5,
                "cpus": 32,
                "free_cpus": 8,
                "memory_gib": 256,
                "free_memory_gib": 100,
            },
            {
                "name": "b",
                "gpu_type": None,
                "gpus": 8,
                "free_gpus": 8,
                "cpus": 64,
                "free_cpus": 64,
                "memory_gib": 512,
                "free_memory_gib": 512,
            },
        ],
        "running": [
            {
                "id": "r1",
                "user": "u",
                "gpus": 2.5,
                "gpu_type": "V100",
                "servers": ["a"],
                "submit_time": T,
                "start_time": T,
                "model": "resnet50",
                "duration_estimate_s": 60,
            },
        ],
        "pending": [
            {
                "id": "p1",
                "user": None,
                "gpus": 1,
                "gpu_type": None,
                "cpus": 4,
                "memory_gib": 16,
                "submit_time": "2026-11-28T11:59:00+01:00",
                "model": None,
                "duration_estimate_s": None,
            },
        ],
    }


def error_locs(err: ValidationError) -> list[str]:
    return [".".join(str(p) for p in e["loc"]) + " " + e["msg"] for e in err.errors()]


def test_valid_snapshot_parses():
    snap = Snapshot.model_validate(snapshot_body())
    assert snap.servers[0].free_gpus == 1.5
    assert snap.pending[0].submit_time.utcoffset().total_seconds() == 3600


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["servers"][1].update(free_gpus=-1), "servers.1.free_gpus"),
        (lambda b: b["servers"][1].update(free_gpus=9), "free_gpus: exceeds gpus"),
        (lambda b: b["servers"][0].update(cpus="nan"), "servers.0.cpus"),
        (lambda b: b.update(time="2026-11-28T12:00:00"), "time"),
        (lambda b: b.update(cluster="x" * 129), "cluster"),
        (lambda b: b.update(schema_version=2), "schema_version"),
        (lambda b: b.update(extra=1), "extra"),
        (lambda b: b["pending"][0].update(gpus=0), "pending.0.gpus"),
        (lambda b: b["running"][0].update(servers=["zz"]), "running.0.servers"),
        (lambda b: b["pending"][0].update(id="r1"), "duplicate job id"),
        (lambda b: b["servers"][1].update(name="a"), "servers: duplicate name"),
    ],
)
def test_snapshot_errors_name_the_field(mutate, field):
    body = snapshot_body()
    mutate(body)
    with pytest.raises(ValidationError) as info:
        Snapshot.model_validate(body)
    assert any(field in text for text in error_locs(info.value)), error_locs(info.value)


def test_observations_need_what_their_kind_carries():
    good = {"kind": "submitted", "job": "j", "time": T, "gpus": 2}
    ObserveBatch.model_validate({"schema_version": 1, "cluster": "c", "observations": [good]})
    for obs, field in (
        ({"kind": "submitted", "job": "j", "time": T}, "gpus"),
        ({"kind": "started", "job": "j", "time": T}, "servers"),
        ({"kind": "exploded", "job": "j", "time": T}, "observations.0.kind"),
    ):
        with pytest.raises(ValidationError) as info:
            ObserveBatch.model_validate(
                {"schema_version": 1, "cluster": "c", "observations": [obs]}
            )
        assert any(field in text for text in error_locs(info.value))


def test_decision_round_trips():
    d = Decision(
        decision_id="0" * 32,
        policy="fifo",
        policy_id="fifo",
        time=T,
        latency_ms=1.0,
        start=[{"job": "p1", "gpus": 0.5, "servers": ["a"], "workers": 1, "ps": None}],
        wait=[],
    )
    again = Decision.model_validate_json(d.model_dump_json())
    assert again == d


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2.0),
        ("500m", 0.5),
        ("16Gi", 16 * 2**30),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        (3, 3.0),
        ("64k", 64000.0),
    ],
)
def test_quantities(text, value):
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-1", "1x", "", "Gi", "nan", "1e400"])
def test_bad_quantities(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_extender_messages_use_the_kube_scheduler_json_names():
    args = ExtenderArgs.model_validate(
        {
            "pod": {
                "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "9"},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}},
                        }
                    ]
                },
                "status": {"phase": "Pending"},
            },
            "nodenames": ["n1", "n2"],
        }
    )
    assert args.node_names == ["n1", "n2"]
    assert args.pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == 2.0
    result = ExtenderFilterResult(node_names=["n1"], failed_nodes={"n2": "full"})
    dumped = result.model_dump(by_alias=True, exclude_none=True)
    assert dumped == {
        "nodenames": ["n1"],
        "failedNodes": {"n2": "full"},
        "failedAndUnresolvableNodes": {},
        "error": "",
    }
    assert HostPriority(host="n1", score=7).model_dump(by_alias=True) == {"host": "n1", "score": 7}
    with pytest.raises(ValidationError) as info:
        ExtenderArgs.model_validate({"pod": args.pod.model_dump(by_alias=True)})
    assert any("nodes" in text for text in error_locs(info.value))


def test_the_wire_format_needs_no_torch_and_no_web_framework():
    code = "import tracelib.shadow.schemas, tracelib.shadow.spool, tracelib.shadow.kube"
    assert packages_loaded_by(code, "torch", "fastapi", "starlette") == []
