"""DL2: observation and masks as the networks read them, decision logs, supervised warm-up,
actor-critic fine-tuning (every switch), the policy in the simulator, checkpoints and the
policies registry. Everything runs at a tiny size (a few servers, a handful of jobs)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch

from models.checkpoints import (
    CheckpointError,
    load_checkpoint,
    load_registered,
    register_policy,
)
from models.contracts import DecisionTraces, LearningCurves, Policies
from models.dl2.config import (
    DL2NetConfig,
    FinetuneConfig,
    RecorderConfig,
    WarmupConfig,
    analytical,
    dl2_sim,
    from_dict,
    to_dict,
)
from models.dl2.finetune import corrective_action, finetune
from models.dl2.networks import (
    FastPolicy,
    FastRows,
    PolicyNet,
    PooledValue,
    ValueNet,
    choose,
    fast_policy,
    policy_mask,
)
from models.dl2.policy import (
    DL2Policy,
    load_policy,
    policy_from_checkpoint,
    run_workloads,
    workload_seeds,
)
from models.dl2.recorder import ReplayMismatch, record_runs, replay
from models.dl2.warmup import decode_traces, warmup
from models.heuristics import make_scheduler
from tests.models.stalls import stall_steps
from tests.sim.views import random_snapshot
from tracelib.envs.observation import allocation_mask, encode_allocation
from tracelib.sim import (
    Allocation,
    AllocationBuilder,
    ClusterConfig,
    JobSpec,
    Scheduler,
    dl2_like_frame,
    jobs_from_frame,
    simulate,
)
from tracelib.sim.engine import Simulator
from tracelib.sim.placement import LoadBalancing
from warehouse import ContractViolation, connect
from warehouse.io import validate, write_frame

torch.set_num_threads(1)

WINDOW = 4
NET = DL2NetConfig(window=WINDOW, hidden=(16, 16))
SIM = dl2_sim(n_servers=3, window=WINDOW)


def tiny_workloads(count: int = 3, n_jobs: int = 8, first_seed: int = 0):
    return {
        f"w{s}": jobs_from_frame(
            dl2_like_frame(n_jobs, s, mean_duration_min=40.0, median_duration_min=20.0)
        )
        for s in range(first_seed, first_seed + count)
    }


def train_and_val():
    """Two six-job training workloads and one validation workload with other seeds."""
    return tiny_workloads(count=2, n_jobs=6), tiny_workloads(count=1, n_jobs=6, first_seed=50)


def small_finetune(**settings) -> FinetuneConfig:
    """Fine-tuning at the tiny size: small batches and replay, no progress bar."""
    base = {"net": NET, "sim": SIM, "batch_size": 16, "replay_size": 64, "progress": False}
    return FinetuneConfig(**(base | settings))


DETERMINISTIC_FINETUNE = small_finetune(
    max_updates=8, val_every=4, critic_warmup=2, exploration=False, clip=0.2, kl_init=0.5
)
"""Eight updates with clip and KL on and no exploration: the runs that must repeat bit for bit."""


def finetune_twice_alike(wl, val, cfg, init):
    """Fine-tunes twice from `init` with the same seed, asserts the weights agree bit for bit
    and the metrics but for wall time; returns the first policy."""
    first, _, m1 = finetune(wl, val, cfg, init=init)
    second, _, m2 = finetune(wl, val, cfg, init=init)
    for a, b in zip(first.net.state_dict().values(), second.net.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert m1 == {**m2, "train_wall_s": m1["train_wall_s"]}
    return first


def hand_snapshot():
    """Three jobs submitted at 0 on three servers (6 GPUs): ResNet-50, DSSM (CPU-only
    workers), VGG-16; the first decision's snapshot."""
    jobs = [
        JobSpec(0, "resnet-50", epochs=50.0, arrival_s=0.0),
        JobSpec(1, "dssm", epochs=20.0, arrival_s=0.0),
        JobSpec(2, "vgg-16", epochs=80.0, arrival_s=0.0),
    ]
    sim = Simulator(jobs, make_scheduler("drf"), SIM)
    return sim.session().snapshot


@pytest.fixture(scope="module")
def recorded():
    wl = tiny_workloads()
    frame, results = record_runs(wl, "drf", RecorderConfig(net=NET, sim=SIM))
    return wl, frame, results


@pytest.fixture(scope="module")
def warm(recorded):
    _, frame, _ = recorded
    cfg = WarmupConfig(hidden=NET.hidden, max_epochs=10, patience=10, batch_size=64)
    return warmup(frame, cfg)[0]


# -- observation and masks ----------------------------------------------------------------


