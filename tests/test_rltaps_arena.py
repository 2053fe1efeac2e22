"""RL-TAPS in the arena: its per-GPU decision on the evaluation's cluster (encoder, decoder,
PS placement), the network's batch log-probabilities against the decoder's choices, the
arena training stage (registration, caching, resuming, shapes, determinism) and its
loader in the evaluation beside the heuristics."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch

from models.evaluation import EvalConfig, NotApplicable, evaluate
from models.rltaps.arena import ArenaNet, RLTapsArenaPolicy, batch_of
from models.rltaps.arena_reinforce import run_episode, slot_rewards
from models.rltaps.config import ArenaNetConfig
from models.rltaps.stage_config import RLTapsArenaConfig, RLTapsRunConfig
from pipelines.registry import SYSTEMS
from pipelines.stages import derive_stage, learned_policies, synthetic_stage
from pipelines.systems.rltaps import plugin
from pipelines.systems.rltaps.stages import train_arena_stage
from tests.learned_eval import (
    assert_cached,
    assert_reproducible,
    tiny_set_evaluation,
    tiny_trained,
    tiny_warehouse,
)
from tracelib.configs import resized
from tracelib.envs.gpu_arena import (
    ArenaEnvConfig,
    GpuDraft,
    GpuLayout,
    _kinds,
    _resampling,
    next_breaks,
    resample_image,
)
from tracelib.sim import ClusterConfig, JobSpec, Simulator
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig
from warehouse import connect, read_frame

SIM = replace(EvalConfig().sim_config(0), cluster=ClusterConfig(n_servers=8))
ENV = ArenaEnvConfig(cluster=SIM.cluster, window=SIM.window)
CFG = resized(
    RLTapsArenaConfig(workload_set="tiny", sim=SIM, train_sequences=2, val_sequences=1),
    {
        "reinforce.hidden": 16,
        "reinforce.context": 8,
        "reinforce.episodes": 2,
        "reinforce.epochs": 2,
        "reinforce.lr": 0.01,
    },
)


def _policy(prior: float = 6.0, seed: int = 0, env: ArenaEnvConfig = ENV) -> RLTapsArenaPolicy:
    torch.manual_seed(seed)
    return RLTapsArenaPolicy(ArenaNet(ArenaNetConfig.for_env(env, 16, 8, prior)), env)


def _jobs() -> tuple[JobSpec, ...]:
    models = ["resnet-50", "vgg-16", "cnn-text", "seq2seq", "wlm", "dssm"]
    return tuple(
        JobSpec(
            job_id=i,
            model=m,
            epochs=3.0 + i,
            arrival_s=600.0 * i,
            num_workers=1 + i % 3,
            num_ps=1 + i % 2,
        )
        for i, m in enumerate(models)
    )


# -- the decision ------------------------------------------------------------------------


def test_the_layout_numbers_every_gpu_of_every_server():
    layout = GpuLayout.of(ClusterConfig(n_servers=3))
    assert layout.server == (0, 0, 1, 1, 2, 2) and layout.index == (0, 1, 0, 1, 0, 1)
    assert ENV.n_gpus == 16 and ENV.image_dim == 160
    assert ArenaEnvConfig().n_gpus == 192  # the evaluation's cluster


def test_the_prior_starts_as_the_requested_allocation_with_one_ps_per_worker():
    """Greedy, a fresh network gives every job its requested GPUs and keeps them; PSs are
    the request raised to one per worker, or the request alone under "requested"."""
    jobs = _jobs()
    for rule in ("at-least-workers", "requested"):
        env = replace(ENV, ps_rule=rule)
        result = Simulator(jobs, _policy(env=env), SIM).run()
        allocs = result.events_frame().filter((pl.col("kind") == "alloc") & (pl.col("workers") > 0))
        for job in jobs:
            rows = allocs.filter(pl.col("job_id") == job.job_id)
            assert rows.height > 0
            assert set(rows["workers"].to_list()) == {job.num_workers}
            want = max(job.num_ps, 1)
            if rule == "at-least-workers":
                want = max(want, job.num_workers)
            assert set(rows["ps"].to_list()) == {want}
        assert result.jobs["finish_s"].null_count() == 0


def test_recorded_rows_are_the_networks_softmaxes():
    """The batch log-probabilities (torch) see what the decoder (numpy) saw: greedy choices
    are the rows' argmax, sampled ones are valid, and every decision accounts for at most
    every GPU once (weights of runs of identical GPUs included)."""
    policy = _policy(prior=2.0)
    greedy = run_episode(policy, _jobs(), SIM, record=True)
    sampled = run_episode(policy, _jobs(), SIM, rng=np.random.default_rng(3), record=True)
    for episode in (greedy, sampled):
        batch = batch_of(episode.records)
        logits = policy.net.row_logits(batch).detach()
        assert torch.isfinite(logits.gather(1, batch.choice.unsqueeze(1))).all()
        per_step = torch.zeros(len(episode.records)).index_add(0, batch.step, batch.weight)
        assert (per_step <= ENV.n_gpus).all() and (per_step > 0).all()
        logp, entropy = policy.net.log_prob_and_entropy(batch)
        assert logp.shape == (len(episode.records),) and float(entropy.detach()) >= 0
    batch = batch_of(greedy.records)
    logits = policy.net.row_logits(batch).detach()
    assert torch.equal(logits.argmax(1), batch.choice)
    assert len(greedy.rewards) == len(greedy.records)
    # Minus the job-seconds in the system per slot and job: sums to minus the mean JCT.
    assert -greedy.rewards.sum() * SIM.slot_s == pytest.approx(greedy.avg_jct_s, rel=0.05)


def test_slot_rewards_count_each_jobs_time_in_the_system():
    class Result:
        jobs = pl.DataFrame({"arrival_s": [0.0, 100.0], "finish_s": [300.0, 250.0]})

    r = slot_rewards(Result(), [0.0, 200.0], slot_s=100.0)
    # [0, 200): 200 + 100 job-seconds; [200, 300): 100 + 50.
    assert r.tolist() == pytest.approx([-300 / 200, -150 / 200])


def test_a_resampled_image_keeps_what_the_cluster_holds():
    """The image of another cluster, laid on the trained GPUs: unchanged at the same size,
    a uniform image stays uniform, and every row keeps its mean (area weights)."""
    rng = np.random.default_rng(0)
    image = rng.random(10 * 7).astype(np.float32)
    assert resample_image(image, 10, 7) is image
    for m in (3, 16, 23):
        out = resample_image(image, 10, m).reshape(10, m)
        assert out.dtype == np.float32
        assert out.mean(1) == pytest.approx(image.reshape(10, 7).mean(1), rel=1e-5)
    flat = resample_image(np.full(10 * 5, 0.25, dtype=np.float32), 10, 8)
    assert flat == pytest.approx(np.full(80, 0.25))
    # Two GPUs on four columns: each covers two; four GPUs on two columns: pairs averaged.
    assert resample_image(np.array([1.0, 0.0], np.float32), 1, 4).tolist() == [1, 1, 0, 0]
    assert resample_image(np.array([1.0, 0.0, 0.0, 0.0], np.float32), 1, 2).tolist() == [0.5, 0]


def test_resampling_skips_only_rows_of_zeros_bit_for_bit():
    """Rows where no GPU is held resample to zeros and the others as the whole product
    does, to the bit (the decisions of a transferred policy must not move)."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        m, n = int(rng.integers(20, 900)), int(rng.integers(5, 200))
        image = np.zeros((10, m), dtype=np.float32)
        rows, cols = int(rng.integers(0, 11)), rng.choice(m, int(rng.integers(1, m)))
        image[:rows, cols] = rng.random((rows, len(cols)), dtype=np.float32)
        dense = np.einsum("hm,mn->hn", image, _resampling(m, n)).astype(np.float32).ravel()
        out = resample_image(image.ravel(), 10, n)
        assert (
            out.dtype == np.float32
            and out.view(np.uint32).tolist() == dense.view(np.uint32).tolist()
        )


