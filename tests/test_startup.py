"""`schedlab run` starts every time: nothing parses source once the run's threads start,
and Prefect's temporary API is started with a bound and retries, its failure one line."""

from __future__ import annotations

import threading

import pytest

from pipelines import api
from pipelines.api import ApiUnavailable, shared_api
from pipelines.cli import build_parser, main
from pipelines.progress import Reporter
from pipelines.system import field_docs
from tests.toy_system.plugin import ToyOptions


def test_field_docs_are_parsed_once_and_the_parser_parses_them_all(monkeypatch):
    build_parser()  # the command line reads every system's flags in the main thread
    from pipelines.registry import SYSTEMS

    first = {s.key: field_docs(s.options) for s in SYSTEMS}
    assert all(first.values())

    parsed = []
    monkeypatch.setattr("pipelines.system._parse_field_docs", parsed.append)
    results, errors = [], []

    def read():
        try:
            results.append({s.key: field_docs(s.options) for s in SYSTEMS})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and results == [first] * 16
    assert parsed == []  # nothing parsed once the command line was built
    # A copy each time: a caller that edits its dict cannot change the next caller's.
    system = next(iter(SYSTEMS))
    field_docs(system.options).clear()
    assert field_docs(system.options) == first[system.key]


def test_field_docs_of_a_new_class_parse_under_the_lock():
    docs = field_docs(ToyOptions)
    assert docs and all(isinstance(v, str) for v in docs.values())


class _FlakyServer:
    """Stands in for Prefect's SubprocessASGIServer: the first `fail` starts time out."""

    starts = 0
    stops = 0
    fail = 0

    def __init__(self):
        self.api_url = "http://127.0.0.1:9/api"

    def start(self, timeout=None):
        type(self).starts += 1
        if type(self).starts <= type(self).fail:
            raise RuntimeError(
                "Timed out while attempting to connect to ephemeral Prefect API server. "
                "stdout: lots of server output"
            )

    def stop(self):
        type(self).stops += 1


@pytest.fixture
def flaky(monkeypatch):
    import prefect.server.api.server as server_module

    _FlakyServer.starts = _FlakyServer.stops = 0
    monkeypatch.setattr(server_module, "SubprocessASGIServer", _FlakyServer)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return _FlakyServer


def test_a_start_that_times_out_is_retried_on_a_fresh_server(flaky, capsys):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    flaky.fail = 2
    with temporary_settings(updates={PREFECT_API_URL: None}):
        with shared_api(Reporter("lines")):
            assert PREFECT_API_URL.value() == "http://127.0.0.1:9/api"
    assert (flaky.starts, flaky.stops) == (3, 2)  # each failed start's process is ended
    out = capsys.readouterr().out
    assert "did not start (Timed out while attempting to connect" in out
    assert "trying again (3 of 3)" in out and "lots of server output" not in out


def test_a_start_that_never_succeeds_is_one_clear_error_exit_2(flaky, monkeypatch, capsys):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    flaky.fail = 99
    with temporary_settings(updates={PREFECT_API_URL: None}):
        with pytest.raises(ApiUnavailable) as raised:
            with shared_api():
                pass
    assert flaky.starts == api.API_START_ATTEMPTS
    message = str(raised.value)
    assert "did not start (3 attempts" in message and "PREFECT_API_URL" in message
    assert "\n" not in message

    # Through the command line: exit 2, the one line, no traceback.
    def unavailable(args, progress):
        raise ApiUnavailable(message)

    monkeypatch.setattr("pipelines.cli._run_flow", unavailable)
    assert main(["run", "--quiet", "--budget", "smoke"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Prefect's temporary API server did not start")
    assert "Traceback" not in err


def test_prefects_own_start_failing_inside_the_flow_is_the_same_clear_error(monkeypatch, capsys):
    def timed_out(args, progress):
        raise RuntimeError(
            "Timed out while attempting to connect to ephemeral Prefect API server. "
            "Ephemeral server process exited with code 1."
        )

    monkeypatch.setattr("pipelines.cli._run_flow", timed_out)
    assert main(["run", "--quiet", "--budget", "smoke", "--task-runner", "ray"]) == 2
    err = capsys.readouterr().err
    assert "did not start (3 attempts" in err and "exited with code 1" in err

    def other(args, progress):
        raise RuntimeError("a stage's own failure")

    monkeypatch.setattr("pipelines.cli._run_flow", other)
    with pytest.raises(RuntimeError, match="a stage's own failure"):
        main(["run", "--quiet", "--budget", "smoke"])


def test_a_start_waits_while_another_process_of_the_same_home_starts_its_server(
    flaky, tmp_path, capsys
):
    """Two runs on one new PREFECT_HOME would both migrate its database as their servers
    start; a start waits for the lock the other holds while its server starts."""
    import fcntl
    import os

    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    flaky.fail = 0
    lock = tmp_path / "schedlab-api-start.lock"
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # the other run's server is starting
    entered = threading.Event()
    errors = []

    def run():
        try:
            with temporary_settings(updates={PREFECT_API_URL: None, PREFECT_HOME: tmp_path}):
                with shared_api(Reporter("lines")):
                    entered.set()
        except BaseException as exc:
            errors.append(exc)

    starter = threading.Thread(target=run)
    starter.start()
    assert not entered.wait(1.0)  # held back
    assert flaky.starts == 0
    os.close(holder)  # the other start is done
    starter.join(30)
    assert entered.is_set() and errors == [] and flaky.starts == 1
    assert "waiting for another run's Prefect API to finish starting" in capsys.readouterr().out