def test_observation_and_mask_of_a_hand_built_snapshot():
    snap = hand_snapshot()
    builder = AllocationBuilder(snap)
    obs = encode_allocation(builder, NET.obs)
    assert obs.shape == (WINDOW, NET.n_features)
    models = list(NET.models)
    for row, model in enumerate(["resnet-50", "dssm", "vgg-16"]):
        assert obs[row, models.index(model)] == 1.0 and obs[row, :8].sum() == 1.0
        assert obs[row, -1] == 1.0  # present
    assert not obs[3].any(), "the empty fourth row is all zeros"
    mask = allocation_mask(builder, NET.obs)
    assert mask.shape == (NET.n_actions,) and mask[-1]
    assert mask[:9].all() and not mask[9:12].any(), "no actions for the absent job"
    # Fill the GPUs: 6 GPU workers; then GPU jobs may only take PSs, DSSM still anything.
    for row in (0, 2, 0, 2, 0, 2):
        assert builder.step(row, 0)
    mask = allocation_mask(builder, NET.obs)
    assert not mask[0] and mask[1] and not mask[2], "resnet: no worker, a PS, no pair"
    assert mask[3] and mask[4] and mask[5], "dssm's CPU-only worker still fits"
    net = PolicyNet(NET)
    logits = net.masked_logits(torch.from_numpy(obs.reshape(1, -1)), torch.from_numpy(mask[None]))
    assert torch.isfinite(logits[0, mask]).all() and (logits[0, ~mask] < -1e8).all()


def test_job_aware_exploration_corrects_poor_states():
    snap = hand_snapshot()
    builder = AllocationBuilder(snap)
    mask = allocation_mask(builder, NET.obs)
    assert corrective_action(builder, mask, WINDOW, 10.0) is None
    builder.add(1, workers=2)  # (i) several workers, no PS -> a PS
    mask = allocation_mask(builder, NET.obs)
    assert corrective_action(builder, mask, WINDOW, 10.0) == 3 * 1 + 1
    builder.add(1, ps=1)
    builder.add(0, ps=2)  # (ii) several PSs, no worker -> a worker (job 0 comes first)
    mask = allocation_mask(builder, NET.obs)
    assert corrective_action(builder, mask, WINDOW, 10.0) == 0
    builder.add(0, workers=1)
    builder.add(1, workers=3)  # (iii) 5 workers / 1 PS > 2 -> a PS
    mask = allocation_mask(builder, NET.obs)
    assert corrective_action(builder, mask, WINDOW, 2.0) == 3 * 1 + 1
    assert corrective_action(builder, mask, WINDOW, 10.0) is None


# -- decision logs ------------------------------------------------------------------------


@pytest.mark.parametrize("teacher", ["drf", "fifo", "srtf", "optimus"])
def test_recorder_reproduces_the_teacher_and_leaves_its_run_unchanged(teacher):
    wl = tiny_workloads(count=2)
    # FIFO and SRTF fill one job at a time: not a DL2 policy that hands out bundles first;
    # Optimus gives every job a pair first, and is recorded at its own 600 s interval
    net = NET if teacher in ("drf", "optimus") else replace(NET, bundle_first=False)
    if teacher == "optimus":
        net = replace(net, interval_s=600.0)
    if teacher not in ("drf", "optimus"):
        with pytest.raises(ReplayMismatch, match="bundle_first=False"):
            record_runs(wl, teacher, RecorderConfig(net=NET, sim=SIM, seed=5))
    frame, results = record_runs(wl, teacher, RecorderConfig(net=net, sim=SIM, seed=5))
    validate(frame, DecisionTraces)
    from models.dl2.policy import workload_seeds

    for (wid, jobs), seed in zip(wl.items(), workload_seeds(5, 2), strict=True):
        plain = simulate(jobs, make_scheduler(teacher), replace(SIM, seed=seed))
        assert results[wid].jobs.equals(plain.jobs), "recording changed the teacher's run"
        assert results[wid].events == plain.events
        # the logged actions of each decision rebuild the allocation the teacher made
        logged = frame.filter(pl.col("workload_id") == wid)
        built: dict[tuple[int, int], list[int]] = {}
        for decision, kind, job in logged.select("decision", "kind", "job_index").iter_rows():
            if kind != "stop":
                w, p = built.setdefault((decision, job), [0, 0])
                built[decision, job] = [w + (kind != "ps"), p + (kind != "worker")]
        allocs = plain.events_frame().filter(pl.col("kind") == "alloc", pl.col("workers") > 0)
        times = logged.select("decision", "time_s").unique().iter_rows()
        for decision, t in times:
            at = allocs.filter(pl.col("time_s") == t).select("job_id", "workers", "ps")
            expected = {(decision, j): [w, p] for j, w, p in at.iter_rows()}
            assert {k: v for k, v in built.items() if k[0] == decision} == expected


