"""Harmony's searched teacher (a deviation, as DL2's `models.dl2.search`): which placement
rule and job order to follow, chosen decision by decision on the training sequences by
simulated average JCT, and recorded as the policy's actions for the warm start to clone.

Why: cloning LIF-Quad (the strongest baseline) gives a policy level with LIF-Quad at best,
and the actor-critic on the reward predictor's rollouts adds nothing measurable after it
(docs/harmony.md). Harmony's action space is wider than its baselines': at each step it
chooses *which* waiting job to place as well as where, and its baselines always take the
oldest. Following, at each decision, the (rule, order) whose continuation ends with the
lowest average JCT puts a teacher 25% below LIF-Quad on the training sequences, and the
order and rule it picks depend on the state (queue, remaining work, what is running), which
the network sees.

The search, per training sequence (its own simulator seed, the simulator Harmony is
evaluated in; it reads only whole-run average JCTs, as grouped PPO's return or a cluster
replaying the sequence would report them, never the speed model):
- candidates: every (server rule, job order) of `HarmonySearchConfig`; a job order sorts the
  waiting jobs (`ORDERS`: arrival; shortest remaining work, epochs left times iterations per
  epoch; smallest remaining work times tasks; newest first) and the rule places their tasks
  one at a time as Harmony's baselines do (`placement.place_in_order`);
- start from LIF-Quad in arrival order; at every `block`-th decision, score each candidate
  by the run that follows it from there to the end (a fork of the searched run at that
  decision, `SimSession.fork`), and follow the best for the next `block` decisions (ties
  keep the current one, then LIF-Quad in arrival order). The run only improves: each
  choice's score is the finished run's average JCT, and keeping the current candidate is
  always among the choices, so with LIF-Quad in arrival order among the candidates (the
  default) the searched run is never worse than LIF-Quad's on the training sequence
  (tested);
- the searched run records, at every task it places, the state, mask and action the
  policy would see (`encode_placement`).

Costs (6-server testbed, 30-job sequences, 25-35 decisions each): candidates x decisions /
block continuations per sequence, on average half a run each (~20 ms), about 1.1 s per
sequence with the 8 defaults and block 3. Replaying the decisions so far instead of forking
(before) gave the same result in 2.5 times the time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from models.harmony.config import START, HarmonySearchConfig
from models.harmony.placement import ORDERS, RULES, place_in_order
from tracelib.envs.observation import PlacementDraft, PlacementObsConfig, encode_placement
from tracelib.progress import ProgressFn, no_progress
from tracelib.sim import SimConfig, Simulator
from tracelib.sim.engine import SimSession
from tracelib.sim.jobs import JobSpec
from tracelib.sim.snapshot import Allocation, Placement, Snapshot


def _rules(cfg: HarmonySearchConfig) -> dict:
    """The candidates' rules and the start's, made once (LIF fits its model when made)."""
    return {r: RULES[r]() for r in dict.fromkeys((START[0], *cfg.rules))}


@dataclass
class _Scripted:
    """A decision policy following one candidate (rule, order); records every task it
    places when `record` is a list."""

    follow: tuple[str, str]
    obs: PlacementObsConfig
    rules: dict
    record: list | None = None
    name: str = "harmony-search"
    interval_s: float | None = None
    uses_oracle: bool = False

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        rule, order = self.follow
        on_step = None
        if self.record is not None:
            record, obs = self.record, self.obs

            def on_step(draft: PlacementDraft, mask: np.ndarray, action: int) -> None:
                record.append((encode_placement(draft, obs), mask.copy(), action))

        return place_in_order(snap, self.obs, self.rules[rule], ORDERS[order], on_step)


@dataclass(frozen=True)
class SequenceSearch:
    """One training sequence's search: the candidate followed at each decision, the
    average JCT of LIF-Quad in arrival order and of the searched run (same seed), and the
    searched run's steps (obs (obs_dim,) float32, mask (2N'M,) bool, action)."""

    choices: tuple[tuple[str, str], ...]
    start_jct_s: float
    searched_jct_s: float
    steps: list = field(repr=False)


def search_sequence(
    jobs: Sequence[JobSpec],
    sim: SimConfig,
    obs: PlacementObsConfig,
    cfg: HarmonySearchConfig,
    rules: dict | None = None,
) -> SequenceSearch:
    """Search one sequence in the simulator `sim` (its seed fixed): see the module."""
    rules = rules or _rules(cfg)
    # The scheduler only names the runs and sets their interval: sessions are driven here.
    simulator = Simulator(jobs, _Scripted(START, obs, rules), sim)

    def finish(session: SimSession, then: tuple[str, str]) -> float:
        """Average JCT of `session` continued with `then` to the end."""
        policy = _Scripted(then, obs, rules)
        while not session.done:
            session.submit(*policy.decide(session.snapshot, session.rng))
        return session.result().avg_jct_s

    # The searched run, advanced a block at a time and recording every task it places;
    # each candidate's score is a fork of it at the block's first decision, run to the end.
    run, steps, choices = simulator.session(), [], []
    start_jct = finish(run.fork(), START)
    current, best_jct = START, start_jct
    while not run.done:
        scores = {c: (best_jct if c == current else finish(run.fork(), c)) for c in cfg.candidates}
        best = min(scores.values())
        # Ties keep the current candidate (its score is the run as it stands), then the
        # earliest candidate (LIF-Quad in arrival order first).
        if scores.get(current, np.inf) > best:  # LIF-Quad may not be a candidate
            current = next(c for c in cfg.candidates if scores[c] == best)
        best_jct = scores[current]
        recorder = _Scripted(current, obs, rules, steps)
        for _ in range(cfg.block):
            if run.done:
                break
            run.submit(*recorder.decide(run.snapshot, run.rng))
            choices.append(current)
    return SequenceSearch(tuple(choices), start_jct, run.result().avg_jct_s, steps)


@dataclass(frozen=True)
class SearchResult:
    """The search over every training sequence."""

    sequences: tuple[SequenceSearch, ...]
    key: tuple = field(default=(), repr=False, compare=False)
    """What it searched: (config, simulator, observation, workloads) (`search_key`)."""

    @property
    def ratio(self) -> float:
        """Mean over sequences of the searched run's average JCT / LIF-Quad's."""
        return float(np.mean([s.searched_jct_s / s.start_jct_s for s in self.sequences]))

    def choice_counts(self) -> dict[str, int]:
        """How many decisions followed each candidate ("rule/order")."""
        counts = Counter(f"{r}/{o}" for s in self.sequences for r, o in s.choices)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def metrics(self) -> dict:
        """The search's summary for the warm start's metrics."""
        return {
            "teacher_train_ratio_to_lif_quad": self.ratio,
            "teacher_choices": json.dumps(self.choice_counts()),
            "teacher_sequences": len(self.sequences),
        }

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every step of every searched run: obs (S, obs_dim) float32, masks (S, 2N'M)
        bool, actions (S,) int64."""
        steps = [step for s in self.sequences for step in s.steps]
        return (
            np.stack([o for o, _, _ in steps]).astype(np.float32),
            np.stack([m for _, m, _ in steps]),
            np.asarray([a for _, _, a in steps], dtype=np.int64),
        )


def search_key(
    workloads: Sequence[Sequence[JobSpec]],
    sim: SimConfig,
    obs: PlacementObsConfig,
    cfg: HarmonySearchConfig,
) -> tuple:
    """Everything a search's result depends on (it draws no other randomness)."""
    return (cfg, sim, obs, tuple(tuple(jobs) for jobs in workloads))


def search_teacher(
    workloads: Sequence[Sequence[JobSpec]],
    sim: SimConfig,
    obs: PlacementObsConfig,
    cfg: HarmonySearchConfig,
    progress: ProgressFn = no_progress,
) -> SearchResult:
    """Search every training sequence (sequence k in `sim` with the k-th child seed of
    `cfg.sim_seed`). Pure: the same arguments give the same result."""
    if not workloads:
        raise ValueError("the search needs at least one training sequence")
    seeds = np.random.SeedSequence(cfg.sim_seed).spawn(len(workloads))
    rules = _rules(cfg)
    found = []
    for k, jobs in enumerate(workloads):
        seed = int(seeds[k].generate_state(1)[0])
        found.append(search_sequence(jobs, replace(sim, seed=seed), obs, cfg, rules))
        progress(k + 1, len(workloads))
    return SearchResult(tuple(found), search_key(workloads, sim, obs, cfg))
