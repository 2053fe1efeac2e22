"""Harmony: reward predictor, Gavel adapter, placement masks and rules, a tiny DRL run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch

from models.checkpoints import load_checkpoint
from models.harmony.config import HarmonyEvalConfig
from models.harmony.evaluate import harmony_tables, observed_samples
from models.harmony.placement import (
    MASKED,
    RULES,
    HarmonyNetConfig,
    HarmonyPolicy,
    PolicyNet,
    RulePlacement,
    policy_from_checkpoint,
    predicted_reward,
)
from models.harmony.reward import (
    ESTIMATORS,
    RewardNet,
    RewardTrainConfig,
    SetArrays,
    _take,
    compare_estimators,
    encode_sets,
    fit_reward_model,
    gbr_features,
    net_config_from_dict,
    predictor_from_checkpoint,
    set_arrays,
)
from models.harmony.train import (
    PlacementTrainConfig,
    _interval,
    _Worker,
    train_placement,
)
from tests.sim.views import queue_draft
from tracelib.contracts import InterferenceSamples
from tracelib.envs.environments import PlacementEnv, PlacementEnvConfig
from tracelib.gavel import GavelConfig, gavel_samples, read_gavel
from tracelib.interference import InterferenceConfig, collect_samples
from tracelib.scenarios.harmony import ArrivalConfig, harmony_sim, sequence, sequences
from tracelib.sim import Simulator
from warehouse.io import validate

GAVEL = Path(__file__).parents[1] / "data" / "gavel" / "throughputs_sample.json"
torch.set_num_threads(1)
TINY = RewardTrainConfig(epochs=30, hidden=(64, 64, 32), augment=False)


@pytest.fixture(scope="module")
def samples() -> pl.DataFrame:
    return collect_samples(InterferenceConfig(n_samples=600, seed=3))


@pytest.fixture(scope="module")
def fitted(samples):
    return fit_reward_model(samples, TINY)


def test_set_arrays_keep_every_job_and_its_placement(samples):
    arrays = set_arrays(samples)
    assert arrays.present.sum() == samples.height
    row = samples.row(0, named=True)
    s, n = np.argwhere(arrays.row == 0)[0]
    assert arrays.types[s, n] == row["type_index"]
    assert arrays.d[s, :, 2 * n].tolist() == [float(v) for v in eval(row["worker_servers"])]
    assert arrays.d[s, :, 2 * n + 1].sum() == row["ps"]


@pytest.mark.parametrize(
    ("pair_embed", "row_embed"), [(0, 0), (0, 16), (16, 0)], ids=["flat", "rows", "pairs"]
)
def test_predictor_training_reduces_error(samples, pair_embed, row_embed):
    cfg = replace(TINY, pair_embed=pair_embed, row_embed=row_embed)
    fitted = fit_reward_model(samples, cfg)
    first, last = fitted.curve["train_loss"][0], fitted.curve["train_loss"][-1]
    assert last < 0.8 * first, (first, last)
    untrained = fit_reward_model(samples, replace(cfg, epochs=0))
    assert fitted.metrics["train_rel_error"] < 0.75 * untrained.metrics["train_rel_error"]


def test_predictor_is_deterministic_and_round_trips(samples, fitted, tmp_path):
    again = fit_reward_model(samples, TINY)
    assert np.array_equal(
        fitted.predictor.predict_frame(samples), again.predictor.predict_frame(samples)
    )
    sha = fitted.predictor.save(tmp_path / "r.pt")
    loaded = predictor_from_checkpoint(load_checkpoint(tmp_path / "r.pt", sha256=sha))
    assert np.allclose(loaded.predict_frame(samples), fitted.predictor.predict_frame(samples))


def test_pair_network_is_equivariant_to_job_order_and_server_order(samples, fitted):
    predictor = fitted.predictor
    assert predictor.cfg.pair_embed > 0  # the default architecture
    arrays = set_arrays(samples, predictor.cfg.max_jobs)
    a = _take(arrays, np.arange(8))  # (8 sets, N jobs, M servers), empty slots included
    n, m = a.types.shape[1], a.d.shape[1]
    rng = np.random.default_rng(0)
    jobs, servers = rng.permutation(n), rng.permutation(m)
    cols = np.stack([2 * jobs, 2 * jobs + 1], axis=1).reshape(-1)  # d's (worker, PS) pairs
    b = SetArrays(
        a.types[:, jobs],
        a.workers[:, jobs],
        a.ps[:, jobs],
        a.d[:, servers][:, :, cols],
        a.speed[:, jobs],
        a.isolated[:, jobs],
        a.row[:, jobs],
    )
    with torch.no_grad():
        out_a = predictor.net(torch.from_numpy(encode_sets(a, predictor.cfg)))  # (8, N)
        out_b = predictor.net(torch.from_numpy(encode_sets(b, predictor.cfg)))
    assert torch.allclose(out_b, out_a[:, jobs], atol=1e-5)
    assert not torch.allclose(out_a, out_a[:, rng.permutation(n)], atol=1e-3)  # not constant
    assert np.allclose(predictor._speeds(b), predictor._speeds(a)[:, jobs], rtol=1e-5)


def test_old_checkpoint_configs_read_as_before():
    raw = {
        "type_names": ["a", "b"],
        "max_jobs": 4,
        "n_servers": 2,
        "speed_scale": [1.0, 2.0],
        "hidden": [8, 8],
        "batch_norm": True,
        "row_embed": 16,
    }
    cfg = net_config_from_dict(raw)
    assert cfg.row_embed == 16 and cfg.pair_embed == 0
    assert not hasattr(RewardNet(cfg), "pair")
    with pytest.raises(ValueError):
        net_config_from_dict({**raw, "pair_embed": 8})  # one architecture at a time


def test_comparison_reports_every_estimator_per_split_and_type(samples, fitted):
    table = compare_estimators(samples, fitted)
    overall = table.filter(pl.col("job_type") == "all")
    assert set(overall["estimator"]) == {"harmony-nn", "lif-line", "lif-quad", "gradient-boosting"}
    assert set(overall["split"]) == {"train", "test"}
    test_n = overall.filter(pl.col("split") == "test")["n_samples"].unique().to_list()
    assert test_n == [int(fitted.test_mask.sum())]
    assert set(table["job_type"]) - {"all"} <= set(samples["model"])


def test_gradient_boosting_is_the_same_model_with_one_thread(samples, fitted):
    # compare_estimators fits it on one OpenMP thread (threads waiting on each other cost
    # 30x the CPU on a busy machine); the model must not depend on the count.
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    x = gbr_features(samples, len(fitted.predictor.cfg.type_names))
    y = np.log(samples["measured_speed"].to_numpy())

    def predictions(threads: int) -> np.ndarray:
        with threadpool_limits(limits=threads, user_api="openmp"):
            model = HistGradientBoostingRegressor(max_iter=50, random_state=0).fit(x, y)
            return model.predict(x)

    assert np.array_equal(predictions(1), predictions(2))


def test_predictor_scores_a_simulator_placement(fitted):
    jobs = sequence(ArrivalConfig(n_jobs=6), seed=1)
    sim = harmony_sim()
    res = Simulator(jobs, RulePlacement("load-balancing"), sim, speed_model=fitted.predictor).run()
    assert res.jobs["finish_s"].is_not_null().all()


def test_gavel_adapter_reads_pairs_once_and_skips_those_that_do_not_fit():
    frame = validate(gavel_samples(GAVEL), InterferenceSamples)
    assert set(frame["source"]) == {"gavel:k80", "gavel:v100"}
    v100 = frame.filter(pl.col("source") == "gavel:v100")
    # 3 self pairs + 2 of the 3 cross pairs (ResNet-18 with Transformer is 0: out of memory).
    assert v100["sample_set"].n_unique() == 5 and v100.height == 10
    pair = v100.filter(
        pl.col("sample_set").is_in(
            v100.filter(pl.col("model") == "LM (batch size 20)")["sample_set"].implode()
        )
        & (pl.col("model") == "ResNet-18 (batch size 32)")
    )
    assert pair["isolated_speed"].to_list() == [100.0]
    assert pair["measured_speed"].to_list() == [70.0]
    assert (v100["slowdown"] > 0).all()
    only = gavel_samples(GAVEL, GavelConfig(gpu_types=("k80",)))
    assert set(only["source"]) == {"gavel:k80"}
    with pytest.raises(ValueError, match="no GPU type"):
        gavel_samples(GAVEL, GavelConfig(gpu_types=("a100",)))


def test_predictor_fits_gavel_samples():
    frame = gavel_samples(GAVEL)
    part = frame.filter(pl.col("source") == "gavel:v100")
    fit = fit_reward_model(part, RewardTrainConfig(epochs=5, hidden=(16, 16, 8), test_fraction=0.2))
    table = compare_estimators(part, fit, lif=False)
    assert set(table["estimator"]) == {"harmony-nn", "gradient-boosting"}
    # LIF on a usage profile measured on the training pairs (Gavel's types have no
    # catalogue profile), on the same split as the others.
    table = compare_estimators(part, fit, lif_profile="measured")
    assert set(table["estimator"]) == set(ESTIMATORS)
    test = table.filter((pl.col("split") == "test") & (pl.col("job_type") == "all"))
    assert test["n_samples"].n_unique() == 1 and test["mean_relative_error"].is_finite().all()


def test_gavel_unconsolidated_keys_are_read_when_they_have_pairs_of_their_own(tmp_path):
    # The sample file is shaped like Gavel's published one: v100_unconsolidated repeats
    # v100's 1-GPU pairs and differs only in a 2-GPU job's throughput alone (no pair fits).
    read = read_gavel(GAVEL)
    assert read.gpu_types == ("k80", "v100")
    assert set(read.skipped) == {"v100_unconsolidated"}
    assert "5 fitting pairs repeat v100's" in read.skipped["v100_unconsolidated"]
    # A spread pair measured on its own is read: one worker per server, sharing them.
    data = json.loads(GAVEL.read_text())
    two = "('ResNet-18 (batch size 32)', 2)"
    data["v100_unconsolidated"][two] = {"null": 62.0, two: [40.0, 40.0]}
    data["k80"] = {two: {"null": 1.0, two: [0.0, 0.0]}}
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(data))
    read = read_gavel(path)
    assert read.gpu_types == ("v100", "v100_unconsolidated")
    assert read.skipped == {"k80": "no pair fits: all 1 pairs have a throughput of 0"}
    spread = validate(read.samples, InterferenceSamples).filter(
        pl.col("source") == "gavel:v100_unconsolidated"
    )
    assert spread.height == 2 and spread["worker_servers"].to_list() == ["[1, 1]"] * 2
    assert (
        spread["n_servers"].to_list() == [2, 2]
        and spread["slowdown"].to_list() == [1 - 40 / 62] * 2
    )


def _over_capacity(env: PlacementEnv) -> bool:
    draft = env.draft
    return bool((draft.free < -1e-9).any())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masks_never_allow_an_over_capacity_placement(seed):
    rng = np.random.default_rng(seed)
    jobs = sequences(ArrivalConfig(n_jobs=12, uniform_mean=6.0), 1, seed)[0]
    env = PlacementEnv([jobs], PlacementEnvConfig(sim=harmony_sim()))
    env.reset(seed=seed)
    m = env.n_servers
    for _ in range(400):
        if env.session.done:
            break
        mask = env.action_masks()
        draft = env.draft
        for a in np.flatnonzero(mask):
            i, role, server = (*divmod(int(a) // m, 2), int(a) % m)
            assert (draft.free[server] + 1e-9 >= draft.demand(i, role)).all()
        # Act at random among the allowed actions (the adversary of the mask).
        _, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        assert not info["invalid_action"]
        if env.draft is not None:
            assert not _over_capacity(env)
        if term or trunc:
            break


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_places_whole_jobs_within_capacity(rule):
    jobs = sequence(ArrivalConfig(n_jobs=10, uniform_mean=5.0), seed=4)
    res = Simulator(jobs, RulePlacement(rule), harmony_sim()).run()
    assert res.jobs["finish_s"].is_not_null().all()
    # A job runs with exactly its requested workers and PSs, never a truncated part.
    want = {j.job_id: (j.num_workers, j.num_ps) for j in jobs}
    got = res.placements.group_by("job_id").agg(
        pl.col("workers").sum(), pl.col("ps").sum(), pl.col("decision").n_unique().alias("n")
    )
    for job_id, w, p, n in got.iter_rows():
        assert (w // n, p // n) == want[job_id]


def test_tiny_drl_run_end_to_end(fitted, tmp_path):
    train = sequences(ArrivalConfig(n_jobs=8), 2, 1)
    val = sequences(ArrivalConfig(n_jobs=8), 1, 2)
    cfg = PlacementTrainConfig(
        net=HarmonyNetConfig(hidden=(32, 32, 16), row_embed=8),
        updates=6,
        val_every=3,
        n_workers=2,
    )
    policy, curve, metrics = train_placement(train, val, fitted.predictor, cfg)
    assert curve.height == 2 and curve["val_avg_jct_s"].is_not_null().all()
    assert metrics["samples"] > 0
    sha = policy.save(tmp_path / "h.pt")
    loaded = policy_from_checkpoint(load_checkpoint(tmp_path / "h.pt", sha256=sha))
    again, _, _ = train_placement(train, val, fitted.predictor, cfg)
    for a, b in zip(policy.net.parameters(), again.net.parameters(), strict=True):
        assert torch.equal(a, b)
    tables, results = harmony_tables(
        {"harmony": (loaded, None)},
        HarmonyEvalConfig(
            n_sequences=2, arrivals=ArrivalConfig(n_jobs=6), baselines=("load-balancing",)
        ),
        "harmony-test",
    )
    summary = tables.summary
    assert summary.height == 3 * 2 and (summary["avg_jct_s"] > 0).all()
    assert tables.runs.height == 3 * 2 * 2 and len(results["harmony"]) == 3 * 2
    online = validate(
        observed_samples(results["harmony"], "harmony-online", 0), InterferenceSamples
    )
    assert online.height > 0


def test_ablation_switches_name_their_systems():
    base = PlacementTrainConfig()
    assert base.system == "harmony"
    assert replace(base, value_net=False).system == "harmony-without-critic"
    assert replace(base, exploration=False).system == "harmony-without-exploration"
    assert replace(base, replay=False).system == "harmony-without-replay"


def _permuted(obs: torch.Tensor, cfg: HarmonyNetConfig, jobs, servers) -> torch.Tensor:
    """The observation with its job rows and server rows reordered (d's columns too)."""
    n, m, fj, fs = cfg.window, cfg.n_servers, cfg.job_features, cfg.server_features
    job_rows = obs[:, : n * fj].reshape(-1, n, fj)[:, jobs]
    server_rows = obs[:, n * fj :].reshape(-1, m, fs)[:, servers]
    base = fs - 2 * n
    d = server_rows[:, :, base:].reshape(-1, m, n, 2)[:, :, jobs]
    server_rows = torch.cat([server_rows[:, :, :base], d.flatten(2)], dim=2)
    return torch.cat([job_rows.flatten(1), server_rows.flatten(1)], dim=1)


def test_pair_head_scores_each_action_from_its_own_job_and_server():
    cfg = HarmonyNetConfig(window=4, n_servers=3, hidden=(16, 16), row_embed=8)
    torch.manual_seed(0)
    net = PolicyNet(cfg)
    obs = torch.rand(2, cfg.obs_dim)
    jobs, servers = torch.tensor([2, 0, 3, 1]), torch.tensor([1, 2, 0])
    with torch.no_grad():
        logits = net.body(obs).reshape(2, 4, 2, 3)  # (B, job, role, server)
        moved = net.body(_permuted(obs, cfg, jobs, servers)).reshape(2, 4, 2, 3)
    # Reordering rows reorders the actions the same way: the logit of job i's task on
    # server m follows job i and server m wherever they are in the observation.
    torch.testing.assert_close(moved, logits[:, jobs][:, :, :, servers])
    flat = PolicyNet(replace(cfg, head="flat"))
    with torch.no_grad():
        f = flat.body(obs).reshape(2, 4, 2, 3)
        f_moved = flat.body(_permuted(obs, cfg, jobs, servers)).reshape(2, 4, 2, 3)
    assert not torch.allclose(f_moved, f[:, jobs][:, :, :, servers])
    with pytest.raises(ValueError, match="head"):
        HarmonyNetConfig(head="attention")


def test_checkpoints_from_before_the_pair_head_load_as_flat(tmp_path):
    cfg = HarmonyNetConfig(hidden=(8, 8), row_embed=4, head="flat", job_placement=False)
    policy = HarmonyPolicy(PolicyNet(cfg))
    sha = policy.save(tmp_path / "old.pt")
    ckpt = load_checkpoint(tmp_path / "old.pt", sha256=sha)
    for key in ("head", "job_placement"):
        del ckpt.config["net"][key]
    assert policy_from_checkpoint(ckpt).cfg == cfg


@pytest.mark.parametrize("credit", ["interval", "marginal", "marginal+rest"])
def test_an_intervals_credit_adds_up(fitted, credit):
    train = sequences(ArrivalConfig(n_jobs=12), 1, 5)
    cfg = PlacementTrainConfig(
        net=HarmonyNetConfig(hidden=(16, 16), row_embed=8), credit=credit, exploration=False
    )
    env = PlacementEnv(
        train,
        PlacementEnvConfig(obs=cfg.net.obs_config(), sim=cfg.sim),
        speed_model=fitted.predictor,
    )
    obs, info = env.reset(seed=0)
    worker = _Worker(env, obs, info["decision"])
    torch.manual_seed(0)
    net = PolicyNet(cfg.net)
    draft = env.draft
    start = predicted_reward(draft, fitted.predictor)
    samples, reward = _interval(
        worker, net, fitted.predictor, 0.0, cfg, torch.Generator(), np.random.default_rng(0), 1
    )
    assert len(samples) > 1
    credits = [s[3] for s in samples]
    if credit == "interval":
        assert credits == [reward] * len(samples)
    elif credit == "marginal":
        # The inferences share the predicted reward of the placement they built.
        end = predicted_reward(draft, fitted.predictor)
        assert sum(credits) == pytest.approx((end - start) * cfg.sim.slot_s)
    else:
        assert sum(credits) == pytest.approx(reward)
    # Without exploration the behaviour probability is the policy's own.
    for o, mask, a, *_, mu in samples:
        with torch.no_grad():
            pi = net.distribution(torch.from_numpy(o)[None], torch.from_numpy(mask)[None])
        assert mu == pytest.approx(float(pi.probs[0, a]), rel=1e-5)


def test_policy_masks_invalid_actions():
    cfg = HarmonyNetConfig(hidden=(8, 8, 8), row_embed=4)
    net = PolicyNet(cfg)
    obs = torch.zeros(1, cfg.obs_dim)
    mask = torch.zeros(1, cfg.n_actions, dtype=torch.bool)
    mask[0, 5] = True
    with torch.no_grad():
        assert float(net.distribution(obs, mask).probs[0, 5]) == pytest.approx(1.0)
    assert HarmonyPolicy(net).cfg == cfg


def test_greedy_reference_with_the_true_model_beats_load_balancing():
    from models.harmony.placement import GreedySpeedPlacement
    from tracelib.sim.speed import SpeedModel

    tables, _ = harmony_tables(
        {"greedy": (GreedySpeedPlacement(SpeedModel()), None)},
        HarmonyEvalConfig(
            patterns=("poisson",),
            n_sequences=2,
            arrivals=ArrivalConfig(n_jobs=12),
            baselines=("load-balancing",),
        ),
        "harmony-test",
    )
    jct = dict(tables.summary.select("scheduler", "avg_jct_s").rows())
    assert jct["greedy"] < jct["load-balancing"]


def test_greedy_inference_scores_each_distinct_pair_once_and_equals_the_masked_logits_bit_for_bit():
    # The run's sizes (hidden layers, embedding) so the matrix products take the kernels a
    # replay takes; servers repeat three templates of resources and, independently, two of
    # the window jobs' task counts, as idle and equally loaded servers do.
    cfg = HarmonyNetConfig(window=6, n_servers=40)
    torch.manual_seed(0)
    net = PolicyNet(cfg)
    rng = np.random.default_rng(0)
    split = cfg.window * cfg.job_features
    counts = 2 * cfg.window  # a server row's last entries: each window job's tasks there
    base = rng.random((3, cfg.server_features - counts), dtype=np.float32)
    tasks = rng.random((2, counts), dtype=np.float32)
    tasks[0] = 0.0  # none of the window's tasks: every row sees the same counts there
    servers = np.concatenate([base[rng.integers(0, 3, 40)], tasks[rng.integers(0, 2, 40)]], axis=1)
    obs = np.concatenate([rng.random(split, dtype=np.float32), servers.reshape(-1)])
    obs = torch.from_numpy(obs)[None]
    cases = []
    for n_cells in (1, 2, 3, 4, 5, 17, 240):  # one distinct input up to every cell
        grid = np.zeros((cfg.window, 2, 40), dtype=bool)
        cells = rng.choice(cfg.window * 40, n_cells, replace=False)
        for cell in cells:
            grid[cell // 40, rng.integers(0, 2), cell % 40] = True
        cases.append(grid)
    one_template = np.zeros((cfg.window, 2, 40), dtype=bool)
    one_template[2, 0, :] = True  # one job on every server: three distinct inputs
    cases.append(one_template)
    with torch.no_grad():
        every = net.body(obs).reshape(cfg.window, 2, 40)  # every pair scored
        for grid in cases:
            cells = grid.any(axis=1)
            fast = net.body.cell_scores(obs, cells)  # (P, 2): worker, PS
            assert torch.equal(torch.from_numpy(fast), every.permute(0, 2, 1)[cells]), grid.sum()
            full = net.masked_logits(obs, torch.from_numpy(grid.reshape(1, -1)))
            assert net.greedy_action(obs, grid.reshape(-1)) == int(full.argmax())


def test_greedy_action_over_candidates_is_the_argmax_over_the_mask():
    # The policy scores the tasks that fit (`PlacementDraft.candidates`) and counts first
    # fit only for its best candidates: its action must be the argmax over the
    # mask (None when the mask allows nothing), also where its best candidates are not
    # allowed.
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    passed_over = nothing = 0
    with torch.no_grad():
        for _ in range(60):
            draft = queue_draft(rng)
            n, m = len(draft.jobs), len(draft.free)
            net = PolicyNet(HarmonyNetConfig(window=n, n_servers=m))
            obs = torch.rand(1, net.cfg.obs_dim)
            mask = draft.mask(SimpleNamespace(window=n))
            candidates, allows = draft.candidates(SimpleNamespace(window=n))
            got = net.greedy_action(obs, candidates, allows)
            if not mask.any():
                assert got is None
                nothing += 1
                continue
            want = int(net.masked_logits(obs, torch.from_numpy(mask)[None]).argmax())
            assert got == want
            best = int(net.masked_logits(obs, torch.from_numpy(candidates)[None]).argmax())
            passed_over += best != want
    assert passed_over and nothing, (passed_over, nothing)  # both cases were met


def test_pair_head_scores_only_the_rows_the_mask_allows_and_agrees_with_all_rows():
    cfg = HarmonyNetConfig(window=4, n_servers=3, hidden=(16, 16), row_embed=8)
    torch.manual_seed(0)
    net = PolicyNet(cfg)
    obs = torch.rand(3, cfg.obs_dim)
    mask = torch.zeros(3, 4, 2, 3, dtype=torch.bool)
    mask[0, 1, 0, :2] = True  # one job's worker
    mask[1, :, 1, 2] = True  # every job's PS on one server
    mask[2, 3] = True
    mask = mask.reshape(3, -1)
    with torch.no_grad():
        full = net.body(obs).masked_fill(~mask, MASKED)
        some = net.masked_logits(obs, mask)
    torch.testing.assert_close(some, full)