def test_optimus_teacher_is_replayed_in_its_own_order():
    """The recorded actions of each decision are Optimus' additions in the order it made
    them (pairs by arrival, then tasks by marginal gain), then stop where anything fits."""
    from models.heuristics.optimus import Optimus

    wl = tiny_workloads(count=1, n_jobs=10)
    net = replace(NET, interval_s=600.0)
    cfg = RecorderConfig(teacher="optimus", net=net, sim=SIM, seed=3, order="teacher")
    assert replace(cfg, order="auto").resolved_order() == "rows"  # imitated better
    frame, _ = record_runs(wl, None, cfg)
    (jobs,) = wl.values()
    optimus = Optimus()
    kinds = {(1, 1): 2, (1, 0): 0, (0, 1): 1}
    decisions = 0
    session = Simulator(
        jobs, Scheduler(optimus, LoadBalancing()), replace(SIM, seed=workload_seeds(3, 1)[0])
    ).session()
    while not session.done:
        snap = session.snapshot
        alloc, trail = optimus.allocate_in_order(snap)
        assert alloc == optimus.allocate(snap)
        logged = frame.filter(pl.col("decision") == snap.decision).sort("step")
        actions = logged["action"].to_list()
        expected = [3 * row + kinds[w, p] for row, w, p in trail]
        assert actions[: len(expected)] == expected
        assert actions[len(expected) :] in ([], [3 * WINDOW])  # then stop, if anything fits
        decisions += 1
        session.submit(alloc, LoadBalancing().place(snap, alloc, session.rng))
    assert decisions == frame["decision"].n_unique() > 3
    # "rows" (Optimus' default): one pair per job by arrival, then job by job the other
    # pairs, then job by job the single workers and PSs
    rows, _ = record_runs(wl, None, replace(cfg, order="auto"))
    for _, logged in rows.filter(pl.col("kind") != "stop").group_by("decision"):
        logged = logged.sort("step")
        acted = [a // 3 for a in logged["action"].to_list()]
        first = len(set(acted))
        assert acted[:first] == sorted(set(acted))
        kinds = logged["kind"].to_list()[first:]
        pairs = [r for r, k in zip(acted[first:], kinds, strict=True) if k == "both"]
        singles = [r for r, k in zip(acted[first:], kinds, strict=True) if k != "both"]
        assert kinds == ["both"] * len(pairs) + [k for k in kinds if k != "both"]
        assert pairs == sorted(pairs) and singles == sorted(singles)
    with pytest.raises(ValueError, match="does not give its order"):
        record_runs(wl, "drf", replace(cfg, order="teacher"))


def test_replay_refuses_an_allocation_it_cannot_rebuild():
    snap = hand_snapshot()
    ok = make_scheduler("drf").allocation.allocate(snap)
    assert replay(snap, ok, "share", NET)[-1][5] in ("both", "stop")
    too_much = Allocation.of({0: (5, 5)})  # 5 GPU workers... on 6 GPUs fits; 7 does not
    with pytest.raises(ReplayMismatch):
        replay(snap, Allocation.of({0: (7, 1)}), "share", NET)
    # job 0 takes 5 pairs and stops while the others could still get one: a DL2 policy with
    # bundle_first may not stop there
    with pytest.raises(ReplayMismatch, match="bundle_first=False"):
        replay(snap, too_much, "arrival", NET)
    assert replay(snap, too_much, "arrival", replace(NET, bundle_first=False))[-1][5] == "stop"
    with pytest.raises(ReplayMismatch, match="outside"):
        replay(snap, Allocation.of({99: (1, 1)}), "share", NET)


def test_traces_decode_to_the_encoder_output(recorded):
    _, frame, _ = recorded
    net, data = decode_traces(frame)
    assert net.obs == NET.obs and net.models == NET.models
    first = frame.row(0, named=True)
    n = first["n_jobs"]
    assert np.allclose(data["obs"][0, : n * NET.n_features], first["observation"])
    assert not data["obs"][0, n * NET.n_features :].any()
    assert data["mask"][0, -1] == first["mask"][-1]
    assert data["mask"][np.arange(len(data["action"])), data["action"]].all()


def test_decision_traces_contract_and_ddl_reject_a_masked_action(recorded, tmp_path):
    _, frame, _ = recorded
    bad = frame.head(2).with_columns(
        pl.col("mask").list.eval(pl.element() & False)
    )  # every action masked out
    with pytest.raises(ContractViolation, match="action_is_valid"):
        validate(bad, DecisionTraces)
    import duckdb

    with connect(tmp_path / "wh.duckdb") as con:
        assert write_frame(con, frame, DecisionTraces) == frame.height
        arrow = bad.with_columns(pl.lit("other").alias("run_id")).to_arrow()  # noqa: F841
        with pytest.raises(duckdb.ConstraintException):
            con.execute("INSERT INTO decision_traces BY NAME SELECT * FROM arrow")


# -- supervised warm-up ---------------------------------------------------------------------


def test_warmup_loss_decreases_and_the_policy_imitates(recorded):
    wl, frame, _ = recorded
    cfg = WarmupConfig(
        hidden=(32, 32), max_epochs=12, patience=12, batch_size=64, val_fraction=0.34
    )
    _, metrics, curve = warmup(frame, cfg, val_workloads=list(wl.values())[:1], sim=SIM)
    losses = curve["train_loss"].to_list()
    assert losses[-1] < 0.5 * losses[0]
    assert metrics["val_decisions"] > 0 and metrics["imitation_accuracy"] > 0.5
    assert metrics["teacher_avg_jct_s"] > 0 and metrics["val_avg_jct_s"] > 0
    validate(curve.with_columns(pl.lit("p").alias("policy_id")), LearningCurves)


# -- RL fine-tuning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "switches",
    [
        {},
        {"value_net": False},
        {"exploration": False},
        {"replay": False},
        {"offline": True},
        {"clip": 0.2, "kl_init": 0.5},
    ],
    ids=["actor-critic", "no-value-net", "no-exploration", "no-replay", "offline-rl", "ppo-kl"],
)
def test_finetune_end_to_end(switches, warm):
    wl, val = train_and_val()
    cfg = small_finetune(max_updates=12, val_every=6, critic_warmup=4, **switches)
    init = None if cfg.offline else warm  # OfflineRL starts from scratch
    policy, curve, metrics = finetune(wl, val, cfg, init=init)
    assert metrics["updates"] == 12 and curve["step"].to_list() == [0, 6, 12]
    assert metrics["policy_updates"] == (8 if cfg.value_net else 12)
    assert (curve["value_loss"].drop_nulls().len() > 0) == cfg.value_net
    assert curve["entropy"].drop_nulls().min() >= 0
    validate(curve.with_columns(pl.lit("p").alias("policy_id")), LearningCurves)
    expected = {"value_net": "dl2-without-critic", "exploration": "dl2-without-exploration"}
    expected |= {"replay": "dl2-without-replay", "offline": "offline-rl", "clip": "dl2"}
    assert policy.system == (expected[next(iter(switches))] if switches else "dl2")
    assert replace(cfg, variant="dl2").system == "dl2"  # the pipeline names its variants
    if init is not None:
        assert curve["val_avg_jct_s"].null_count() == 0, "a warm policy never stalls"
        # the result runs in the simulator like any heuristic
        result = run_workloads(policy, list(val.values()), SIM)[0]
        assert result.jobs["finish_s"].null_count() == 0


