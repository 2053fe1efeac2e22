"""DL2's warm-up with a head shared by the job rows, against DL2's flat network.

    python -m benchmarks dl2_heads
    python -m benchmarks.bench_dl2_heads [--dir DIR] [--seeds 0,1,2,3,4]
        [--variants flat,rows,rows-alone,rows-teacher-order,rows-gains,rows-events]

The experiment, outside the pipeline, that made the rows head DL2's default network
(`models.dl2.networks.RowsHead`, the variant rows-alone; kept to reproduce it): on the
default `schedlab run`s
of the scoreboard (`benchmarks/bench_scoreboard.py`, DIR default ./var/scoreboard-default;
missing runs are made, finished ones reused), each run's `dl2-synthetic` training
sequences are recorded under Optimus (DL2's recorder: `recorder.replay` of Optimus'
allocation, the stage's simulator), a policy is trained on the recording by masked
cross-entropy (Adam 5e-3, batch 256, early stop on one held-out workload after 6 epochs
without progress, like the warm-up), and run greedy on the run's test sequences with 3
simulator seeds beside Optimus every 600 s (the teacher) and Optimus at every event (the
arena's best heuristic); printed: the paired ratio to Optimus at every event over every run
(n = 30 with five runs) and per run the ratio to Optimus every 600 s.

Variants (the network reads the window's J job rows of `encode_allocation`):
- flat: DL2's network, the rows as one vector through 256-256 ReLU layers to 3J + 1 logits;
- rows: one network shared by the rows: each row's inputs and the rows' mean through
  128-128 ReLU layers to that row's three logits; stop from the mean of the rows' hidden
  units (permutation-equivariant: what it learns of a job holds in any row);
- rows-alone: the same without the rows' mean (each row's logits from that row alone);
- rows-teacher-order: the rows head on Optimus' own order (marginal gain) instead of the
  job-by-job order ("rows", DL2's default for Optimus);
- rows-gains: the rows head with two more inputs per row, log1p of Optimus' estimated gain
  (remaining seconds saved per unit of dominant share) of one more worker and one more PS
  at the row's counts, from the speed curve Optimus fits on what the job showed;
- rows-events: the rows head, Optimus recorded and the policy deciding at every arrival
  and completion (the simulator's event trigger) instead of every 600 s.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks.bench_scoreboard import run_seed
from benchmarks.options import parse
from models.dl2.networks import policy_mask
from models.dl2.policy import workload_seeds
from models.dl2.recorder import as_workloads, replay
from models.dl2.stage_config import DL2StageConfig
from models.heuristics.common import remaining_epochs
from models.heuristics.optimus import Optimus
from models.heuristics.registry import ALLOCATIONS, PLACEMENTS
from pipelines.trained import set_workloads
from tracelib.envs.observation import ACTION_KINDS, encode_allocation, refresh_allocation_row
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.engine import Simulator
from tracelib.sim.policy import Scheduler
from tracelib.stats import mean_ci, paired_ratio
from warehouse import connect

VARIANTS = ("flat", "rows", "rows-alone", "rows-teacher-order", "rows-gains", "rows-events")
SET = "dl2-synthetic"
EXTRA = 2
"""Inputs per row beyond `encode_allocation`'s (Optimus' gains; zeros unless rows-gains)."""


class RowHead(nn.Module):
    """Each row's three logits from the row (and the rows' mean) through shared layers;
    stop from the rows' pooled hidden units. (B, J * d) -> (B, 3J + 1)."""

    def __init__(self, window: int, d: int, hidden: int = 128, context: bool = True) -> None:
        super().__init__()
        self.window, self.d, self.context = window, d, context
        self.body = nn.Sequential(
            nn.Linear(2 * d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.out = nn.Linear(hidden, ACTION_KINDS)
        self.stop = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.view(x.shape[0], self.window, self.d)  # (B, J, d)
        ctx = rows.mean(1, keepdim=True).expand_as(rows)
        if not self.context:
            ctx = torch.zeros_like(ctx)
        hid = self.body(torch.cat([rows, ctx], -1))  # (B, J, hidden)
        per_row = self.out(hid).reshape(x.shape[0], -1)  # (B, J, 3) -> (B, 3J)
        return torch.cat([per_row, self.stop(hid.mean(1))], -1)  # (B, 3J + 1)


class Experiment:
    """One variant on one run's warehouse."""

    def __init__(self, warehouse: Path, seed: int, variant: str) -> None:
        self.variant, self.seed = variant, seed
        with connect(warehouse, read_only=True) as con:
            self.train = as_workloads(set_workloads(con, SET, "train"))
            self.test = as_workloads(set_workloads(con, SET, "test"))
        self.cfg = DL2StageConfig(seed=seed)
        self.net_cfg = self.cfg.recorder_config().net
        self.window, self.n_features = self.net_cfg.window, self.net_cfg.n_features
        self.baseline_sim = replace(self.cfg.sim, window=self.window)
        # The recording and the policy decide at every event in rows-events (Optimus at its
        # own triggers in the comparisons).
        self.sim = self.baseline_sim
        if variant == "rows-events":
            self.sim = replace(self.sim, trigger="events")
        self.order = "teacher" if variant == "rows-teacher-order" else "rows"
        self.place = PLACEMENTS.create("load-balancing")

    # -- inputs ----------------------------------------------------------------------------

    def _gains(self, builder: AllocationBuilder, optimus: Optimus, snap):
        """Per row: Optimus' scaled gains of one more worker and one more PS (see module)."""
        jobs = builder.jobs
        speed = [optimus.speed_model(snap, j) for j in jobs]
        work = [remaining_epochs(j) * snap.job_types[j.model].iters_per_epoch for j in jobs]

        def row(i: int) -> list[float]:
            w, p = builder.workers[i], builder.ps[i]
            out = [0.0, 0.0]
            now = speed[i](w, p) if w and p else 0.0
            if now <= 0:
                return out
            shares = (builder.worker_share(i), builder.ps_share(i))
            for k, (dw, dp) in enumerate(((1, 0), (0, 1))):
                nxt = speed[i](w + dw, p + dp)
                if nxt > now and shares[k] > 0:
                    out[k] = math.log1p((work[i] / now - work[i] / nxt) / shares[k]) / 20.0
            return out

        return row

    def _inputs(self, obs: np.ndarray, builder: AllocationBuilder, gains) -> np.ndarray:
        """(J * (F + EXTRA),) float32."""
        x = np.zeros((self.window, self.n_features + EXTRA), dtype=np.float32)
        x[:, : self.n_features] = obs
        if self.variant == "rows-gains":
            for i in range(min(len(builder.jobs), self.window)):
                x[i, self.n_features :] = gains(i)
        return x.reshape(-1)

    # -- data, training, deployment --------------------------------------------------------

    def record(self) -> tuple[np.ndarray, ...]:
        """Inputs, masks, Optimus' actions and workload ids of every recorded step."""
        xs, masks, actions, owners = [], [], [], []
        for (workload_id, jobs), sim_seed in zip(
            self.train, workload_seeds(self.cfg.seed, len(self.train)), strict=True
        ):
            optimus = Optimus()
            session = Simulator(
                jobs, Scheduler(optimus, self.place), replace(self.sim, seed=sim_seed)
            ).session()
            while not session.done:
                snap = session.snapshot
                alloc, trail = optimus.allocate_in_order(snap)
                steps = replay(snap, alloc, self.order, self.net_cfg, trail)
                builder = AllocationBuilder(snap)
                obs = encode_allocation(builder, self.net_cfg.obs)  # (J, F)
                gains = self._gains(builder, optimus, snap)
                for step in steps:
                    action = step[4]
                    xs.append(self._inputs(obs, builder, gains))
                    masks.append(policy_mask(builder, self.net_cfg))
                    actions.append(action)
                    owners.append(workload_id)
                    decoded = self.net_cfg.actions.decode(action)
                    if decoded is not None:
                        builder.step(*decoded)
                        refresh_allocation_row(obs, builder, decoded[0])
                session.submit(alloc, self.place.place(snap, alloc, session.rng))
        return np.array(xs), np.array(masks), np.array(actions), np.array(owners)

    def network(self) -> nn.Module:
        d = self.n_features + EXTRA
        if self.variant == "flat":
            return nn.Sequential(
                nn.Linear(self.window * d, 256),
                nn.ReLU(),
                nn.Linear(256, 256),
                nn.ReLU(),
                nn.Linear(256, self.net_cfg.actions.n),
            )
        return RowHead(self.window, d, context=self.variant != "rows-alone")

    def fit(self, data: tuple[np.ndarray, ...]) -> tuple[nn.Module, float, int]:
        """The network trained on `data`; its held-out accuracy and epochs."""
        x, m, y, owner = data
        rng = np.random.default_rng(self.seed)
        held = np.isin(owner, rng.permutation(np.unique(owner))[:1])
        xt, mt, yt = (torch.from_numpy(a[~held]) for a in (x, m, y))
        xv, mv, yv = (torch.from_numpy(a[held]) for a in (x, m, y))
        torch.manual_seed(self.seed)
        net = self.network()
        optim = torch.optim.Adam(net.parameters(), lr=5e-3)
        best, state, stale, accuracy, epochs = math.inf, None, 0, 0.0, 0
        while stale < 6 and epochs < 200:
            epochs += 1
            order = torch.from_numpy(rng.permutation(len(yt)))
            for start in range(0, len(yt), 256):
                idx = order[start : start + 256]
                logits = net(xt[idx]).masked_fill(~mt[idx], -1e9)
                loss = nn.functional.cross_entropy(logits, yt[idx])
                optim.zero_grad()
                loss.backward()
                optim.step()
            with torch.no_grad():
                logits = net(xv).masked_fill(~mv, -1e9)
                val = float(nn.functional.cross_entropy(logits, yv))
            if val < best - 1e-4:
                best, stale = val, 0
                accuracy = float((logits.argmax(-1) == yv).float().mean())
                state = {k: v.clone() for k, v in net.state_dict().items()}
            else:
                stale += 1
        net.load_state_dict(state)
        return net.eval(), accuracy, epochs

    def student(self, net: nn.Module):
        """An allocation policy: the network's greedy actions, step by step."""
        experiment = self

        class Student:
            name, interval_s, uses_oracle = "student", 600.0, False

            def __init__(self) -> None:
                self.optimus = Optimus()  # its fitted curves feed rows-gains

            def allocate(self, snap):
                builder = AllocationBuilder(snap)
                obs = encode_allocation(builder, experiment.net_cfg.obs)
                gains = experiment._gains(builder, self.optimus, snap)
                layout = experiment.net_cfg.actions
                while True:
                    mask = policy_mask(builder, experiment.net_cfg)
                    if not mask[:-1].any():
                        break
                    x = torch.from_numpy(experiment._inputs(obs, builder, gains))[None]
                    with torch.no_grad():
                        z = net(x)[0].masked_fill(~torch.from_numpy(mask), -1e9)
                    decoded = layout.decode(int(z.argmax()))
                    if decoded is None:
                        break
                    builder.step(*decoded)
                    refresh_allocation_row(obs, builder, decoded[0])
                return builder.allocation()

        return Student

    def jct(self, make, sim) -> np.ndarray:
        """Average JCT of each test sequence x simulator seed (1000, 1001, 1002) under
        `sim`; one policy object per sequence (Optimus keeps its fitted curves)."""
        out = []
        for _, jobs in self.test:
            policy = make()
            for k in range(3):
                run = Simulator(jobs, Scheduler(policy, self.place), replace(sim, seed=1000 + k))
                out.append(run.run().avg_jct_s)
        return np.array(out)


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_dl2_heads`'s options (see the module docstring)."""

    dir: Path = Path("var/scoreboard-default")
    """the scoreboard's folder of default runs"""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """the runs' seeds (comma-separated)"""
    variants: tuple[str, ...] = VARIANTS
    """the variants to train (comma-separated)"""

    def __post_init__(self) -> None:
        unknown = set(self.variants) - set(VARIANTS)
        if unknown:
            raise ValueError(f"unknown variants {sorted(unknown)}; known: {VARIANTS}")


def main(argv: list[str]) -> int:
    """Train every variant on each run's recording, test it, print its ratios."""
    opts = parse(Options, argv)
    torch.set_num_threads(1)
    folder = opts.dir
    folder.mkdir(parents=True, exist_ok=True)
    print(f"DL2 heads on the default runs in {folder} (seeds {list(opts.seeds)})")
    warehouses = {s: run_seed(s, "default", folder) for s in opts.seeds}
    # Optimus' runs depend only on the run's test sequences: made once per run, whatever
    # the variant.
    baselines: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for variant in opts.variants:
        mine_all, events_all, per_run = [], [], []
        for seed, warehouse in warehouses.items():
            start = time.perf_counter()
            exp = Experiment(warehouse, seed, variant)
            net, accuracy, epochs = exp.fit(exp.record())
            mine = exp.jct(exp.student(net), exp.sim)
            if seed not in baselines:
                baselines[seed] = tuple(
                    exp.jct(lambda name=name: ALLOCATIONS.create(name), exp.baseline_sim)
                    for name in ("optimus", "optimus-events")
                )
            teacher, events = baselines[seed]
            mine_all.append(mine)
            events_all.append(events)
            per_run.append(float(np.mean(mine / teacher)))
            print(
                f"  {variant} seed {seed}: held-out accuracy {accuracy:.3f} ({epochs} epochs), "
                f"vs Optimus-600 {per_run[-1]:.3f}, vs Optimus at every event "
                f"{float(np.mean(mine / events)):.3f} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        ratio = paired_ratio(np.concatenate(mine_all), np.concatenate(events_all))
        low, high = mean_ci(per_run)[1:]
        print(
            f"{variant}: vs Optimus at every event {ratio.ratio:.3f} [{ratio.low:.3f}, "
            f"{ratio.high:.3f}] (n={ratio.n_pairs}, lower on {ratio.wins}); "
            f"per run vs Optimus-600 {min(per_run):.3f}-{max(per_run):.3f}"
            + (f" (mean {np.mean(per_run):.3f} [{low:.3f}, {high:.3f}])" if low else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
