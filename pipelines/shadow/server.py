"""The shadow decision service: a FastAPI app answering snapshots with a policy's decision,
Kubernetes scheduler-extender calls, and observations, logging each to the spool before it
answers (docs/shadow.md).

Every request body is untrusted: it is read up to `max_body_bytes` (413 beyond, before any
parsing), validated by the wire models (422 naming the field, 400 for a body that is not
JSON), and nothing of it reaches a path (the spool slugs the cluster name) or SQL. With a
token, every endpoint but /healthz requires `Authorization: Bearer <token>` (401). A
decision or observation is acknowledged only after its spool record is on disk; if the
spool cannot take it, the answer is 503 and nothing is claimed.
"""

from __future__ import annotations

import hmac
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from pipelines.shadow.policies import ServedPolicy
from tracelib.shadow.kube import node_as_server, node_gpu_type, pod_as_pending, pod_gpus
from tracelib.shadow.schemas import (
    SCHEMA_VERSION,
    Decision,
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    NodeList,
    ObserveBatch,
    Snapshot,
)
from tracelib.shadow.spool import Spool, SpoolError

DEFAULT_MAX_BODY_BYTES = 8 * 2**20
MAX_EXTENDER_SCORE = 10
"""kube-scheduler's MaxExtenderPriority: extender scores are 0..10."""
ENDPOINTS = (
    "/v1/decide",
    "/v1/extender/filter",
    "/v1/extender/prioritize",
    "/v1/observe",
    "/healthz",
    "/metrics",
)
_FIELD_FIRST = re.compile(r"^(?:Value error, )?([A-Za-z0-9_./]+): (.*)$", re.S)


class _Refused(Exception):
    """A request answered with an error: status, error kind (a metrics label) and body."""

    def __init__(self, status: int, kind: str, detail: object) -> None:
        super().__init__(kind)
        self.status, self.kind, self.detail = status, kind, detail


@dataclass
class Metrics:
    """The app's Prometheus metrics, in a registry of its own (two apps in one process,
    as in tests, never share counters)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter(
            "shadow_requests",
            "Requests answered, by endpoint and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "shadow_request_seconds",
            "Time from request to response, by endpoint",
            ["endpoint"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
            registry=r,
        )
        self.errors = Counter(
            "shadow_errors", "Requests refused or failed, by kind", ["kind"], registry=r
        )
        self.records = Counter(
            "shadow_spool_records", "Records appended to the spool, by kind", ["kind"], registry=r
        )
        self.refused_starts = Counter(
            "shadow_refused_starts",
            "Starts a policy proposed that did not fit the live cluster (answered as waiting)",
            registry=r,
        )


def field_errors(err: ValidationError) -> list[dict[str, str]]:
    """A validation error as [{"field": "servers.3.free_gpus", "message": ...}]: the path of
    the failing value, extended by the field a model-level check names first."""
    out = []
    for e in err.errors(include_url=False, include_input=False):
        path = [str(p) for p in e["loc"]]
        message = e["msg"]
        match = _FIELD_FIRST.match(message)
        if match:
            path.append(match.group(1))
            message = match.group(2)
        if e["type"] == "json_invalid":
            path = ["body"]
        out.append({"field": ".".join(path) or "body", "message": message})
    return out


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) past `limit` bytes: by its Content-Length before
    reading, and while reading one sent without a length."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise _Refused(
                400, "invalid_body", [{"field": "content-length", "message": "not a number"}]
            )
        if int(declared) > limit:
            raise _Refused(
                413, "too_large", [{"field": "body", "message": f"larger than {limit} bytes"}]
            )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _Refused(
                413, "too_large", [{"field": "body", "message": f"larger than {limit} bytes"}]
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(model: type[BaseModel], body: bytes) -> BaseModel:
    if not body.strip():
        raise _Refused(400, "invalid_body", [{"field": "body", "message": "empty body"}])
    try:
        return model.model_validate_json(body)
    except ValidationError as err:
        errors = field_errors(err)
        status = 400 if errors and errors[0]["field"] == "body" else 422
        raise _Refused(status, "invalid_body", errors) from None


def _as_received(body: bytes) -> orjson.Fragment | None:
    """A validated snapshot body as the spool keeps it: the JSON text as received (not
    parsed and written again), line breaks (only ever whitespace in valid JSON) as spaces;
    None if the spool's reader would not parse it back."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return orjson.Fragment(body.replace(b"\r", b" ").replace(b"\n", b" "))