def test_finetune_goes_on_after_a_stalled_episode(warm, monkeypatch):
    # Deciding at events only, an allocation that leaves nothing running and no arrival to
    # come has no next decision (SimulationStalled): the episode is dropped, training goes on.
    calls = stall_steps(monkeypatch, lambda n: n == 30)
    wl, val = train_and_val()
    cfg = small_finetune(max_updates=6, val_every=3, critic_warmup=2)
    _, _, metrics = finetune(wl, val, cfg, init=warm)
    assert calls["n"] > 30 and metrics["stalled_episodes"] == 1 and metrics["updates"] == 6


def test_finetune_decides_at_the_policy_interval_and_is_deterministic(warm):
    """A policy trained every 600 s is trained, validated and run every 600 s; the same
    seed gives the same weights bit for bit (clip and KL on)."""
    wl, val = train_and_val()
    init = DL2Policy(PolicyNet(replace(warm.cfg, interval_s=600.0)))
    init.net.load_state_dict(warm.net.state_dict())
    first = finetune_twice_alike(wl, val, DETERMINISTIC_FINETUNE, init)
    assert first.interval_s == 600.0 and first.cfg.interval_s == 600.0
    (jobs,) = val.values()
    result = run_workloads(first, [jobs], SIM)[0]
    times = result.events_frame().filter(pl.col("kind") == "alloc")["time_s"].unique()
    assert (times % 600 == 0).all() and (times % 1200 != 0).any()


def test_rows_head_at_every_event_records_warms_up_and_fine_tunes_deterministically():
    """The run's default DL2 (rows head, deciding at every arrival and completion): the
    teacher is recorded at the events, the warm-up learns the rows head and the trigger
    from the recording, fine-tuning and the result decide at events only (never on the
    interval grid between them), and the same seed gives the same weights bit for bit."""
    net = replace(NET, head="rows", trigger="events", interval_s=600.0)
    wl = tiny_workloads(count=2, n_jobs=6)
    frame, results = record_runs(wl, "optimus", RecorderConfig(teacher="optimus", net=net, sim=SIM))
    for workload_id in wl:
        events = results[workload_id].events_frame()
        moments = set(events.filter(pl.col("kind").is_in(["arrive", "finish"]))["time_s"])
        decided = set(frame.filter(pl.col("workload_id") == workload_id)["time_s"])
        assert decided <= moments and len(decided) > 2
    warm, _, _ = warmup(frame, WarmupConfig(hidden=(16, 16), head="rows", max_epochs=3))
    assert warm.cfg == replace(net, hidden=(16, 16)) and warm.trigger == "events"
    val = tiny_workloads(count=1, n_jobs=6, first_seed=50)
    first = finetune_twice_alike(wl, val, DETERMINISTIC_FINETUNE, warm)
    assert first.cfg == warm.cfg and isinstance(first.value_net.body, PooledValue)
    (jobs,) = val.values()
    events = run_workloads(first, [jobs], SIM)[0].events_frame()
    moments = set(events.filter(pl.col("kind").is_in(["arrive", "finish"]))["time_s"])
    decided = set(events.filter(pl.col("kind") == "alloc")["time_s"])
    assert decided <= moments and any(t % 600 for t in decided)


def test_offline_rl_trains_in_the_analytical_simulator():
    cfg = FinetuneConfig(sim=dl2_sim(speed_variation=0.3, slot_noise=0.1), offline=True)
    speed = cfg.train_sim(20).speed
    assert not speed.locality and speed.interference_scale == 0.0
    assert speed.speed_variation == speed.slot_noise == speed.epoch_error == 0.0
    assert analytical(cfg.sim).cluster == cfg.sim.cluster


# -- the policy in the simulator ----------------------------------------------------------


