"""`schedlab collect slurm|k8s`: read a scheduler's JSON output, turn it into a shadow
snapshot and observations (`tracelib.shadow.collect_slurm`, `collect_k8s`), and write them
as JSON or send them to a running decision service.

Sending: the snapshot goes to `POST <url>/v1/decide` (the service answers with the
policy's decision and spools both), the observations to `POST <url>/v1/observe` in batches
of at most `MAX_OBSERVATIONS`. With a token (`--token`, else `$SCHEDLAB_SHADOW_TOKEN`),
each request carries `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tracelib.ingest.files import read_regular
from tracelib.shadow.collect import Collected, CollectError
from tracelib.shadow.schemas import MAX_OBSERVATIONS

POST_TIMEOUT_S = 30.0
TOKEN_ENV = "SCHEDLAB_SHADOW_TOKEN"
"""Where `--token` is read from when not given: the variable `schedlab serve-policy` reads."""


class PostFailed(RuntimeError):
    """The service refused a request or could not be reached; the message says which."""


def read_json(path: str | Path, what: str) -> Any:
    """The parsed JSON of a regular file; CollectError naming the file otherwise."""
    from tracelib.ingest.base import IngestError

    try:
        data = read_regular(Path(path), what)
    except IngestError as exc:
        raise CollectError(str(path), "file", str(exc).split(": ", 1)[-1]) from None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        where = f"line {exc.lineno} column {exc.colno}: " if hasattr(exc, "lineno") else ""
        raise CollectError(
            str(path), "top level", f"not JSON ({where}{getattr(exc, 'msg', exc)})"
        ) from None


def collect_slurm_files(
    squeue: str,
    sinfo: str,
    sacct: str | None = None,
    *,
    cluster: str | None = None,
    now: datetime | None = None,
) -> Collected:
    """`collect_slurm` on the files named."""
    from tracelib.shadow.collect_slurm import collect_slurm

    return collect_slurm(
        read_json(squeue, "squeue --json output"),
        read_json(sinfo, "sinfo --json output"),
        read_json(sacct, "sacct --json output") if sacct else None,
        cluster=cluster,
        now=now,
        files=(squeue, sinfo, sacct or "sacct"),
    )


def collect_k8s_files(
    pods: str, nodes: str | None = None, *, cluster: str | None = None, now: datetime | None = None
) -> Collected:
    """`collect_k8s` on the files named; without `nodes`, the nodes are read from `pods`
    (`kubectl get pods,nodes -A -o json` prints both in one List)."""
    from tracelib.shadow.collect_k8s import collect_k8s

    pod_list = read_json(pods, "kubectl get pods -o json output")
    return collect_k8s(
        pod_list,
        read_json(nodes, "kubectl get nodes -o json output") if nodes else pod_list,
        cluster=cluster or "kubernetes",
        now=now,
        files=(pods, nodes or pods),
    )


@dataclass(frozen=True)
class Posted:
    """What the service answered."""

    decision: dict
    observations: int


def post(collected: Collected, url: str, token: str | None = None) -> Posted:
    """Send the snapshot to `<url>/v1/decide` and the observations to `<url>/v1/observe`;
    PostFailed (naming the endpoint and the answer) on any refusal or network error."""
    import httpx

    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = collected.to_json()
    try:
        with httpx.Client(timeout=POST_TIMEOUT_S, headers=headers) as client:
            decision = _send(client, f"{base}/v1/decide", body["snapshot"])
            sent = 0
            batch = body["observe"]["observations"]
            for k in range(0, len(batch), MAX_OBSERVATIONS):
                part = {**body["observe"], "observations": batch[k : k + MAX_OBSERVATIONS]}
                _send(client, f"{base}/v1/observe", part)
                sent += len(part["observations"])
    except httpx.HTTPError as exc:
        raise PostFailed(f"{url}: {type(exc).__name__}: {exc}") from None
    return Posted(decision, sent)


def _send(client, endpoint: str, body: dict) -> dict:
    response = client.post(endpoint, json=body)
    if response.status_code >= 400:
        raise PostFailed(
            f"POST {endpoint} answered {response.status_code}: {response.text.strip()[:400]}"
        )
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    return answer if isinstance(answer, dict) else {}
