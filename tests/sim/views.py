"""Job views the tests of scheduling rules build by hand."""

from __future__ import annotations

from typing import Any

from tracelib.catalogue import JobType
from tracelib.sim.snapshot import JobView


def job_view(jt: JobType, job_id: int = 0, **fields: Any) -> JobView:
    """The view of job `job_id` of type `jt` as it arrives at time 0: 100 epochs estimated,
    none done, no tasks, one worker and one PS requested, the type's cap and demands;
    `fields` set any of these (or the view's other fields) instead."""
    defaults = {
        "job_id": job_id,
        "model": jt.model,
        "type_index": jt.type_index,
        "arrival_s": 0.0,
        "epochs_est": 100.0,
        "epochs_done": 0.0,
        "workers": 0,
        "ps": 0,
        "requested_workers": 1,
        "requested_ps": 1,
        "max_workers": jt.max_workers,
        "worker_demand": jt.worker_demand,
        "ps_demand": jt.ps_demand,
    }
    return JobView(**(defaults | fields))
