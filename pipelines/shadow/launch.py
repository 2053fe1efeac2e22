"""Start `schedlab serve-policy` as a child process on a free loopback port and wait until
it answers /healthz (what the tests and the serving benchmark run against)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`schedlab serve-policy ARGS --port <free>` in a child process; a context manager that
    stops it (SIGTERM, then SIGKILL) on exit. `url` is its base URL."""

    def __init__(
        self, args: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 120.0
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable,
            "-m",
            "pipelines.cli",
            "serve-policy",
            *args,
            "--port",
            str(self.port),
        ]
        self.proc = subprocess.Popen(
            command,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"serve-policy exited {self.proc.returncode}: {self.proc.stdout.read()}"
                )
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"serve-policy did not answer /healthz within {timeout_s:.0f} s")

    def kill(self) -> None:
        """SIGKILL: the process dies at once, as in a crash."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> str:
        """Stop it and return what it printed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.stdout.read() if self.proc.stdout else ""

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