def test_fast_inference_matches_the_network_and_batches_beyond_the_window():
    torch.manual_seed(0)
    net = PolicyNet(NET)
    snap = hand_snapshot()
    builder = AllocationBuilder(snap)
    obs = encode_allocation(builder, NET.obs).reshape(-1)
    fast = FastPolicy(net)
    with torch.no_grad():
        ref = net(torch.from_numpy(obs[None]))[0].numpy()
    assert np.allclose(fast.full_logits(obs), ref, atol=1e-4)
    # the hot path's bound function: the same bits as `logits` (both write one buffer: copy)
    pre, bias = fast.start(obs), fast.masked_bias(np.arange(NET.n_actions) % 2 == 0)
    expected = fast.logits(pre, bias).copy()
    fast.logits(pre * 0, fast.b[-1])  # overwrite the shared buffer
    bound = fast.bound_logits()(pre, bias).copy()
    assert bound.tobytes() == expected.tobytes() and np.isinf(bound[1::2]).all()
    # 10 jobs visible, J = 4: later batches get what earlier ones leave. Always "both" to
    # the first job that can take it: 16 pairs (8 servers) at most, 40 servers in all.
    jobs = [JobSpec(i, "dssm", epochs=10.0, arrival_s=0.0) for i in range(10)]
    big = replace(SIM, cluster=ClusterConfig(n_servers=40), window=None)
    snap = Simulator(jobs, make_scheduler("drf"), big).session().snapshot
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.body[-1].bias[2 : 3 * WINDOW : 3] = 5.0
    alloc = DL2Policy(net).allocate(snap)
    # batch 1 fills its four jobs; batch 2 gives each job its bundle, then job 4 the rest
    assert dict(alloc.counts) == {0: (16, 16), 1: (16, 16), 2: (16, 16), 3: (16, 16),
                                  4: (13, 13), 5: (1, 1), 6: (1, 1), 7: (1, 1)}  # fmt: skip
    # a sampled policy is reproducible from its own seed
    torch.manual_seed(2)
    net = PolicyNet(NET)
    draws = [DL2Policy(net, greedy=False, seed=s).allocate(snap) for s in (3, 3, 4)]
    assert draws[0] == draws[1]


def _stop_bias(net: PolicyNet) -> torch.Tensor:
    """The bias of stop's logit, whatever the head."""
    return net.body.stop.bias if net.cfg.head == "rows" else net.body[-1].bias[-1:]


