"""`schedlab serve-policy`: load the policy, open the spool, run the service under uvicorn."""

from __future__ import annotations

import ipaddress
import os
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

    def spool_dir(self) -> Path:
        return (
            self.spool
            if self.spool is not None
            else resolve_path(self.warehouse).parent / "shadow-spool"
        )


def serve_policy(cfg: ServeConfig) -> int:
    """Serve until interrupted; returns the exit code."""
    import uvicorn

    policy = load_served_policy(cfg.policy, cfg.warehouse, seed=cfg.seed)
    token = cfg.token or os.environ.get(TOKEN_ENV) or None
    spool = Spool(cfg.spool_dir())
    app = create_app(
        policy,
        spool,
        token=token,
        max_body_bytes=cfg.max_body_bytes,
        extender_cluster=cfg.cluster,
    )
    exposed = (
        ""
        if cfg.host in ("127.0.0.1", "::1", "localhost")
        else " (not loopback: reachable from the network)"
    )
    print(
        f"serving {policy.name} ({policy.policy_id}) on http://{cfg.host}:{cfg.port}{exposed}; "
        f"spool {spool.root}; token {'required' if token else 'not required'}",
        flush=True,
    )
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
    return 0