def _json(model: BaseModel | list, status: int = 200) -> Response:
    if isinstance(model, list):
        text = "[" + ",".join(m.model_dump_json(by_alias=True) for m in model) + "]"
    else:
        text = model.model_dump_json(by_alias=True, exclude_none=True)
    return Response(text, status_code=status, media_type="application/json")


def create_app(
    policy: ServedPolicy,
    spool: Spool,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    extender_cluster: str = "kubernetes",
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    metrics_dir: Path | None = None,
) -> FastAPI:
    """The service answering with `policy`, logging to `spool` (closed on shutdown).

    `metrics_dir`: this app is one of several worker processes, whose metrics
    prometheus_client keeps in that directory (its multiprocess mode): /metrics reports all
    of them. A lone app decides in a thread beside its event loop, so /healthz answers
    during a long decision; a worker decides in its event loop (the other workers answer
    meanwhile), which spares the hand-off between threads that cost a fifth of the
    throughput at 100 requests/s."""
    in_thread = metrics_dir is None
    metrics = Metrics()
    expected = f"Bearer {token}".encode() if token else None

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        spool.close()

    app = FastAPI(
        title="schedlab shadow decision service",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.metrics = metrics

    @app.middleware("http")
    async def account(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # Only known paths become label values: a path is chosen by whoever sends it.
        endpoint = request.url.path if request.url.path in ENDPOINTS else "other"
        t = time.perf_counter()
        try:
            if expected is not None and endpoint != "/healthz":
                given = request.headers.get("authorization", "").encode("utf-8", "replace")
                if not hmac.compare_digest(given, expected):
                    raise _Refused(
                        401,
                        "unauthorized",
                        [{"field": "authorization", "message": "missing or wrong bearer token"}],
                    )
            response = await call_next(request)
        except _Refused as refused:
            metrics.errors.labels(refused.kind).inc()
            response = JSONResponse(
                {"error": refused.kind, "detail": refused.detail}, status_code=refused.status
            )
            if refused.status == 401:
                response.headers["WWW-Authenticate"] = "Bearer"
        except Exception as exc:  # an unexpected failure is counted and answered, not hidden
            metrics.errors.labels("internal").inc()
            detail = [{"field": "server", "message": type(exc).__name__}]
            response = JSONResponse({"error": "internal", "detail": detail}, status_code=500)
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        metrics.latency.labels(endpoint).observe(time.perf_counter() - t)
        if not in_thread:
            # One of several workers: a connection serves one request, so the next one is
            # accepted by a worker that is waiting (not one busy deciding). Kept-alive
            # connections stay with the worker that accepted them, and the kernel hands most
            # of them to one worker.
            response.headers["connection"] = "close"
        return response

    async def _append(kind: str, payloads: list[dict], cluster: str) -> None:
        try:
            if in_thread:
                await run_in_threadpool(spool.append_many, kind, payloads, cluster=cluster)
            else:
                spool.append_many(kind, payloads, cluster=cluster)
        except SpoolError as err:
            raise _Refused(503, "spool", [{"field": "spool", "message": str(err)}]) from None
        except ValueError as err:  # a payload the spool cannot write as JSON
            raise _Refused(422, "invalid_body", [{"field": "body", "message": str(err)}]) from None
        metrics.records.labels(kind).inc(len(payloads))

    async def _decide(snap: Snapshot, body: bytes | None = None) -> Decision:
        try:
            if in_thread:
                outcome = await run_in_threadpool(policy.decide, snap)
            else:
                outcome = policy.decide(snap)
        except Exception as exc:  # a policy bug must not take the service down
            raise _Refused(
                500, "policy", [{"field": "policy", "message": f"{type(exc).__name__}: {exc}"}]
            ) from None
        metrics.refused_starts.inc(outcome.refused)
        decision = Decision(
            schema_version=SCHEMA_VERSION,
            decision_id=uuid.uuid4().hex,
            policy=policy.name,
            policy_id=policy.policy_id,
            time=snap.time,
            latency_ms=outcome.compute_s * 1000.0,
            start=outcome.start,
            wait=outcome.wait,
        )
        received = _as_received(body) if body is not None else None
        payload = {
            "snapshot": received if received is not None else snap.model_dump(mode="json"),
            "decision": decision.model_dump(mode="json"),
        }
        await _append("decision", [payload], snap.cluster)
        return decision

    async def _errors_as_responses(handler: Callable[[], Awaitable[Response]]) -> Response:
        try:
            return await handler()
        except _Refused as refused:
            metrics.errors.labels(refused.kind).inc()
            return JSONResponse(
                {"error": refused.kind, "detail": refused.detail}, status_code=refused.status
            )

    @app.post("/v1/decide")
    async def decide(request: Request) -> Response:
        async def run() -> Response:
            body = await _body(request, max_body_bytes)
            snap = _parse(Snapshot, body)
            return _json(await _decide(snap, body))

        return await _errors_as_responses(run)

    def _candidates(args: ExtenderArgs) -> tuple[list, list[str]]:
        if args.nodes is not None:
            return list(args.nodes.items), [n.metadata.name for n in args.nodes.items]
        return [], list(args.node_names or [])

    @app.post("/v1/extender/filter")
    async def extender_filter(request: Request) -> Response:
        async def run() -> Response:
            args = _parse(ExtenderArgs, await _body(request, max_body_bytes))
            nodes, names = _candidates(args)
            need = pod_gpus(args.pod)
            wanted = node_gpu_type(args.pod.spec.node_selector)
            if not nodes:  # node names only: nothing to judge them by
                return _json(ExtenderFilterResult(node_names=names))
            kept, failed = [], {}
            for node in nodes:
                server = node_as_server(node)
                if need > 0 and wanted and server.gpu_type != wanted:
                    failed[server.name] = f"GPU type {server.gpu_type} is not {wanted}"
                elif server.gpus + 1e-9 < need:
                    failed[server.name] = (
                        f"{server.gpus} allocatable GPUs, the pod asks for {need:g}"
                    )
                else:
                    kept.append(node)
            result = ExtenderFilterResult(nodes=NodeList(items=kept), failed_nodes=failed)
            return _json(result)

        return await _errors_as_responses(run)

    @app.post("/v1/extender/prioritize")
    async def extender_prioritize(request: Request) -> Response:
        async def run() -> Response:
            args = _parse(ExtenderArgs, await _body(request, max_body_bytes))
            nodes, names = _candidates(args)
            if not nodes or pod_gpus(args.pod) <= 0:
                return _json([HostPriority(host=n, score=0) for n in names])
            now = clock()
            try:
                snap = Snapshot(
                    schema_version=SCHEMA_VERSION,
                    cluster=extender_cluster,
                    time=now,
                    servers=[node_as_server(n) for n in nodes],
                    pending=[pod_as_pending(args.pod, now)],
                )
            except ValidationError as err:
                raise _Refused(422, "invalid_body", field_errors(err)) from None
            decision = await _decide(snap)
            chosen = {s for start in decision.start for s in start.servers}
            return _json(
                [
                    HostPriority(host=n, score=MAX_EXTENDER_SCORE if n in chosen else 0)
                    for n in names
                ]
            )

        return await _errors_as_responses(run)

    @app.post("/v1/observe")
    async def observe(request: Request) -> Response:
        async def run() -> Response:
            batch = _parse(ObserveBatch, await _body(request, max_body_bytes))
            payloads = [o.model_dump(mode="json") for o in batch.observations]
            await _append("observation", payloads, batch.cluster)
            return JSONResponse({"accepted": len(payloads)})

        return await _errors_as_responses(run)

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok", "policy": policy.name, "policy_id": policy.policy_id})

    @app.get("/metrics")
    async def metrics_text() -> Response:
        registry = metrics.registry
        if metrics_dir is not None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(metrics_dir))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