def test_rows_head_inference_matches_the_network_and_is_shared_by_the_rows():
    """The rows head: numpy inference equals torch's (afresh and one row at a time); the
    same job in another row gets the same three logits, and the stop logit does not depend
    on the rows' order; the value network reads the rows alike."""
    cfg = replace(NET, head="rows", hidden=(16, 8))
    torch.manual_seed(0)
    net, value = PolicyNet(cfg), ValueNet(cfg)
    obs = encode_allocation(AllocationBuilder(hand_snapshot()), cfg.obs)  # (J, F)
    fast = fast_policy(net)
    assert isinstance(fast, FastRows)

    def torch_logits(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net(torch.from_numpy(x.reshape(1, -1)))[0].numpy()

    assert np.allclose(fast.full_logits(obs.reshape(-1)), torch_logits(obs), atol=1e-5)
    swapped = obs[[1, 0, 2, 3]]
    z, z_swapped = torch_logits(obs), torch_logits(swapped)
    assert np.allclose(z_swapped[:3], z[3:6], atol=1e-6) and np.allclose(z_swapped[3:6], z[:3])
    assert np.isclose(z_swapped[-1], z[-1], atol=1e-6)
    with torch.no_grad():
        v = value(torch.from_numpy(np.stack([obs, swapped]).reshape(2, -1)))
    assert torch.allclose(v[0], v[1], atol=1e-6)
    # one row changed: the incremental state equals a fresh pass
    fast.begin(obs)
    changed = obs.copy()
    changed[2, -3:] += 0.25
    fast.set_row(2, changed[2])
    bias = fast.masked_bias(np.arange(cfg.n_actions) % 2 == 0)
    got = fast.logits(bias)
    assert np.allclose(got[::2], torch_logits(changed)[::2], atol=1e-5)
    assert np.isinf(got[1::2]).all()


@pytest.mark.parametrize("head", ["flat", "rows"])
@pytest.mark.parametrize("bundle_first", [True, False])
def test_incremental_greedy_decisions_match_a_fresh_forward_pass_each_step(bundle_first, head):
    """`DL2Policy.fill` (stale masks tried and refreshed, the first layer updated from the
    changed inputs or the acted row rerun, logits masked in place) decides as encoding,
    masking and running the whole network afresh at every step would."""
    jobs = [JobSpec(i, m, epochs=30.0, arrival_s=0.0) for i, m in enumerate(NET.models[:WINDOW])]
    cfg = replace(SIM, cluster=ClusterConfig(n_servers=6))
    snap = Simulator(jobs, make_scheduler("drf"), cfg).session().snapshot
    for seed in range(4):
        torch.manual_seed(seed)
        net = PolicyNet(replace(NET, bundle_first=bundle_first, head=head))
        with torch.no_grad():
            _stop_bias(net)[:] = -2.0  # stop less often: longer decisions
        fast = fast_policy(net)
        builder = AllocationBuilder(snap)
        while True:
            obs = encode_allocation(builder, net.cfg.obs).reshape(-1)
            action = choose(fast.full_logits(obs), policy_mask(builder, net.cfg), None)
            if action == net.cfg.n_actions - 1:
                break
            assert builder.step(*divmod(action, 3))
        assert DL2Policy(net).allocate(snap) == builder.allocation(), seed


def _decide_afresh(net: PolicyNet, snap, rng: np.random.Generator | None) -> Allocation:
    """One decision with the torch network run on a fresh encoding and mask at every step."""
    builder = AllocationBuilder(snap)
    stop = net.cfg.n_actions - 1
    while True:
        obs = torch.from_numpy(encode_allocation(builder, net.cfg.obs).reshape(1, -1))
        with torch.no_grad():
            logits = net(obs)[0].numpy()
        action = choose(logits, policy_mask(builder, net.cfg), rng)
        if action == stop:
            return builder.allocation()
        assert builder.step(*divmod(action, 3))


@pytest.fixture(scope="module")
def large_snapshots():
    """Three snapshots with 40 visible jobs of a DRF run in DL2's large setting (500
    servers: hundreds of steps per decision), one of the same jobs on 64 servers (full)."""
    jobs = jobs_from_frame(dl2_like_frame(200, 7, max_arrivals_per_slot=10))
    out = {}
    for n_servers in (500, 64):
        drf = make_scheduler("drf")
        session = Simulator(jobs, drf, dl2_sim(n_servers, 40)).session()
        snaps = out[n_servers] = []
        while len(snaps) < (3 if n_servers == 500 else 1):
            if len(session.snapshot.jobs) == 40:
                snaps.append(session.snapshot)
            session.submit(*drf.decide(session.snapshot, session.rng))
    return out


@pytest.mark.parametrize("head", ["flat", "rows"])
def test_decisions_at_500_servers_match_the_torch_network(large_snapshots, head):
    """`DL2Policy` (flat: the first layer's changes kept across decisions, the last bias
    carrying the mask; rows: the acted row rerun; a lone valid action taken without
    inference) decides as the torch network run afresh at every step: greedy on 500 and 64
    servers, sampled with the same draws on 500 (where no step is infeasible, so the fresh
    masks never need a second draw). Stop's bias is set so decisions are hundreds of steps
    and end with jobs at different counts: an allocation that every order of steps reaches
    (all jobs at their cap) proves nothing."""
    cfg = DL2NetConfig(window=40, head=head, hidden=(256, 256) if head == "flat" else (128, 128))
    # (seed, greedy, stop's bias, distinct (workers, PSs) at least). A random rows network
    # scores every row alike: greedy, it fills the rows in turn (two counts at most), and
    # its first layer is scaled so the rows' logits differ more.
    cases = {
        "flat": ((1, True, 0.0, 4), (0, False, -1.0, 4), (1, False, -1.0, 4)),
        "rows": ((1, True, 0.3, 2), (0, False, -1.0, 4), (1, False, -1.0, 4)),
    }[head]
    for seed, greedy, stop_bias, distinct in cases:
        torch.manual_seed(seed)
        net = PolicyNet(cfg)
        with torch.no_grad():
            _stop_bias(net)[:] = stop_bias
            if head == "rows":
                net.body.trunk[0].weight.mul_(4.0)
        policy = DL2Policy(net, greedy=greedy, seed=seed)
        rng = None if greedy else np.random.default_rng(seed)
        snaps = large_snapshots[500] + (large_snapshots[64] if greedy else [])
        for snap in snaps:
            alloc = policy.allocate(snap)
            assert alloc == _decide_afresh(net, snap, rng), (seed, greedy)
            assert policy.inferences > 100 and len(set(alloc.counts.values())) >= distinct


def test_no_job_starves_in_a_slot():
    """bundle_first: a network that always prefers stop still gives every job a worker and
    a PS first (in its own order); without the rule it stops at once."""
    snap = hand_snapshot()
    for bundle_first, expected in ((True, {0: (1, 1), 1: (1, 1), 2: (1, 1)}), (False, {})):
        net = PolicyNet(replace(NET, bundle_first=bundle_first))
        with torch.no_grad():
            for p in net.parameters():
                p.zero_()
            net.body[-1].bias[-1] = 10.0  # stop, else the last job's pair, else the others'
            net.body[-1].bias[2 : 3 * WINDOW : 3] = torch.tensor([1.0, 2.0, 3.0, 0.0])
        assert dict(DL2Policy(net).allocate(snap).counts) == expected
        builder = AllocationBuilder(snap)
        mask = policy_mask(builder, net.cfg)
        assert mask[-1] != bundle_first and mask[[2, 5, 8]].all()
        assert not mask[[0, 1, 3, 4, 6, 7]].any() if bundle_first else mask[:9].all()


def test_policy_mismatching_the_catalogue_is_refused():
    cfg = replace(NET, models=tuple(reversed(NET.models)))
    with pytest.raises(ValueError, match="trained for models"):
        DL2Policy(PolicyNet(cfg)).allocate(hand_snapshot())


# -- checkpoints and the registry ---------------------------------------------------------


def test_config_round_trip():
    cfg = FinetuneConfig(net=NET, sim=SIM, offline=True, max_wall_s=3.0)
    assert from_dict(FinetuneConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg
    with pytest.raises(ValueError, match="no fields"):
        from_dict(DL2NetConfig, {**to_dict(NET), "extra": 1})


def test_checkpoint_round_trip_through_the_registry(tmp_path):
    torch.manual_seed(1)
    policy = DL2Policy(PolicyNet(NET), train_config={"stage": "warmup"})
    path = tmp_path / "ckpt" / "warm.pt"
    sha = policy.save(path, meta={"workloads": ["w0"]})
    obs = torch.rand(3, NET.input_dim)
    with connect(tmp_path / "wh.duckdb") as con:
        curve = pl.DataFrame(
            {"phase": ["warmup"], "step": [1], "wall_s": [0.5], "train_loss": [1.0]}
        )
        warm_entry = {
            "system": "dl2",
            "config": policy.checkpoint_config(),
            "checkpoint_path": path,
            "sha256": sha,
            "training_workloads": ["w0"],
        }
        warm_metrics = {"imitation_accuracy": 0.9, "val_avg_jct_s": float("inf")}
        pid = register_policy(con, **warm_entry, metrics=warm_metrics, curve=curve)
        assert register_policy(con, **warm_entry, metrics={}) == pid  # idempotent
        child_path = tmp_path / "ckpt" / "rl.pt"
        child = DL2Policy(PolicyNet(NET), train_config={"stage": "finetune"})
        child_entry = {
            **warm_entry,
            "config": child.checkpoint_config(),
            "checkpoint_path": child_path,
            "sha256": child.save(child_path),
            "metrics": {},
        }
        child_id = register_policy(con, **child_entry, parent_policy_id=pid)
        orphan = {**child_entry, "config": {}, "training_workloads": []}
        with pytest.raises(ValueError, match="not registered"):
            register_policy(con, **orphan, parent_policy_id="dl2-nope", policy_id="x")
        rows = con.sql(
            "SELECT policy_id, parent_policy_id FROM policies ORDER BY created_at"
        ).fetchall()
        assert rows == [(pid, None), (child_id, pid)]
        assert con.sql("SELECT count(*) FROM dl2_learning_curves").fetchall() == [(1,)]
        metrics = con.sql("SELECT metrics FROM policies WHERE policy_id = ?", params=[pid])
        assert json.loads(metrics.fetchall()[0][0]) == {
            "imitation_accuracy": 0.9,
            "val_avg_jct_s": None,
        }
        validate(con.sql("SELECT * FROM policies").pl(), Policies)
        loaded = policy_from_checkpoint(load_registered(con, pid))
    with torch.no_grad():
        assert torch.equal(loaded.net(obs), policy.net(obs))
    assert loaded.train_config == {"stage": "warmup"}
    ckpt = load_checkpoint(path)
    assert ckpt.meta["workloads"] == ["w0"] and ckpt.sha256 == sha


def test_tampered_checkpoint_is_refused(tmp_path):
    policy = DL2Policy(PolicyNet(NET))
    path = tmp_path / "p.pt"
    sha = policy.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="modified or replaced"):
        load_policy(path, sha256=sha)
    with connect(tmp_path / "wh.duckdb") as con:
        with pytest.raises(CheckpointError, match="hashes to"):
            register_policy(
                con,
                system="dl2",
                config={},
                checkpoint_path=path,
                sha256=sha,
                training_workloads=[],
                metrics={},
            )
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="not a loadable"):
        load_policy(path)


