"""Harmony's searched teacher: job orders, the decision-by-decision search (never worse than
LIF-Quad on the sequence it searched, deterministic, replayable) and its warm start."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch

from models.harmony.placement import ORDERS, RULES, HarmonyNetConfig, RulePlacement, place_in_order
from models.harmony.search import (
    START,
    HarmonySearchConfig,
    _Scripted,
    search_sequence,
    search_teacher,
)
from models.harmony.train import PlacementTrainConfig, warm_key, warm_start
from tracelib.envs.observation import PlacementActions, PlacementObsConfig
from tracelib.scenarios.harmony import ArrivalConfig, harmony_sim, sequences
from tracelib.sim import Simulator

torch.set_num_threads(1)
NET = HarmonyNetConfig(hidden=(32, 32, 16), row_embed=8)
OBS = NET.obs_config()
SEQS = sequences(ArrivalConfig(n_jobs=12, uniform_mean=4.0), 3, 5)
SMALL = HarmonySearchConfig(orders=("arrival", "shortest", "newest"), block=2)


class _Recorder:
    """A snapshot catcher: the first decision with at least `n` waiting jobs."""

    name = "catch"
    interval_s = None
    uses_oracle = False

    def __init__(self, n: int) -> None:
        self.n, self.snap = n, None

    def decide(self, snap, rng):
        if self.snap is None and len(snap.jobs) >= self.n:
            self.snap = snap
        return place_in_order(snap, OBS, RULES["lif-quad"]())


def test_an_order_places_its_first_job_first() -> None:
    catcher = _Recorder(3)
    Simulator(SEQS[0], catcher, replace(harmony_sim(), seed=1)).run()
    snap = catcher.snap
    assert snap is not None
    for order, key in ORDERS.items():
        placed: list[int] = []
        place_in_order(
            snap,
            OBS,
            RULES["lif-quad"](),
            key,
            lambda draft, mask, action, placed=placed: placed.append(
                draft.jobs[PlacementActions(OBS.window, 6).decode(action)[0]].job_id
            ),
        )
        first = (
            snap.jobs[0]
            if key is None
            else min(snap.jobs[:10], key=lambda j, key=key: key(j, snap))
        )
        assert placed and placed[0] == first.job_id, order
        # the heuristic with that order decides the same (it sorts the whole queue, here
        # shorter than the window), and is named after it
        assert len(snap.jobs) <= OBS.window
        rule = RulePlacement("lif-quad", obs=OBS, order=order)
        assert rule.decide(snap, None) == place_in_order(snap, OBS, RULES["lif-quad"](), key)
        assert rule.name == ("lif-quad" if order == "arrival" else f"lif-quad/{order}")
    with pytest.raises(ValueError, match="unknown job order 'sjf'"):
        RulePlacement("lif-quad", order="sjf")
    assert RulePlacement.named("lif-line/shortest").name == "lif-line/shortest"
    assert (RulePlacement.named("tetris").rule_name, RulePlacement.named("tetris").order) == (
        "tetris",
        "arrival",
    )
    with pytest.raises(ValueError, match="unknown placement rule 'lif'"):
        RulePlacement.named("lif/shortest")
    with pytest.raises(ValueError, match="unknown placement rule 'sjf'"):
        RulePlacement("sjf")


def test_an_ordered_heuristic_sorts_the_whole_queue_not_the_window() -> None:
    catcher = _Recorder(3)
    Simulator(SEQS[0], catcher, replace(harmony_sim(), seed=1)).run()
    snap = catcher.snap
    narrow = PlacementObsConfig(window=1)  # a network would see the oldest job only
    arrival, _ = RulePlacement("lif-quad", obs=narrow).decide(snap, None)
    assert set(arrival.counts) == {snap.jobs[0].job_id}
    checked = 0
    for order in ("shortest", "smallest-area"):
        first = min(snap.jobs, key=lambda j, order=order: ORDERS[order](j, snap))
        if first is snap.jobs[0]:
            continue
        alloc, _ = RulePlacement("lif-quad", obs=narrow, order=order).decide(snap, None)
        assert set(alloc.counts) == {first.job_id}
        checked += 1
    assert checked


@dataclass
class _Replay:
    """Follows `choices[d]` at decision d (a whole run, replayed from the start)."""

    choices: tuple
    rules: dict
    decisions: int = 0
    name: str = "replay"
    interval_s: float | None = None
    uses_oracle: bool = False

    def decide(self, snap, rng):
        choice = self.choices[min(self.decisions, len(self.choices) - 1)]
        self.decisions += 1
        return _Scripted(choice, OBS, self.rules).decide(snap, rng)


def test_search_never_ends_worse_than_lif_quad_and_replays() -> None:
    sim = replace(harmony_sim(), seed=11)
    rules = {r: RULES[r]() for r in SMALL.rules}
    for jobs in SEQS:
        found = search_sequence(jobs, sim, OBS, SMALL, rules)
        assert found.searched_jct_s <= found.start_jct_s
        assert all(c in SMALL.candidates for c in found.choices)
        # following the choices again from the start (no fork) gives the searched run,
        # decision for decision
        again = _Replay(found.choices, rules)
        assert Simulator(jobs, again, sim).run().avg_jct_s == found.searched_jct_s
        assert again.decisions == len(found.choices)
        start = _Scripted(START, OBS, rules)
        assert Simulator(jobs, start, sim).run().avg_jct_s == found.start_jct_s
        # every recorded step is an action the mask allows
        for _, mask, action in found.steps:
            assert mask[action]
    # the search found something better than LIF-Quad on at least one busy sequence
    result = search_teacher(SEQS, harmony_sim(), OBS, SMALL)
    assert result.ratio < 1.0
    assert sum(result.choice_counts().values()) == sum(len(s.choices) for s in result.sequences)


def test_search_without_lif_quad_among_the_candidates() -> None:
    line = HarmonySearchConfig(rules=("lif-line",), orders=("arrival", "shortest"), block=4)
    found = search_sequence(SEQS[0], replace(harmony_sim(), seed=3), OBS, line)
    assert set(found.choices) <= set(line.candidates) and found.searched_jct_s > 0


def test_search_is_deterministic_and_reports_progress() -> None:
    seen: list[tuple[int, int]] = []
    a = search_teacher(SEQS[:2], harmony_sim(), OBS, SMALL, lambda d, t: seen.append((d, t)))
    b = search_teacher(SEQS[:2], harmony_sim(), OBS, SMALL)
    assert seen == [(1, 2), (2, 2)]
    assert [s.choices for s in a.sequences] == [s.choices for s in b.sequences]
    for x, y in zip(a.arrays(), b.arrays(), strict=True):
        np.testing.assert_array_equal(x, y)
    obs, masks, actions = a.arrays()
    assert obs.shape == (len(actions), NET.obs_dim) and masks.shape[0] == len(actions)


def test_search_config_refuses_unknown_candidates() -> None:
    with pytest.raises(ValueError, match="unknown: \\['fifo'\\]"):
        HarmonySearchConfig(orders=("fifo",))
    with pytest.raises(ValueError, match="unknown: \\['sjf'\\]"):
        HarmonySearchConfig(rules=("sjf",))
    with pytest.raises(ValueError, match="block"):
        HarmonySearchConfig(block=0)
    with pytest.raises(ValueError, match="teacher must be one of"):
        PlacementTrainConfig(teacher="sjf")
    with pytest.raises(ValueError, match="at least one training sequence"):
        search_teacher([], harmony_sim(), OBS, SMALL)


def test_searched_warm_start_clones_the_search() -> None:
    cfg = PlacementTrainConfig(net=NET, search=SMALL, imitation_epochs=4)
    made = warm_start(SEQS, None, cfg)  # the searched teacher does not read the predictor
    assert made.metrics["teacher"] == "searched"
    assert made.metrics["teacher_train_ratio_to_lif_quad"] < 1.0
    assert made.metrics["teacher_sequences"] == len(SEQS)
    assert made.metrics["imitation_steps"] > 20
    # the search's settings are part of what a warm start is for; a rule teacher ignores them
    assert warm_key(cfg) != warm_key(replace(cfg, search=HarmonySearchConfig()))
    rule = replace(cfg, teacher="lif-quad")
    assert warm_key(rule) == warm_key(replace(rule, search=HarmonySearchConfig()))


def test_a_search_made_once_serves_every_training_seed() -> None:
    cfg = PlacementTrainConfig(net=NET, search=SMALL, imitation_epochs=2)
    found = search_teacher(SEQS, cfg.sim, OBS, SMALL)
    for seed in (0, 1):
        seeded = replace(cfg, seed=seed)
        shared = warm_start(SEQS, None, seeded, searched=found)
        own = warm_start(SEQS, None, seeded)
        assert shared.metrics == {
            **own.metrics,
            "imitation_wall_s": shared.metrics["imitation_wall_s"],
        }
        assert all(torch.equal(shared.state[k], own.state[k]) for k in own.state)
    # a search of other sequences, or with other candidates, is refused, not cloned
    for other in (
        search_teacher(SEQS[:2], cfg.sim, OBS, SMALL),
        search_teacher(SEQS, cfg.sim, OBS, replace(SMALL, block=3)),
    ):
        with pytest.raises(ValueError, match="other workloads or another config"):
            warm_start(SEQS, None, cfg, searched=other)
    with pytest.raises(ValueError, match="other workloads or another config"):
        warm_start(SEQS, None, replace(cfg, teacher="lif-quad"), searched=found)
