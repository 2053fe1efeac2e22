"""Chic's warm start: clone Optimus' schedules before the cross-entropy method (a deviation).

The paper trains Chic from random weights. Here, at the run's budget, the modified CEM from
random weights stays 1.28-1.34x Optimus-300's average JCT in Chic's own scenario and about
1.5x the best heuristic in the arena (docs/chic.md), so the policy network first learns, by
supervised cross-entropy, what Optimus does in the states of the training episodes: CEM then
starts from schedules that work, as Harmony and RL-TAPS start from their baselines'
decisions. Every other part of the method is unchanged.

The teacher is the non-oracle Optimus of the baselines (`models.heuristics.optimus.Optimus`):
at every schedule it reads the snapshot the schedule is built on, whose jobs carry the speed
samples the simulator observed while they ran (`JobView.history`), fits its speed model from
those (the catalogue's prior until a job has enough distinct configurations) and never reads
the simulator's truth. It sees what Chic sees: the first I jobs in Chic's own scenario (the
baseline Optimus sees every job and decides every 300 or 600 s; the teacher decides at
Chic's events), the arena's window in the arena. Its additions (`Optimus.allocate_in_order`:
a worker and a PS per job by arrival, then one task at a time by marginal gain) become
Chic's actions:

    Chic       a pair (i, 1, 1) is "worker to row i" then "PS to row i"; a task is one action;
    Chic-Pair  one pair action each time an addition raises the smaller of the job's worker
               and PS counts (a pair policy can only give both): the pairs follow Optimus'
               order up to its smaller count. Measured against the larger count (one pair
               per addition raising max(w, p)) on the training episodes, the teacher's own
               average JCT: 615 vs 608 s in Chic's own scenario (20 sequences), 6,579 vs
               9,078 s in the arena (12 episodes; the larger count fills the servers);
    then void when Optimus stops.

By default (`CEMConfig.imitation_order="rows"`) the additions are replayed job row by job
row (each row's in Optimus' order; the schedule built is the same): Optimus' own order
interleaves the rows by marginal gain, which a network reading counts and sizes learns
poorly in the arena (20 rows, 41 actions: held-out accuracy 0.27-0.43 with the paper's
64-32-4 network, the sampled clone's validation ACT 7,000-8,700 s against the teacher's
3,763 s), row by row 0.76 and 5,226 s; in Chic's own scenario (3 rows) the two orders clone
alike (validation ACT 401 vs 404 s for Chic, 631 vs 619 s for Chic-Pair).

An action the env's mask forbids is skipped (counted); a schedule the env ends itself (S',
or `max_phase_steps`) ends the teacher's too; when Optimus stops but void is masked (the
work-conserving deviation, or nothing trains yet) the teacher takes the first valid action
and counts it as forced. Each step is recorded with the state and mask the policy would see
(the training MDP, `CEMConfig.env_config`). The loss is the masked cross-entropy of the
teacher's action (Adam, shuffled minibatches, dropout on as in CEM's fits); a tenth of the
steps is held out to report how often the greedy policy picks the teacher's action.

    samples = teacher_samples(train_seqs, cfg, order="rows")        # cfg: CEMConfig
    metrics = imitate(net, samples, epochs=20, lr=3e-3, batch=256, rng=rng)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models import warm_start
from models.chic.config import ORDERS, CEMConfig
from models.chic.networks import ChicPolicyNet
from models.chic.policy import make_env
from models.heuristics.optimus import Optimus
from tracelib.envs.chic import ChicActions, average_jct_s
from tracelib.envs.chic_arena import ChicArenaEnv
from tracelib.sim.jobs import JobSpec

TEACHERS = ("optimus",)
"""Baselines Chic's warm start can clone."""

HELD_OUT = 0.1
"""Share of the teacher's steps held out of the fit to measure the clone's accuracy."""


@dataclass(frozen=True)
class TeacherSamples(warm_start.TeacherSamples):
    """A teacher's schedules on training sequences, one row per action: states (S,
    input_dim), masks (S, n_actions) and actions (void last), with what the recording met."""

    schedules: int = 0
    """Schedules the teacher built."""
    skipped: int = 0
    """Additions of Optimus the mask forbade (left out)."""
    forced: int = 0
    """Steps where Optimus had stopped but void was masked (first valid action taken)."""
    cut: int = 0
    """Schedules the env ended (S', max_phase_steps) before Optimus' additions ran out."""
    teacher_act_s: float = float("nan")
    """The teacher's mean average JCT over the episodes it was recorded on."""


