"""`schedlab replay SOURCE --scheduler dl2 ...`: learned families over a whole trace in the
arena's simulator, on the tiny run's warehouse (its Helios trace and the policies trained
on it)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.replay_learned import (
    FAMILIES,
    newest_policies,
    replayed_jobs,
    whole_trace_workload,
)
from tracelib.sim import jobs_from_frame
from warehouse import connect, read_frame


@pytest.fixture
def trained(reference_run, tmp_path, monkeypatch):
    """A copy of the tiny run's warehouse (policies and checkpoints beside it) and the id
    of its Helios source."""
    folder = tmp_path / "copy"
    shutil.copytree(reference_run.warehouse.parent, folder)
    warehouse = folder / reference_run.warehouse.name
    monkeypatch.setenv("SCHEDLAB_WAREHOUSE", str(warehouse))
    with connect(warehouse, read_only=True) as con:
        source = read_frame(con, "SELECT source_id FROM trace_sources WHERE format = 'helios'")
    return warehouse, source["source_id"][0]


def _runs(con, source: str):
    """The learned replay's eval_runs rows of `source`: scheduler, policy, jobs, JCT."""
    return read_frame(
        con,
        "SELECT scheduler, policy, n_jobs, avg_jct_s FROM eval_runs WHERE workload_set = ? "
        "ORDER BY scheduler",
        [f"replay-arena:{source}"],
    )


