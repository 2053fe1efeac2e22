"""Children of a `schedlab run` end with it, even when it is killed with SIGKILL:
first the mechanism on plain processes, then a real run and its Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipelines.lifeline import ENV_VAR

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/environ").exists(), reason="the lifeline reads /proc (Linux)"
)

# A parent that starts its lifeline, then a child and a grandchild that would outlive it,
# and one process started before the lifeline (not its to stop); prints their pids.
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from pipelines.lifeline import start_lifeline
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    before = subprocess.Popen(sleep, **quiet)
    start_lifeline()
    child = subprocess.Popen(sleep, **quiet)
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 120 2>/dev/null & echo $!; wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    grandchild = int(shell.stdout.readline())
    print(before.pid, child.pid, shell.pid, grandchild, flush=True)
    if sys.argv[1] == "wait":
        time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_gone(pids, deadline_s: float = 60.0) -> list[int]:
    """The pids still alive when they all ended or the deadline passed (not a timing test:
    the deadline only keeps a broken lifeline from hanging the suite)."""
    end = time.monotonic() + deadline_s
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = [p for p in left if _alive(p)]
    return left


def _start_parent(mode: str) -> tuple[subprocess.Popen, list[int]]:
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 4, proc.stderr.read()
    return proc, pids


@pytest.mark.parametrize("how", ["sigkill", "normal-exit"])
def test_children_end_with_their_parent_however_it_ends(how):
    proc, (before, child, shell, grandchild) = _start_parent("wait" if how == "sigkill" else "exit")
    try:
        if how == "sigkill":
            assert all(_alive(p) for p in (child, shell, grandchild))
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert _wait_gone([child, shell, grandchild]) == []
        _, err = proc.communicate(timeout=60)
        assert f"run {proc.pid} ended without stopping its child processes" in err
        assert _alive(before)  # started before the lifeline: not its business
    finally:
        for pid in (before, child, shell, grandchild):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[-1].split()[1]) == pid:
            found[int(entry.name)] = cmd
    return found


@pytest.mark.flow
def test_sigkill_of_schedlab_run_stops_its_prefect_server(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k != ENV_VAR},
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    run = [sys.executable, "-m", "pipelines.cli", "run", "--warehouse", str(tmp_path / "w.duckdb")]
    proc = subprocess.Popen(
        [*run, "--jobs", "60", "--jobs-per-sequence", "10", "--budget", "smoke"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = None
    try:
        end = time.monotonic() + 300
        while server is None and time.monotonic() < end and proc.poll() is None:
            servers = [p for p, cmd in _children(proc.pid).items() if "uvicorn" in cmd]
            server = servers[0] if servers else None
            time.sleep(0.1)
        assert server is not None, "the run never started Prefect's temporary server"
        os.kill(proc.pid, signal.SIGKILL)  # the run alone, not its process group
        proc.wait(timeout=60)
        assert _wait_gone([server]) == []
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        if server is not None and _alive(server):
            os.kill(server, signal.SIGKILL)


@pytest.mark.flow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_to_the_run_s_process_group_stops_it_at_once(tmp_path, signum):
    # What a terminal's Ctrl-C (SIGINT) and a service manager's stop (SIGTERM) do: the signal
    # reaches every process of the group, Prefect's temporary server included. The run used
    # to outlive its server and wait on its tasks for good.
    env = {
        **{k: v for k, v in os.environ.items() if k != ENV_VAR},
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    run = [sys.executable, "-m", "pipelines.cli", "run", "--warehouse", str(tmp_path / "w.duckdb")]
    out = tmp_path / "out.log"
    proc = subprocess.Popen(
        [*run, "--jobs", "60", "--jobs-per-sequence", "10", "--budget", "smoke"],
        env=env,
        stdout=out.open("w"),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as in a terminal
    )
    try:
        end = time.monotonic() + 300
        # Once the flow runs (its first task submitted): from there the run used to wait on
        # its tasks for good (before the flow starts, SIGINT's KeyboardInterrupt did end it).
        while "started: budget" not in out.read_text() and time.monotonic() < end:
            assert proc.poll() is None, "the run ended before its flow started"
            time.sleep(0.1)
        servers = [p for p, cmd in _children(proc.pid).items() if "uvicorn" in cmd]
        assert servers, "no Prefect server under the run"
        server = servers[0]
        os.killpg(proc.pid, signum)
        assert proc.wait(timeout=30) == 128 + signum
        assert f"interrupted ({signal.Signals(signum).name})" in proc.stderr.read()
        assert _wait_gone([server]) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_normal_exit_leaves_nothing_to_stop_and_says_nothing():
    # Python's multiprocessing resource tracker (started by a spawn-context queue, as
    # Prefect's process task runner does) ends by itself when the run ends: the watchdog
    # waits for that instead of stopping it and reporting a leftover.
    parent = textwrap.dedent(
        """
        import multiprocessing
        from multiprocessing import resource_tracker
        from pipelines.lifeline import start_lifeline
        start_lifeline()
        queue = multiprocessing.get_context("spawn").Queue()
        queue.put(1)
        print(resource_tracker._resource_tracker._pid, flush=True)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    proc = subprocess.run(
        [sys.executable, "-c", parent],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
        timeout=120,
    )
    tracker = int(proc.stdout.split()[0])
    assert _wait_gone([tracker]) == []
    assert "ended without stopping" not in proc.stderr, proc.stderr