def test_server_kinds_are_equal_servers_numbered_by_first_appearance():
    """A kind is a set of servers with equal free resources (0.0 and -0.0 alike) and equal
    type masks, numbered in the order its first server comes."""

    def kinds_by_dict(free, allowed):
        seen: dict[tuple, int] = {}
        columns = allowed.T.tolist() if allowed is not None else None
        return [
            seen.setdefault((tuple(row), tuple(columns[s]) if columns else None), len(seen))
            for s, row in enumerate(free.tolist())
        ]

    rng = np.random.default_rng(6)
    for _ in range(200):
        servers, slots = int(rng.integers(0, 60)), int(rng.integers(1, 6))
        free = rng.choice([0.0, -0.0, 0.5, 1.0, 8.0], size=(servers, 3))
        allowed = rng.random((slots, servers)) < 0.7 if rng.random() < 0.5 else None
        assert _kinds(free, allowed) == kinds_by_dict(free, allowed)
    assert _kinds(np.array([[1.0, 0.0, 2.0], [1.0, -0.0, 2.0], [0.0, 0.0, 0.0]]), None) == [
        0,
        0,
        1,
    ]


def test_plain_runs_break_at_held_gpus_and_at_a_new_kind():
    """The next break after each position, against the backward scan it replaces."""

    def by_scan(held, kinds):
        m = len(held)
        out = [m] * (m + 1)
        for p in range(m - 2, -1, -1):
            differs = held[p + 1] or kinds[p + 1] != kinds[p]
            out[p] = p + 1 if differs else out[p + 1]
        return out

    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(0, 40))
        held = rng.random(m) < 0.2
        kinds = rng.integers(0, 3, m)
        assert next_breaks(held, kinds) == by_scan(held.tolist(), kinds.tolist())
    assert next_breaks(np.array([False, False, True, False]), np.array([0, 0, 0, 1])) == [
        2,
        2,
        3,
        4,
        4,
    ]


