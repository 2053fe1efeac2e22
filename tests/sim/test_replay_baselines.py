"""Replay rules an operator would name: Tiresias 2D-LAS and 2D-Gittins, FGD placement.

Every schedule below is worked out by hand in the comments; `preempt_cost_s` is 0 unless a
test says otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from models.heuristics import REPLAYS
from pipelines.replay import DEFAULT_RULES
from tracelib.sim.replay import (
    GittinsTable,
    ReplayCluster,
    ReplayJobs,
    ReplayRule,
    gittins_index,
    replay,
)


def _jobs(arrival, duration, gpus) -> ReplayJobs:
    return ReplayJobs(
        np.asarray(arrival, dtype=float),
        np.asarray(duration, dtype=float),
        np.asarray(gpus, dtype=float),
    )


def _run(jobs: ReplayJobs, cluster: ReplayCluster, rule: str | ReplayRule, **kw):
    rule = REPLAYS.create(rule) if isinstance(rule, str) else rule
    return replay(jobs, cluster, rule, **kw).jobs


# --- Tiresias 2D-LAS ---------------------------------------------------------------------

# One 4-GPU server. A: t=0, 4 GPUs, 2,000 s (8,000 GPU-s); B: t=1,000, 4 GPUs, 500 s.
LONG_THEN_SHORT = _jobs([0, 1000], [2000, 500], [4, 4])
FOUR = ReplayCluster(1, 4.0)


def test_las_demotes_the_long_job_and_the_short_one_finishes_first():
    # A crosses 3,600 GPU-s (1 GPU-hour) at t=900 (4 GPUs x 900 s): low queue. B arrives
    # at 1,000 in the high queue and preempts A (1,000 s done). B runs 1,000-1,500 (2,000
    # GPU-s: stays high). A resumes at 1,500 with 1,000 s left: 2,500. A waited 500 s after
    # running 1,000: far from 8 x 1,000, no promotion.
    las = _run(LONG_THEN_SHORT, FOUR, "tiresias-las")
    assert las["finish_s"].to_list() == [2500.0, 1500.0]
    assert las["jct_s"].to_list() == [2500.0, 500.0]
    assert las["preemptions"].to_list() == [1, 0]
    # FIFO lets A finish first (B's JCT 1,500); LAS trades 500 s of A's for 1,000 of B's.
    assert _run(LONG_THEN_SHORT, FOUR, "fifo")["jct_s"].to_list() == [2000.0, 1500.0]
    # A resume costs A the restart: 30 s later.
    costly = _run(LONG_THEN_SHORT, FOUR, "tiresias-las", preempt_cost_s=30.0)
    assert costly["finish_s"].to_list() == [2530.0, 1500.0]


def test_las_is_fifo_inside_a_queue():
    # Both in the high queue (threshold 1e9): B, arriving while A runs, never preempts it.
    rule = ReplayRule("las", preemptive=True, thresholds_gpu_s=(1e9,))
    assert _run(LONG_THEN_SHORT, FOUR, rule)["finish_s"].to_list() == [2000.0, 2500.0]


# One 1-GPU server, threshold 100 GPU-s. A: t=0, 1,000 s; B: t=150, 400 s.
STARVING = _jobs([0, 150], [1000, 400], [1, 1])
ONE_GPU = ReplayCluster(1, 1.0)


def test_a_job_waiting_promote_knob_times_its_run_goes_back_to_the_high_queue():
    knob = ReplayRule("las", preemptive=True, thresholds_gpu_s=(100.0,), promote_knob=2.0)
    # t=100: A crosses 100 GPU-s, low queue. t=150: B (high) preempts A, which ran 150 s:
    # A's promotion is due after 2 x 150 s of waiting, at 450. t=250: B crosses 100, low
    # queue; A waits (same queue: FIFO, B running). t=450: A is promoted (service reset),
    # preempts B (low; ran 300 s, promotion due at 450 + 2 x 300 = 1,050) and crosses 100
    # again at 550. t=1,050: B is promoted and preempts A (A ran 600 s since its promotion:
    # 750 of 1,000 done). B has 100 s left: finishes at 1,150, A resumes: 1,150 + 250.
    promoted = _run(STARVING, ONE_GPU, knob)
    assert promoted["finish_s"].to_list() == [1400.0, 1150.0]
    assert promoted["preemptions"].to_list() == [2, 1]
    # Without promotion both end up in the low queue with B running: B runs 150-550
    # unpreempted, A resumes at 550 with 850 s left.
    plain = ReplayRule("las", preemptive=True, thresholds_gpu_s=(100.0,), promote_knob=None)
    unpromoted = _run(STARVING, ONE_GPU, plain)
    assert unpromoted["finish_s"].to_list() == [1400.0, 550.0]
    assert unpromoted["preemptions"].to_list() == [1, 0]


# --- Tiresias 2D-Gittins -----------------------------------------------------------------

# One 1-GPU server. A: t=0, 1,000 s; B: t=150, 100 s; C: t=160, 100 s. Recorded services
# (1 GPU each): {100, 100, 1,000}, all under the 3,600 GPU-s threshold (one queue).
GITTINS_JOBS = _jobs([0, 150, 160], [1000, 100, 100], [1, 1, 1])
SERVICES = np.array([100.0, 100.0, 1000.0])


def test_gittins_index_by_hand():
    # G(a) = max over the sizes t above a of P(S <= t | S > a) / E[min(S, t) - a | S > a].
    # a = 0: t = 100: (2/3) / ((100 + 100 + 100) / 3) = 1/150; t = 1,000: 1 / 400.
    assert gittins_index(SERVICES, 0.0) == pytest.approx(1 / 150)
    # a = 10: t = 100: (2/3) / ((90 + 90 + 90) / 3) = 1/135: nearer a likely end, higher.
    assert gittins_index(SERVICES, 10.0) == pytest.approx(1 / 135)
    # a = 150: only 1,000 is left: 1 / 850. Past every size: 0.
    assert gittins_index(SERVICES, 150.0) == pytest.approx(1 / 850)
    assert gittins_index(SERVICES, 1000.0) == 0.0
    table = GittinsTable(SERVICES)
    attained = np.array([0.0, 10.0, 50.0, 150.0, 999.0, 1000.0])
    exact = [gittins_index(SERVICES, a) for a in attained]
    np.testing.assert_allclose(table(attained), exact, rtol=1e-9)
    assert [table.at(float(a)) for a in attained] == table(attained).tolist()


def test_gittins_preempts_a_job_past_its_likely_size_but_not_one_near_it():
    # t=150: A has 150 GPU-s, index 1/850; B's (0 served) is 1/150: B preempts A. t=160: C
    # (1/150) does not preempt B (10 served: 1/135). t=250: B ends; C (1/150) beats A
    # (1/850): C runs 250-350; A resumes with 850 s left: 1,200.
    gittins = _run(GITTINS_JOBS, ONE_GPU, "tiresias-gittins")
    assert gittins["finish_s"].to_list() == [1200.0, 250.0, 350.0]
    assert gittins["jct_s"].to_list() == [1200.0, 100.0, 190.0]
    assert gittins["preemptions"].to_list() == [1, 0, 0]
    # LAS with everyone in one queue is FIFO here: A, B, C in turn.
    las = _run(GITTINS_JOBS, ONE_GPU, "tiresias-las")
    assert las["finish_s"].to_list() == [1000.0, 1100.0, 1200.0]


# --- FGD placement ----------------------------------------------------------------------

# Two servers of 2 GPUs. Q: t=0, half a GPU, 1,000 s; Y: t=0, 1 GPU, 10 s; P: t=0, 1 GPU,
# 1,000 s; Z: t=20, half a GPU, 100 s; W1, W2: t=30, 1 GPU, 100 s each. Request mix: half
# a GPU 2/6, one GPU 4/6.
PACKING = _jobs([0, 0, 0, 20, 30, 30], [1000, 10, 1000, 100, 100, 100], [0.5, 1, 1, 0.5, 1, 1])
TWO_BY_TWO = ReplayCluster(2, 2.0)


def test_fgd_packs_a_share_where_best_fit_breaks_a_whole_gpu():
    # Both rules: Q on server 0 (GPU 0), Y on server 0's whole GPU 1 (FGD: no change in
    # fragmentation either way, then the fuller server), P on server 1. t=10: Y ends.
    # Server 0: GPU 0 half free, GPU 1 free (1.5 free); server 1: one GPU free (1 free).
    # t=20, Z (half): best fit takes the fuller server 1 and splits its free GPU. FGD:
    # on server 0's half GPU a 1-GPU request loses its unusable half: fragmentation
    # -1/2 x 4/6; on server 1 the free GPU becomes half-free: +1/2 x 4/6; so server 0.
    # t=30: best fit has one whole free GPU (W1 there) and W2 waits for Z's end at 120;
    # FGD has two, one per server: W1 and W2 start at once.
    fifo = _run(PACKING, TWO_BY_TWO, "fifo")
    fgd = _run(PACKING, TWO_BY_TWO, "fifo-fgd")
    assert fifo["finish_s"].to_list() == [1000.0, 10.0, 1000.0, 120.0, 130.0, 220.0]
    assert fgd["finish_s"].to_list() == [1000.0, 10.0, 1000.0, 120.0, 130.0, 130.0]


def test_fgd_gives_a_share_one_gpu_and_whole_requests_whole_gpus():
    # One server of 2 GPUs; mix: halves 3/4, two whole GPUs (1.5 rounds up) 1/4. Three
    # halves: the first takes GPU 0; the second, on GPU 0 or GPU 1, leaves 1 GPU of
    # fragments for the 2-GPU request either way (a tie: the lower GPU, 0); the third takes
    # half of GPU 1.
    # Then a 2-GPU job needs both GPUs wholly free: it waits for every half to end (t=20),
    # where best fit, counting free GPUs only, would start it at 10 beside one half.
    jobs = _jobs([0, 0, 0, 1], [10, 10, 20, 5], [0.5, 0.5, 0.5, 1.5])
    server = ReplayCluster(1, 2.0)
    fgd = _run(jobs, server, "fifo-fgd")
    assert fgd["finish_s"].to_list() == [10.0, 10.0, 20.0, 25.0]
    assert _run(jobs, server, "fifo")["finish_s"].to_list() == [10.0, 10.0, 20.0, 15.0]


# --- All of them ------------------------------------------------------------------------


def _mixed(n: int, seed: int) -> ReplayJobs:
    rng = np.random.default_rng(seed)
    return ReplayJobs(
        np.sort(rng.uniform(0, 2e4, n)),
        rng.lognormal(6, 1.5, n) + 1,
        rng.choice([0.25, 0.5, 1.0, 2, 4, 8, 12], n),
        users=rng.integers(0, 5, n),
    )


@pytest.mark.parametrize("name", ["tiresias-las", "tiresias-gittins", "fifo-fgd"])
def test_same_input_same_schedule_and_every_job_served(name):
    jobs = _mixed(300, 5)
    cluster = ReplayCluster(3, 8.0)
    a = _run(jobs, cluster, name, preempt_cost_s=30.0)
    b = _run(jobs, cluster, name, preempt_cost_s=30.0)
    assert a.equals(b)
    assert (a["start_s"] >= a["arrival_s"]).all()
    assert (a["finish_s"] - a["start_s"] >= a["ideal_s"] - 1e-6).all()
    # The GPUs held over time never exceed the cluster's: gpu_time_s over the makespan.
    span = float(a["finish_s"].max() - a["arrival_s"].min())
    assert a["gpu_time_s"].sum() <= cluster.total_gpus * span + 1e-6


def test_tiresias_beats_fifo_on_mean_jct_without_reading_durations():
    # Heavy-tailed sizes on a busy cluster: attained-service ranking lets short jobs by.
    jobs = _mixed(300, 7)
    cluster = ReplayCluster(3, 8.0)
    fifo = _run(jobs, cluster, "fifo")["jct_s"].mean()
    for name in ("tiresias-las", "tiresias-gittins"):
        assert _run(jobs, cluster, name, preempt_cost_s=30.0)["jct_s"].mean() < fifo


def test_the_rules_are_registered_and_run_by_default():
    for name in ("fifo", "fifo-backfill", "sjf", "srtf", "tiresias-las", "tiresias-gittins"):
        assert name in REPLAYS.names()
    assert set(DEFAULT_RULES) <= set(REPLAYS.names())
    assert {"tiresias-las", "fifo-fgd"} <= set(DEFAULT_RULES)


def test_rules_reject_impossible_settings():
    with pytest.raises(ValueError, match="ascending"):
        ReplayRule("las", thresholds_gpu_s=(100.0, 50.0))
    with pytest.raises(ValueError, match="promote_knob"):
        ReplayRule("las", promote_knob=0.0)
    with pytest.raises(ValueError, match="non-preemptive"):
        ReplayRule("las", preemptive=True, placement="fgd")
    with pytest.raises(ValueError, match="placement must be"):
        ReplayRule("arrival", placement="worst-fit")
    with pytest.raises(ValueError, match="whole number of GPUs"):
        replay(_jobs([0], [1], [1]), ReplayCluster(1, 1.5), REPLAYS.create("fifo-fgd"))


def test_gpu_best_fit_is_fgds_baseline_under_the_same_gpu_bookkeeping():
    # PACKING again: at t=20 best fit GPU by GPU also takes the fuller server 1 for Z (its
    # free GPU split in two), so W2 waits for Z as under `fifo`.
    gpu_best = _run(PACKING, TWO_BY_TWO, "fifo-gpu-best-fit")
    assert gpu_best["finish_s"].to_list() == [1000.0, 10.0, 1000.0, 120.0, 130.0, 220.0]
    # Pooled free GPUs host a whole-GPU job on halves of two GPUs; GPU by GPU they cannot.
    # One server of 2 GPUs: halves A (10 s), B (100 s), C (100 s) at t=0, then D: 1 GPU,
    # 5 s, at t=1.
    jobs = _jobs([0, 0, 0, 1], [10, 100, 100, 5], [0.5, 0.5, 0.5, 1])
    server = ReplayCluster(1, 2.0)
    # GPU by GPU: A, then B on the fuller GPU 0, C on half of GPU 1. At 10 A ends: half of
    # each GPU free, one GPU in all but no whole one: D waits for B (100): 105.
    assert _run(jobs, server, "fifo-gpu-best-fit")["finish_s"].to_list() == [
        10.0,
        100.0,
        100.0,
        105.0,
    ]
    # Pooled: 0.5 free at first, 1 free at 10: D runs 10-15.
    assert _run(jobs, server, "fifo")["finish_s"].to_list() == [10.0, 100.0, 100.0, 15.0]


@pytest.mark.parametrize("name", sorted(REPLAYS.names()))
def test_skipping_settled_instants_changes_no_schedule(name):
    """An overloaded cluster (most event instants change nothing a decision reads): every
    rule's schedule is the one deciding at every instant gives, bit for bit."""
    jobs = _mixed(400, 11)
    cluster = ReplayCluster(2, 8.0)
    rule = REPLAYS.create(name)
    fast = replay(jobs, cluster, rule, preempt_cost_s=30.0)
    slow = replay(jobs, cluster, rule, preempt_cost_s=30.0, skip_settled=False)
    assert fast.jobs.equals(slow.jobs)
    assert fast.jobs["preemptions"].sum() == slow.jobs["preemptions"].sum()