def test_each_family_runs_its_policy_trained_on_the_source(trained, capsys):
    warehouse, source = trained
    with connect(warehouse, read_only=True) as con:
        chosen = newest_policies(con, source, ("dl2", "chic"))
        trained_on = read_frame(
            con,
            "SELECT p.system, w.source_ids FROM policies p, workloads w "
            "WHERE w.workload_id = json_extract_string(p.training_workloads, '$[0]') "
            "AND p.policy_id IN (?, ?) ORDER BY p.system",
            [chosen["dl2"], chosen["chic"]],
        )
    sources = dict(zip(trained_on["system"], trained_on["source_ids"], strict=True))
    # Chic's arena policy is trained on every set of the tiny run: the one trained on the
    # Helios trace's own set is picked. DL2 trains on the synthetic set only: that one.
    assert source in sources["chic-arena"].split(",")
    assert sources["dl2"].startswith("synthetic:")
    argv = ["replay", source, "--servers", "4", "--scheduler", "fifo"]
    assert main([*argv, "--scheduler", "dl2", "--quiet"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith(f"{source} (arena's simulator): ")
    assert "best dl2 dl2 " in lines[1]
    with connect(warehouse, read_only=True) as con:
        runs = _runs(con, source)
        summary = read_frame(
            con,
            "SELECT scheduler, family, best_heuristic, ratio_ci_low FROM eval_summary "
            "WHERE workload_set = ?",
            [f"replay-arena:{source}"],
        )
    assert runs["scheduler"].to_list() == ["dl2", "drf", "fifo", "optimus-events"]
    # Each scheduler's line ends with the seconds its whole-trace run took.
    arena_part = out[out.index("the arena's simulator at capacity 1, ") :]
    timed = re.findall(r"^  (\S+) +average JCT .*\((\d[\d,]*\.\d) s\)$", arena_part, re.M)
    assert sorted(name for name, _ in timed) == runs["scheduler"].to_list()
    policy = dict(zip(runs["scheduler"], runs["policy"], strict=True))
    assert chosen["dl2"] in policy["dl2"]
    assert runs["n_jobs"].n_unique() == 1  # every scheduler ran the whole trace
    families = dict(zip(summary["scheduler"], summary["family"], strict=True))
    assert families["dl2"] == "dl2"
    assert summary["best_heuristic"].n_unique() == 1
    assert summary["best_heuristic"][0] in ("optimus-events", "drf", "fifo")
    # The same command again: the same figures (deterministic), rows replaced.
    assert main([*argv, "--scheduler", "dl2", "--quiet"]) == 0
    with connect(warehouse, read_only=True) as con:
        assert _runs(con, source).equals(runs)
    # Every job in the system is visible (no arena window capping the jobs that run).
    with connect(warehouse, read_only=True) as con:
        configs = read_frame(
            con,
            "SELECT DISTINCT config FROM eval_runs WHERE workload_set = ?",
            [f"replay-arena:{source}"],
        )["config"]
    assert {json.loads(c)["evaluation"]["window"] for c in configs} == {None}
    assert {json.loads(c)["sim"]["window"] for c in configs} == {None}


def test_a_family_without_a_policy_is_a_clear_error(warehouse_path, capsys):
    from tests.conftest import TRACES

    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    capsys.readouterr()
    argv = ["replay", "helios:helios_sample", "--servers", "4", "--scheduler", "dl2", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no registered policy of dl2" in err and "Traceback" not in err


def test_every_family_is_known_to_the_arena():
    from pipelines.registry import SYSTEMS

    assert set(FAMILIES.values()) <= set(SYSTEMS.loaders())
    assert json.dumps(sorted(FAMILIES)) == json.dumps(
        ["chic", "chic-pair", "dl2", "harmony", "rl-taps"]
    )


def test_the_window_limits_the_learned_replay_too(trained):
    from datetime import datetime

    from pipelines.replay import ReplayInputError
    from pipelines.replay_learned import LearnedReplayConfig, learned_replay_stage

    warehouse, source = trained
    window = (datetime(2001, 1, 1), datetime(2001, 1, 2))  # before the trace: no job in it
    cfg = LearnedReplayConfig(source, ("dl2",), gpus=8.0, window=window)
    with pytest.raises(ReplayInputError, match="has no job to replay"):
        learned_replay_stage(warehouse, cfg)


def test_rl_taps_runs_on_a_cluster_it_was_not_trained_for(trained, capsys):
    """RL-TAPS' arena policy was trained on the arena's cluster: on the replay's 4 servers
    it decides there (its image resampled, the jobs N at a time), on the whole trace,
    beside the heuristics."""
    warehouse, source = trained
    with connect(warehouse, read_only=True) as con:
        found = newest_policies(con, source, ("rl-taps",))
    argv = ["replay", source, "--servers", "4", "--scheduler", "fifo", "--quiet"]
    assert main([*argv, "--scheduler", "rl-taps"]) == 0
    assert "best rl-taps rl-taps " in capsys.readouterr().out
    with connect(warehouse, read_only=True) as con:
        runs = _runs(con, source)
    policy = dict(zip(runs["scheduler"], runs["policy"], strict=True))
    assert policy["rl-taps"] == f"{found['rl-taps']}+load-balancing"
    assert runs["n_jobs"].n_unique() == 1


def test_the_arena_baselines_are_the_user_s_to_name(trained, capsys):
    """`--arena-baseline`: the learned family is judged against the heuristics named (a
    name given twice runs once); an oracle, an unknown name, or the flag with no family is
    a clear error before anything runs."""
    warehouse, source = trained
    argv = ["replay", source, "--servers", "4", "--scheduler", "fifo", "--quiet"]
    for bad, message in (
        (["--scheduler", "rl-taps", "--arena-baseline", "optimus-oracle"], "an oracle"),
        (["--scheduler", "rl-taps", "--arena-baseline", "lottery"], "'lottery'"),
        (["--arena-baseline", "drf"], "name a family with --scheduler"),
    ):
        assert main([*argv, *bad]) == 2
        err = capsys.readouterr().err
        assert message in err
        assert "Traceback" not in err
    with connect(warehouse, read_only=True) as con:
        assert _runs(con, source).height == 0
        [(rules,)] = con.sql("SELECT count(*) FROM eval_runs").fetchall()
    chosen = ["--arena-baseline", "drf", "--arena-baseline", "tetris", "--arena-baseline", "drf"]
    assert main([*argv, "--scheduler", "rl-taps", *chosen]) == 0
    assert "best heuristic " in capsys.readouterr().out
    with connect(warehouse, read_only=True) as con:
        runs = _runs(con, source)
        best = read_frame(
            con,
            "SELECT DISTINCT best_heuristic FROM eval_summary WHERE workload_set = ?",
            [f"replay-arena:{source}"],
        )["best_heuristic"].to_list()
        [(after,)] = con.sql("SELECT count(*) FROM eval_runs").fetchall()
    assert runs["scheduler"].to_list() == ["drf", "rl-taps", "tetris"]
    assert len(best) == 1 and best[0] in ("drf", "tetris")
    assert after > rules  # the rules' rows and the arena's


def test_the_what_if_capacities_run_the_learned_families_too(trained, capsys):
    """`--capacity` replays a learned family at each capacity as it does the rules: one
    evaluation per capacity on that capacity's cluster, each printed with its factor, and
    its own what-if plot and report table beside the rules'."""
    from pipelines.report import replay_capacity_section

    warehouse, source = trained
    argv = ["replay", source, "--servers", "4", "--capacity", "0.5,1", "--scheduler", "chic"]
    assert main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\S+: the arena's simulator at capacity 0\.5, ", out, re.M)
    assert re.search(r"^\S+: the arena's simulator at capacity 1, ", out, re.M)
    with connect(warehouse, read_only=True) as con:
        runs = read_frame(
            con,
            "SELECT eval_id, scheduler, config FROM eval_runs WHERE workload_set = ?",
            [f"replay-arena:{source}"],
        )
    evaluations = {
        e: json.loads(c)["evaluation"] for e, c in zip(runs["eval_id"], runs["config"], strict=True)
    }
    servers = {e: cfg["cluster"]["n_servers"] for e, cfg in evaluations.items()}
    assert len(servers) == 2 and sorted(servers.values())[0] < sorted(servers.values())[1]
    assert set(runs.filter(runs["scheduler"] == "chic")["eval_id"]) == set(servers)
    assert sorted(cfg["capacity"] for cfg in evaluations.values()) == [0.5, 1.0]
    # Two plots: the rules' and the arena's, each named by its workload set.
    plots = re.findall(r"^plot: (\S+)$", out, re.M)
    assert [Path(p).name for p in plots] == [
        f"capacity_replay_{source.replace(':', '_')}.png",
        f"capacity_replay-arena_{source.replace(':', '_')}.png",
    ]
    assert all(Path(p).stat().st_size > 0 for p in plots)
    with connect(warehouse, read_only=True) as con:
        section = replay_capacity_section(con)
    tables = {t.title: t for t in section.tables}
    arena = tables[f"replay-arena:{source}"]
    column = {name: k for k, name in enumerate(arena.columns)}
    by_size = {}
    for row in arena.rows:
        by_size.setdefault(row[column["servers"]], set()).add(row[column["scheduler"]])
    assert len(by_size) == 2 and all("chic" in names for names in by_size.values())
    gpus = sorted(float(row[column["gpus"]]) for row in arena.rows)
    assert gpus[0] < gpus[-1]
    assert len(section.figures) == len(section.tables) == 2


def test_the_what_if_runs_side_by_side_with_the_same_tables(trained, monkeypatch):
    """The learned what-if's runs (one per capacity) go to worker processes as the rules'
    do, and store what one after another in this process stores."""
    import pipelines.replay as replay
    import pipelines.replay_learned as replay_learned

    warehouse, source = trained
    argv = ["replay", source, "--servers", "4", "--capacity", "0.5,1", "--scheduler", "chic"]
    query = (
        "SELECT eval_id, scheduler, policy, avg_jct_s, config FROM eval_runs "
        "WHERE workload_set = ? ORDER BY eval_id, scheduler"
    )
    assert main([*argv, "--task-runner", "sequential", "--quiet"]) == 0
    with connect(warehouse, read_only=True) as con:
        sequential = read_frame(con, query, [f"replay-arena:{source}"])
    submitted = []

    class Pool(replay.ProcessPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            if fn is replay_learned._replay_task:  # the rules' replays go here too
                submitted.append(args[1].capacity)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(replay, "ProcessPoolExecutor", Pool)
    assert main([*argv, "--task-runner", "processes", "--workers", "2", "--quiet"]) == 0
    assert submitted == [0.5, 1.0]
    with connect(warehouse, read_only=True) as con:
        side_by_side = read_frame(con, query, [f"replay-arena:{source}"])
    assert sequential.height == 8 and side_by_side.equals(sequential)
    monkeypatch.chdir(warehouse.parent.parent)  # a Ray worker's folder is not the command's
    relative = Path(warehouse.parent.name) / warehouse.name
    assert main([*argv, "--warehouse", str(relative), "--task-runner", "ray", "--quiet"]) == 0
    with connect(warehouse, read_only=True) as con:
        assert read_frame(con, query, [f"replay-arena:{source}"]).equals(sequential)


def test_a_policy_whose_checkpoint_is_gone_is_passed_over_with_a_clear_error(trained, capsys):
    """The newest policy's checkpoint file lost: marked in checkpoint_problems and passed
    over for the next newest; none left: never a traceback, asked for by name exit 2
    saying so, with "all" the family left out and the others run."""
    warehouse, source = trained

    def lose(policy_id: str) -> None:
        with connect(warehouse, read_only=True) as con:
            path = Path(
                read_frame(
                    con, "SELECT checkpoint_path FROM policies WHERE policy_id = ?", [policy_id]
                ).item()
            )
        (path if path.is_absolute() else warehouse.parent / path).unlink()

    with connect(warehouse, read_only=True) as con:
        newest = newest_policies(con, source, ("chic",))["chic"]
    lose(newest)
    argv = ["replay", source, "--servers", "4", "--scheduler", "fifo", "--quiet"]
    assert main([*argv, "--scheduler", "chic"]) == 0
    ran = re.search(r"policies chic (\S+)", capsys.readouterr().out).group(1)
    assert ran != newest
    with connect(warehouse, read_only=True) as con:
        problems = read_frame(con, "SELECT policy_id, problem FROM checkpoint_problems")
        others = read_frame(
            con,
            "SELECT policy_id FROM policies WHERE system = 'chic-arena' AND policy_id != ?",
            [newest],
        )["policy_id"]
    assert dict(problems.iter_rows())[newest] == "missing"
    for policy_id in others:
        lose(policy_id)
    assert main([*argv, "--scheduler", "chic"]) == 2
    err = capsys.readouterr().err
    assert "no registered policy of chic with a usable checkpoint" in err
    assert "Traceback" not in err
    assert main([*argv, "--scheduler", "all"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  chic +not replayed: no registered policy with a usable", out, re.M)
    assert re.search(r"^  dl2 ", out, re.M)  # the others ran


PODS = (
    (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
    )
    + """pod-0,8000,15258,0,0,,LS,Succeeded,0,1800,1
pod-1,8000,16384,1,1000,T4,LS,Succeeded,60,3600,61
pod-2,8000,16384,1,500,,Burstable,Running,120,2400,121
pod-3,12000,30517,2,1000,V100M32,LS,Failed,300,2700,302
pod-4,12000,12288,1,250,,BE,Pending,600,2000,601
pod-5,8000,16384,1,1000,,LS,Succeeded,900,4000,901
"""
)
NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,96000,786432,4,T4
node-1,96000,786432,8,V100M32
node-2,32000,131072,0,
"""


def test_a_node_list_is_the_learned_replay_s_cluster_with_every_phase(trained, tmp_path, capsys):
    """On a pod list with its node list, the learned families run on the node list's
    servers (their GPUs and GPU types), every pod phase replayed (a running pod held to the
    trace's end, a pending one with its recorded times); Harmony's network, which reads no
    GPU types, is offered only the servers of the types a pod accepts."""
    warehouse, _ = trained
    pods, nodes = tmp_path / "openb_pod_list_tiny.csv", tmp_path / "openb_node_list_tiny.csv"
    pods.write_text(PODS)
    nodes.write_text(NODES)
    ingest = ["ingest", str(pods), "--format", "generic", "--mapping", "alibaba-gpu-2023"]
    assert main([*ingest, "--quiet"]) == 0
    source = "generic:openb_pod_list_tiny"
    argv = ["replay", source, "--nodes", str(nodes), "--scheduler", "fifo", "--quiet"]
    capsys.readouterr()
    assert main([*argv, "--scheduler", "all"]) == 0
    out = capsys.readouterr().out
    assert "not replayed" not in out
    assert "6 jobs on 3 servers (12 GPUs)" in out
    with connect(warehouse, read_only=True) as con:
        runs = _runs(con, source)
        replayed, _ = replayed_jobs(con, source, None)
        sources = read_frame(con, "SELECT * FROM trace_sources WHERE source_id = ?", [source])
    assert set(runs["n_jobs"]) == {6}  # the running and the pending pod too
    assert {"dl2", "chic", "harmony", "rl-taps", "optimus-events"} <= set(runs["scheduler"])
    # What the arena's simulator ran: each pod's GPU type and share of a GPU as recorded.
    _, jobs = whole_trace_workload(replayed, sources, "x")
    by_id = {r["job_id"]: r for r in jobs.iter_rows(named=True)}
    assert by_id["pod-1"]["gpu_type"] == "T4" and by_id["pod-3"]["gpu_type"] == "V100M32"
    assert by_id["pod-2"]["num_gpus"] == 0.5 and by_id["pod-4"]["num_gpus"] == 0.25
    specs = {j.name: j for j in jobs_from_frame(jobs)}
    assert specs["pod-2"].gpu_share == 0.5 and specs["pod-4"].gpu_share == 0.25