def test_transferred_it_decides_as_before_on_its_own_cluster():
    """On the cluster it was trained for, with no more jobs visible than its slots, the
    transferred policy is one batch: the same decisions, bit for bit."""
    jobs = _jobs()
    exact = Simulator(jobs, _policy(prior=2.0), SIM).run()
    policy = _policy(prior=2.0)
    policy.transfer = True
    moved = Simulator(jobs, policy, SIM).run()
    assert moved.jobs.equals(exact.jobs)
    assert moved.events_frame().equals(exact.events_frame())


def test_transferred_it_runs_every_job_on_a_larger_cluster_in_batches():
    """Every job visible on twice the servers: more jobs than the N slots run at once
    (each batch takes what the earlier ones left), no GPU goes to two jobs, and every job
    finishes. Asked to train (sampling, recording) there, it refuses."""
    env = replace(ENV, window=4)
    sim = replace(SIM, cluster=ClusterConfig(n_servers=16), window=None)
    jobs = tuple(
        JobSpec(job_id=i, model="resnet-50", epochs=2.0, arrival_s=0.0, num_workers=1, num_ps=1)
        for i in range(12)
    )
    policy = _policy(prior=6.0, env=env)
    with pytest.raises(ValueError, match="for 8 servers"):
        Simulator(jobs, policy, sim).run()
    policy.transfer = True
    result = Simulator(jobs, policy, sim).run()
    assert result.jobs["finish_s"].null_count() == 0
    allocs = result.events_frame().filter((pl.col("kind") == "alloc") & (pl.col("workers") > 0))
    first = allocs.filter(pl.col("time_s") == 0.0)
    assert first.height == 12 and first["workers"].sum() == 12  # 32 GPUs, 12 jobs of 1
    assert policy.forced == 0
    policy.sample_rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="greedily"):
        Simulator(jobs, policy, sim).run()


class _WalkEveryGpu(GpuDraft):
    """The draft with the GPUs earlier batches took walked one by one, as any GPU whose
    mask is the null slot alone: what the decoder's jump over them must equal."""

    def __init__(self, step, layout, n_slots, closed=None) -> None:
        super().__init__(step, layout, n_slots, closed)
        self.shut, self.closed = self.closed, np.zeros_like(self.closed)

    def plain(self, g: int) -> bool:
        return not self.shut[g] and super().plain(g)

    def mask(self, g: int) -> np.ndarray:
        if self.shut[g]:
            return np.append(np.zeros(self.n_slots, dtype=bool), True)
        return super().mask(g)