def test_config_or_shape_mismatch_is_refused(tmp_path):
    policy = DL2Policy(PolicyNet(NET))
    path = tmp_path / "p.pt"
    sha = policy.save(path)
    other = {"net": to_dict(replace(NET, hidden=(32, 32))), "train": {}}
    with pytest.raises(CheckpointError, match=r"net\.hidden"):
        load_policy(path, sha256=sha, config=other)
    with pytest.raises(CheckpointError, match="holds a 'dl2' policy"):
        load_checkpoint(path, system="harmony")
    # weights that do not fit the config they are saved with
    from models.checkpoints import save_checkpoint

    bad = tmp_path / "bad.pt"
    save_checkpoint(
        bad,
        system="dl2",
        config={"net": to_dict(replace(NET, hidden=(8, 8))), "train": {}},
        state={"policy": policy.net.state_dict()},
    )
    with pytest.raises(CheckpointError, match="do not match its config"):
        load_policy(bad)
    # and the registry's config is what a registered checkpoint is checked against
    with connect(tmp_path / "wh.duckdb") as con:
        pid = register_policy(
            con,
            system="dl2",
            config=other,
            checkpoint_path=path,
            sha256=sha,
            training_workloads=[],
            metrics={},
        )
        with pytest.raises(CheckpointError, match="config does not match"):
            load_registered(con, pid)


def test_scheduler_composition_names():
    policy = DL2Policy(PolicyNet(NET), name="dl2-warm")
    assert Scheduler(policy, LoadBalancing()).name == "dl2-warm+load-balancing"


def _allocate_every_batch(policy: DL2Policy, snap) -> tuple[Allocation, int]:
    """`DL2Policy.allocate` with every batch of J jobs run through `fill`, however full the
    cluster already is: (allocation, inferences)."""
    window, counts, pool, steps = policy.cfg.window, {}, None, 0
    for start in range(0, len(snap.jobs), window):
        builder = AllocationBuilder(snap, snap.jobs[start : start + window], pool=pool)
        steps += policy.fill(builder)
        pool = builder.pool
        counts.update(builder.allocation().counts)
    return Allocation.of(counts), steps


