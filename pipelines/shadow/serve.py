"""`schedlab serve-policy`: load the policy, open the spool, run the service under uvicorn.

With `--workers N` (N > 1) the service is N processes answering on one listening socket
(the kernel spreads connections between them), each with its own copy of the policy,
appending to the one spool (appends are locked across processes) and counting into one
set of Prometheus metrics (prometheus_client's multiprocess mode, in a temporary
directory). The parent only supervises: a worker that dies is started again, and the
workers die with the parent (Linux), so a kill -9 of the service takes all of it down."""

from __future__ import annotations

import ctypes
import gc
import ipaddress
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.shadow.policies import load_served_policy
from pipelines.shadow.server import DEFAULT_MAX_BODY_BYTES, create_app
from tracelib.shadow.spool import Spool
from warehouse.db import resolve_path

DEFAULT_PORT = 8790
TOKEN_ENV = "SCHEDLAB_SHADOW_TOKEN"
"""Where the token is read from when --token is not given (keeps it out of `ps`)."""


@dataclass(frozen=True)
class ServeConfig:
    """One decision service."""

    policy: str = "fifo"
    """A heuristic's arena name, a learned family (its newest registered policy) or a policy id."""
    host: str = "127.0.0.1"
    """Address to bind; loopback unless told otherwise."""
    port: int = DEFAULT_PORT
    spool: Path | None = None
    """Spool directory; None: `shadow-spool/` beside the warehouse file."""
    token: str | None = None
    """Bearer token every endpoint but /healthz requires; None: no token."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    warehouse: str | None = None
    cluster: str = "kubernetes"
    """Cluster name the extender's decisions are logged under."""
    seed: int = 0
    workers: int = 1
    """Processes answering requests (each holds the policy; CPU-bound decisions scale
    with cores)."""

    def __post_init__(self) -> None:
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            if self.host != "localhost":
                raise ValueError(f"--host: {self.host!r} is not an IP address") from None
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port: {self.port} is not a port number")
        if self.max_body_bytes < 1024:
            raise ValueError("--max-body-bytes: at least 1024")
        if self.token is not None and len(self.token) < 16:
            raise ValueError("--token: use at least 16 characters")
        if not 1 <= self.workers <= 64:
            raise ValueError(f"--workers: {self.workers} is not between 1 and 64")

    def spool_dir(self) -> Path:
        return (
            self.spool
            if self.spool is not None
            else resolve_path(self.warehouse).parent / "shadow-spool"
        )


def _exposed(host: str) -> str:
    if host in ("127.0.0.1", "::1", "localhost"):
        return ""
    return " (not loopback: reachable from the network)"


def serve_policy(cfg: ServeConfig) -> int:
    """Serve until interrupted; returns the exit code."""
    import uvicorn

    policy = load_served_policy(cfg.policy, cfg.warehouse, seed=cfg.seed)
    token = cfg.token or os.environ.get(TOKEN_ENV) or None
    spool = Spool(cfg.spool_dir())
    if cfg.workers > 1:
        spool.close()  # checked that it opens; each worker opens its own
        return _serve_workers(cfg, token, policy.name, policy.policy_id)
    app = create_app(
        policy,
        spool,
        token=token,
        max_body_bytes=cfg.max_body_bytes,
        extender_cluster=cfg.cluster,
    )
    print(
        f"serving {policy.name} ({policy.policy_id}) on http://{cfg.host}:{cfg.port}"
        f"{_exposed(cfg.host)}; spool {spool.root}; token "
        f"{'required' if token else 'not required'}",
        flush=True,
    )
    gc.freeze()  # see _worker
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
    return 0


METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client reads it when first imported: set for the workers, which are started
afresh (spawn) and so import it with the directory set."""
_QUICK_DEATH_S = 5.0
_QUICK_DEATHS = 3


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ValueError(f"--host/--port: cannot listen on {host}:{port}: {err.strerror}") from err
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies (prctl PR_SET_PDEATHSIG); exit
    at once if the parent is already gone. Elsewhere the workers outlive a killed parent."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _worker(
    cfg: ServeConfig, token: str | None, sock: socket.socket, parent: int, metrics_dir: str
) -> None:
    """One worker process: its own policy, spool handle and app, on the shared socket."""
    import uvicorn

    _die_with_parent(parent)
    policy = load_served_policy(cfg.policy, cfg.warehouse, seed=cfg.seed)
    app = create_app(
        policy,
        Spool(cfg.spool_dir()),
        token=token,
        max_body_bytes=cfg.max_body_bytes,
        extender_cluster=cfg.cluster,
        metrics_dir=Path(metrics_dir),
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    # What is loaded by now (the policy, its modules) lives as long as the worker: out of
    # the collector's reach, a full collection no longer walks it on every request.
    gc.freeze()
    uvicorn.Server(config).run(sockets=[sock])


def _serve_workers(cfg: ServeConfig, token: str | None, name: str, policy_id: str) -> int:
    """Run `cfg.workers` worker processes on one socket until SIGTERM/SIGINT; restart a
    worker that dies (give up, exit 1, when one dies within seconds of starting three
    times in a row)."""
    sock = _listen(cfg.host, cfg.port)
    metrics_dir = tempfile.mkdtemp(prefix="schedlab-serve-metrics-")
    os.environ[METRICS_ENV] = metrics_dir  # inherited by the workers (see METRICS_ENV)
    ctx = multiprocessing.get_context("spawn")
    parent = os.getpid()

    def start() -> tuple[multiprocessing.process.BaseProcess, float]:
        proc = ctx.Process(
            target=_worker, args=(cfg, token, sock, parent, metrics_dir), daemon=True
        )
        proc.start()
        return proc, time.monotonic()

    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    workers = [start() for _ in range(cfg.workers)]
    quick_deaths = [0] * cfg.workers
    print(
        f"serving {name} ({policy_id}) on http://{cfg.host}:{cfg.port}{_exposed(cfg.host)} "
        f"with {cfg.workers} worker processes; spool {cfg.spool_dir()}; token "
        f"{'required' if token else 'not required'}",
        flush=True,
    )
    code = 0
    try:
        while not stop.wait(0.5):
            for k, (proc, started) in enumerate(workers):
                if proc.is_alive():
                    continue
                quick_deaths[k] = (
                    quick_deaths[k] + 1 if time.monotonic() - started < _QUICK_DEATH_S else 0
                )
                if quick_deaths[k] >= _QUICK_DEATHS:
                    print(
                        f"error: worker {k} exited {proc.exitcode} within "
                        f"{_QUICK_DEATH_S:.0f} s of starting {_QUICK_DEATHS} times; stopping",
                        file=sys.stderr,
                        flush=True,
                    )
                    code = 1
                    stop.set()
                    break
                print(f"worker {k} exited {proc.exitcode}; starting it again", flush=True)
                workers[k] = start()
    finally:
        for proc, _ in workers:
            if proc.is_alive():
                proc.terminate()
        for proc, _ in workers:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        os.environ.pop(METRICS_ENV, None)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return code