def test_batches_jump_over_the_gpus_earlier_batches_took(monkeypatch):
    """Many jobs of several shapes on a larger cluster, decided 4 at a time: skipping the
    GPUs earlier batches took gives the run of walking them one by one, bit for bit."""
    env = replace(ENV, window=4)
    sim = replace(SIM, cluster=ClusterConfig(n_servers=16), window=None)
    models = ["resnet-50", "vgg-16", "cnn-text", "seq2seq", "wlm"]
    jobs = tuple(
        JobSpec(
            job_id=i,
            model=models[i % 5],
            epochs=2.0 + i % 7,
            arrival_s=300.0 * (i // 6),
            num_workers=1 + i % 4,
            num_ps=1 + i % 2,
        )
        for i in range(40)
    )
    runs = []
    for draft in (GpuDraft, _WalkEveryGpu):
        monkeypatch.setattr("models.rltaps.arena.GpuDraft", draft)
        policy = _policy(prior=2.0, env=env)
        policy.transfer = True
        runs.append(Simulator(jobs, policy, sim).run())
    assert runs[0].jobs.equals(runs[1].jobs)
    assert runs[0].events_frame().equals(runs[1].events_frame())


def test_the_policy_refuses_another_network_shape():
    with pytest.raises(ValueError, match="does not read"):
        RLTapsArenaPolicy(ArenaNet(ArenaNetConfig.for_env(ArenaEnvConfig(), 16, 8)), ENV)


# -- the stage, the loader, the plugin -----------------------------------------------------


trained = tiny_trained("arena", train_arena_stage, CFG)


def test_the_stage_registers_an_arena_policy_with_its_curve(trained):
    path, result = trained
    assert result.policy_id.startswith("rl-taps-arena-") and result.parent_policy_id is None
    with connect(path) as con:
        policy = read_frame(
            con, "SELECT * FROM policies WHERE policy_id = ?", [result.policy_id]
        ).row(0, named=True)
        curve = read_frame(
            con,
            "SELECT step, metric FROM learning_curves WHERE policy_id = ? "
            "AND metric = 'val_avg_jct_s' ORDER BY step",
            [result.policy_id],
        )
    assert policy["system"] == "rl-taps-arena"
    assert json.loads(policy["training_workloads"]) == ["tiny/train/000", "tiny/train/001"]
    metrics = json.loads(policy["metrics"])
    assert metrics["stage_config"]["reinforce"]["epochs"] == 2 and metrics["episodes"] == 8
    assert curve["step"].to_list() == [0, 1, 2]
    config = json.loads(policy["config"])
    assert config["env"]["cluster"]["n_servers"] == 8 and config["net"]["n_gpus"] == 16


def test_unchanged_inputs_train_nothing_and_new_ones_resume(trained, tmp_path):
    path, first = trained
    assert_cached(train_arena_stage, path, CFG, first)
    # New traces arrive: the set is re-derived with other jobs; training continues.
    other = tiny_warehouse(tmp_path / "other.duckdb")
    train_arena_stage(other, CFG)
    source = synthetic_stage(other, "dl2-diurnal", DiurnalConfig(n_jobs=60, seed=5))
    derive_stage(other, [source.source_id], DeriveConfig(name="tiny", jobs_per_sequence=10))
    with connect(other) as con:
        ((parent,),) = con.sql("SELECT policy_id FROM policies").fetchall()
    second = train_arena_stage(other, CFG)
    assert second.parent_policy_id == parent and not second.metrics.get("cached")
    # Another network shape cannot continue it: from scratch, with a note.
    third = train_arena_stage(other, resized(CFG, {"reinforce.hidden": 8}))
    assert third.parent_policy_id is None
    assert "not continued" in third.metrics["resume_note"]


def test_same_seed_same_policy_in_another_warehouse(trained, tmp_path):
    assert_reproducible(train_arena_stage, CFG, trained[1], tmp_path)


def test_the_loader_runs_the_policy_beside_the_heuristics(trained):
    path, result = trained
    refs = learned_policies(path, {"rl-taps": "rl-taps-arena"}, SYSTEMS.loaders())
    assert [r.policy_id for r in refs] == [result.policy_id]
    schedulers = ("drf", "sjf+first-fit")
    jobs, workloads, cfg = tiny_set_evaluation(path, refs, schedulers, 1, SIM.cluster)
    tables = evaluate(jobs, workloads, cfg)
    assert tables.runs.select("scheduler", "policy").rows() == [
        ("drf", "drf+load-balancing"),
        ("sjf+first-fit", "sjf+first-fit"),
        ("rl-taps", f"{result.policy_id}+load-balancing"),
    ]
    summary = tables.summary.filter(pl.col("scheduler") == "rl-taps").row(0, named=True)
    assert summary["family"] == "rl-taps" and summary["ratio_to_best_heuristic"] > 0
    # On another cluster it does not apply (its network reads this cluster's image).
    with pytest.raises(NotApplicable, match="trained for"):
        evaluate(jobs, workloads, replace(cfg, cluster=ClusterConfig(n_servers=9)))


def test_the_plugin_seeds_the_arena_on_the_runs_set_and_budgets_it():
    cfg = plugin.seeded(RLTapsRunConfig(), 7, "dl2-synthetic")
    assert cfg.arena.workload_set == "dl2-synthetic" and cfg.arena.seed not in (0, 7)
    smoke = plugin.RLTAPS.configured("smoke", {})
    assert smoke.arena.reinforce.epochs == 1 and smoke.arena.train_sequences == 1
    assert plugin.RLTAPS.configured("default", {"rltaps_arena_epochs": 0}).arena is None
    assert (
        plugin.RLTAPS.configured("default", {"rltaps_arena_epochs": 5}).arena.reinforce.epochs == 5
    )


def test_rltaps_arena_pays_the_evaluations_reallocation_pause():
    # RL-TAPS' arena policy trains and is judged in the evaluation's simulator settings, so
    # a job it pauses pays the same SpeedConfig.realloc_pause_s on resuming as one paused by
    # the preemptive baselines (tiresias-*, srtf-preemptive): the engine charges it.
    assert RLTapsArenaConfig().sim.speed == EvalConfig().speed
    assert EvalConfig().sim_config(0).speed.realloc_pause_s == 30.0