def by_rows(steps: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The same additions job row by job row (each row's in Optimus' order)."""
    return sorted(steps, key=lambda s: s[0])


def chic_actions(steps: Sequence[tuple[int, int, int]], actions: ChicActions) -> list[int]:
    """Optimus' additions (row, workers added, PSs added) as Chic's actions, in order
    (without the closing void; module doc)."""
    out: list[int] = []
    if actions.per_row == 1:  # Chic-Pair: a pair once a row has one more worker and PS
        workers: dict[int, int] = {}
        ps: dict[int, int] = {}
        pairs: dict[int, int] = {}
        for i, dw, dp in steps:
            workers[i] = workers.get(i, 0) + dw
            ps[i] = ps.get(i, 0) + dp
            while pairs.get(i, 0) < min(workers[i], ps[i]):
                pairs[i] = pairs.get(i, 0) + 1
                out.append(actions.add_pair(i))
        return out
    for i, dw, dp in steps:
        if dw:
            out.append(actions.add_worker(i))
        if dp:
            out.append(actions.add_ps(i))
    return out


def teacher_samples(
    workloads: Sequence[Sequence[JobSpec]],
    cfg: CEMConfig,
    teacher: str = "optimus",
    seed: int = 0,
    order: str = "optimus",
) -> TeacherSamples:
    """Run `teacher` through every sequence of `workloads` in the training MDP of `cfg`
    (its scenario and `env_config`) and record, at every action, the state, the mask and
    the action (module doc). Episode k's simulator is seeded from (`seed`, k)."""
    if teacher not in TEACHERS:
        raise ValueError(f"unknown teacher {teacher!r}; known: {', '.join(TEACHERS)}")
    env = make_env(workloads, cfg.scenario, cfg.env_config)
    arena = isinstance(env, ChicArenaEnv)
    void = env.actions.void
    obs_rows: list[np.ndarray] = []
    mask_rows: list[np.ndarray] = []
    actions: list[int] = []
    schedules = skipped = forced = cut = 0
    acts: list[float] = []
    for k in range(len(workloads)):
        optimus = Optimus()  # fresh memo of merged histories per episode
        seed_k = int(np.random.SeedSequence([seed, k]).generate_state(1)[0] >> 1)
        obs, _ = env.reset(seed=seed_k, options={"workload": k})
        while env.schedule is not None:
            schedule = env.schedule
            schedules += 1
            snap = schedule.snap if arena else env.session.snapshot
            _, steps = optimus.allocate_in_order(snap)
            if order not in ORDERS:
                raise ValueError(f"unknown order {order!r}; known: {', '.join(ORDERS)}")
            if order == "rows":
                steps = by_rows(steps)
            planned = chic_actions(
                [s for s in steps if s[0] < len(schedule.jobs)], schedule.actions
            )
            skipped += len(
                chic_actions([s for s in steps if s[0] >= len(schedule.jobs)], schedule.actions)
            )
            plan = iter(planned)
            while env.schedule is schedule:
                mask = env.action_masks()
                action = next(plan, void)
                while action != void and not mask[action]:
                    skipped += 1
                    action = next(plan, void)
                if action == void and not mask[void]:
                    action = int(np.flatnonzero(mask)[0])
                    forced += 1
                obs_rows.append(obs)
                mask_rows.append(mask)
                actions.append(action)
                obs, _, _, _, _ = env.step(action)
            if action != void and next(plan, None) is not None:
                cut += 1
        acts.append(average_jct_s(env.result()))
    return TeacherSamples(
        np.stack(obs_rows).astype(np.float32),
        np.stack(mask_rows),
        np.asarray(actions, dtype=np.int64),
        schedules=schedules,
        skipped=skipped,
        forced=forced,
        cut=cut,
        teacher_act_s=float(np.mean(acts)),
    )


def _accuracy(net: ChicPolicyNet, obs: torch.Tensor, mask: torch.Tensor, act: torch.Tensor):
    if not len(act):
        return float("nan")
    net.eval()
    with torch.no_grad():
        return float((net.masked_log_probs(obs, mask).argmax(-1) == act).float().mean())


def imitate(
    net: ChicPolicyNet,
    samples: TeacherSamples,
    *,
    epochs: int,
    lr: float,
    batch: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Train `net` in place on the teacher's actions (all but a held-out tenth) for `epochs`
    passes of masked cross-entropy (dropout on); returns the imitation's metrics, among them
    "imitation_held_out_accuracy". Split and minibatch order come from `rng`; the caller
    seeds torch (dropout). The net is left in eval mode."""
    start = time.perf_counter()
    obs = torch.from_numpy(samples.obs)
    mask = torch.from_numpy(samples.masks)
    act = torch.from_numpy(samples.actions)
    order = rng.permutation(len(samples))
    n_held = int(len(samples) * HELD_OUT)
    held, fit = order[:n_held], order[n_held:]
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    loss_sum, count = float("nan"), 0
    net.train()
    for _ in range(epochs):
        fit = rng.permutation(fit)
        loss_sum, count = 0.0, 0
        for at in range(0, len(fit), batch):
            b = torch.from_numpy(fit[at : at + batch])
            loss_sum += net.cross_entropy_step(optimizer, obs[b], mask[b], act[b])
            count += len(b)
    net.eval()
    held_t, fit_t = torch.from_numpy(held), torch.from_numpy(fit)
    return {
        "imitation_steps": len(samples),
        "imitation_schedules": samples.schedules,
        "imitation_skipped": samples.skipped,
        "imitation_forced": samples.forced,
        "imitation_cut": samples.cut,
        "imitation_epochs": epochs,
        "imitation_loss": loss_sum / count if count else float("nan"),
        "imitation_accuracy": _accuracy(net, obs[fit_t], mask[fit_t], act[fit_t]),
        "imitation_held_out_accuracy": _accuracy(net, obs[held_t], mask[held_t], act[held_t]),
        "imitation_wall_s": time.perf_counter() - start,
    }