@pytest.mark.parametrize("greedy", [True, False])
def test_batches_left_nothing_to_place_decide_as_fill_would(greedy):
    """Batches of J jobs that nothing fits any more are not run through the network: at
    every decision of a congested run (many more jobs than the window, a small cluster)
    the allocation, the inferences and the sampling stream are those of running `fill` on
    every batch."""
    jobs = jobs_from_frame(dl2_like_frame(60, 4, max_arrivals_per_slot=12))
    net = PolicyNet(NET)
    policy, brute = DL2Policy(net, greedy=greedy, seed=2), DL2Policy(net, greedy=greedy, seed=2)
    placement = LoadBalancing()
    sim = replace(SIM, window=None)  # every job visible: batches of J beyond the first
    session = Simulator(jobs, Scheduler(policy, placement), sim).session()
    crowded = later_given = 0
    while not session.done:
        snap = session.snapshot
        alloc = policy.allocate(snap)
        assert (alloc, policy.inferences) == _allocate_every_batch(brute, snap)
        if not greedy:
            assert policy._rng.bit_generator.state == brute._rng.bit_generator.state
        crowded += len(snap.jobs) > 2 * WINDOW
        later_given += any(alloc.get(j.job_id) != (0, 0) for j in snap.jobs[WINDOW:])
        session.submit(alloc, placement.place(snap, alloc, session.rng))
    # Sampled, the first batch stops early at times and a later batch gets tasks (so a
    # batch skipped while something fits is caught); greedy, this network fills the
    # cluster from the first batch, and every later batch is skipped.
    assert crowded > 5 and later_given > 0 if not greedy else crowded > 5


@pytest.mark.parametrize("head", ["flat", "rows"])
def test_a_run_without_job_histories_decides_as_one_with_them(head):
    """DL2 declares that it reads no job history, so `Simulator.run` gives it views without
    one: the same jobs, events and placements as a run whose views carry every history. A
    session driven from outside keeps them (whoever reads its snapshots may need them)."""
    jobs = jobs_from_frame(dl2_like_frame(30, 7, max_arrivals_per_slot=6))
    sim = replace(SIM, window=None)
    net = PolicyNet(replace(NET, head=head))
    seen: dict[bool, int] = {}

    def run(reads: bool):
        policy = DL2Policy(net, greedy=False, seed=3)
        policy.reads_history = reads
        allocate = policy.allocate

        def watched(snap):
            # the longest history shown, per kind of run
            longest = max((len(j.history) for j in snap.jobs), default=0)
            seen[reads] = max(seen.get(reads, 0), longest)
            return allocate(snap)

        policy.allocate = watched
        return Simulator(jobs, Scheduler(policy, LoadBalancing()), sim).run()

    without, with_ = run(False), run(True)
    assert seen[False] == 0 and seen[True] > 3  # the run without showed none
    assert without.jobs.equals(with_.jobs)
    assert without.events == with_.events
    assert without.placements.equals(with_.placements)
    session = Simulator(jobs, Scheduler(DL2Policy(net), LoadBalancing()), sim).session()
    longest = 0
    while not session.done:
        snap = session.snapshot
        longest = max([longest, *(len(j.history) for j in snap.jobs)])
        session.submit(*session.sim.scheduler.decide(snap, session.rng))
    assert longest > 3


@pytest.mark.parametrize("greedy", [True, False])
def test_stopping_once_no_later_job_can_take_a_task_decides_as_fill_would(greedy):
    """`allocate` stops at a skipped batch when no later job can take a task either
    (`kinds_full`): on queues of jobs of many kinds (demands, caps, GPU types) over small
    clusters, a batch among them that nothing fits, the allocation, the inferences and the
    sampling stream are those of running `fill` on every batch (later batches get tasks)."""
    rng = np.random.default_rng(11)
    net = PolicyNet(NET)
    gap = 0  # decisions where a batch got nothing and a later one got tasks
    huge = {"worker_demand": (64.0, 1e3, 1e6), "ps_demand": (0.0, 1e3, 1e6)}
    for _ in range(40):
        snap = random_snapshot(rng, n_jobs=int(rng.integers(3 * WINDOW, 6 * WINDOW)))
        # the second batch asks for more than any server has: skipped, whatever is left
        views = list(snap.jobs)
        views[WINDOW : 2 * WINDOW] = [replace(v, **huge) for v in views[WINDOW : 2 * WINDOW]]
        snap = replace(snap, jobs=tuple(views))
        seed = int(rng.integers(1000))
        policy = DL2Policy(net, greedy=greedy, seed=seed)
        brute = DL2Policy(net, greedy=greedy, seed=seed)
        alloc = policy.allocate(snap)
        assert (alloc, policy.inferences) == _allocate_every_batch(brute, snap)
        assert policy._rng.bit_generator.state == brute._rng.bit_generator.state
        given = [
            any(alloc.get(j.job_id) != (0, 0) for j in snap.jobs[at : at + WINDOW])
            for at in range(0, len(snap.jobs), WINDOW)
        ]
        gap += any(not g and any(given[k + 1 :]) for k, g in enumerate(given))
    assert gap > 5
