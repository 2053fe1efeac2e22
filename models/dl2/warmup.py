"""DL2 supervised warm-up (section 4.2): imitate a heuristic's recorded decisions.

Reads `decision_traces` rows (models/dl2/recorder.py), trains the policy network with
cross-entropy between its masked action distribution and the recorded action (Adam, lr
0.005, minibatch 256), one pass over the decisions per epoch, until the validation loss
stops improving (`patience` epochs); the best epoch's weights are kept. Validation
decisions are whole held-out workloads. Reports the imitation accuracy (the greedy action
equals the teacher's) and, given validation workloads, the warm policy's average JCT
against its teacher's in the simulator.

    policy, metrics, curve = warmup(traces, WarmupConfig(), val_workloads=[jobs, ...])
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F
from rich.progress import Progress

from models.contracts import CURVE_COLUMNS
from models.dl2.config import DL2NetConfig, WarmupConfig, dl2_sim, to_dict
from models.dl2.networks import PolicyNet
from models.dl2.policy import DL2Policy, average_jct
from models.heuristics.registry import ALLOCATIONS
from tracelib.progress import ProgressFn, no_progress
from tracelib.sim.config import SimConfig
from tracelib.sim.jobs import JobSpec
from tracelib.sim.policy import AllocationPolicy


def decode_traces(traces: pl.DataFrame) -> tuple[DL2NetConfig, dict[str, np.ndarray]]:
    """Network shape of the traces (their `obs_config`) and padded arrays:
    obs (N, J*F) float32, mask (N, 3J+1) bool, action (N,) int64, workload (N,) str."""
    configs = traces["obs_config"].unique().to_list()
    if len(configs) != 1:
        raise ValueError(f"traces mix observation configs: {configs}")
    obs_cfg = json.loads(configs[0])
    net = DL2NetConfig(
        window=obs_cfg["window"],
        models=tuple(obs_cfg["models"]),
        slots_scale=obs_cfg["slots_scale"],
        epochs_scale=obs_cfg["epochs_scale"],
        bundle_first=obs_cfg.get("bundle_first", False),
        interval_s=obs_cfg.get("interval_s"),
        trigger=obs_cfg.get("trigger", "interval"),
    )
    if set(traces["n_features"].unique().to_list()) != {net.n_features}:
        raise ValueError("traces' n_features do not match their obs_config")
    n = traces.height
    lens = traces["observation"].list.len().to_numpy()
    flat = traces["observation"].explode().to_numpy().astype(np.float32)
    obs = np.zeros((n, net.input_dim), dtype=np.float32)
    obs[np.arange(net.input_dim)[None, :] < lens[:, None]] = flat  # rows are prefixes
    mlens = traces["mask"].list.len().to_numpy()
    mflat = traces["mask"].explode().to_numpy().astype(bool)
    mask = np.zeros((n, net.n_actions), dtype=bool)
    prefix = np.arange(net.n_actions)[None, :] < (mlens - 1)[:, None]
    keep = np.ones(mflat.shape[0], dtype=bool)
    ends = np.cumsum(mlens) - 1
    keep[ends] = False
    mask[prefix] = mflat[keep]  # job actions; the last entry of each row is stop
    mask[:, -1] = mflat[ends]
    action = traces["action"].to_numpy().astype(np.int64)
    if not mask[np.arange(n), action].all():
        raise ValueError("a recorded action is masked out")
    return net, {
        "obs": obs,
        "mask": mask,
        "action": action,
        "workload": traces["workload_id"].to_numpy(),
    }


def _split(
    data: dict[str, np.ndarray], frac: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    ids = np.unique(data["workload"])
    if frac <= 0 or len(ids) < 2:
        return np.arange(len(data["action"])), np.arange(0)
    n_val = min(len(ids) - 1, max(1, round(frac * len(ids))))
    val_ids = rng.permutation(ids)[:n_val]
    is_val = np.isin(data["workload"], val_ids)
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


def masked_cross_entropy(
    logits: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, stop_share: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy of masked logits against `target`, with `stop_share` of the target
    moved to stop (the last action) wherever stop is valid."""
    logp = torch.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    if stop_share == 0.0:
        return nll.mean()
    share = stop_share * mask[:, -1].float()
    return ((1.0 - share) * nll - share * logp[:, -1]).mean()


@torch.no_grad()
def _evaluate(net: PolicyNet, d: dict[str, torch.Tensor], batch: int = 8192):
    """(mean masked cross-entropy, accuracy of the greedy action)."""
    n = d["action"].shape[0]
    loss_sum, correct = 0.0, 0
    for i in range(0, n, batch):
        logits = net.masked_logits(d["obs"][i : i + batch], d["mask"][i : i + batch])
        target = d["action"][i : i + batch]
        loss_sum += float(F.cross_entropy(logits, target, reduction="sum"))
        correct += int((logits.argmax(-1) == target).sum())
    return loss_sum / max(n, 1), correct / max(n, 1)


def warmup(
    traces: pl.DataFrame,
    cfg: WarmupConfig | None = None,
    *,
    val_traces: pl.DataFrame | None = None,
    val_workloads: Sequence[Sequence[JobSpec]] | None = None,
    sim: SimConfig | None = None,
    eval_seed: int = 0,
    teacher_policy: AllocationPolicy | None = None,
    progress: ProgressFn = no_progress,
) -> tuple[DL2Policy, dict[str, Any], pl.DataFrame]:
    """Train a DL2 policy to imitate `traces`; returns (policy, metrics, curve).
    `progress(epoch, max_epochs)` is called after every epoch.

    Validation loss/accuracy use `val_traces`, else `cfg.val_fraction` of the recorded
    workloads. With `val_workloads`, the warm policy and the teacher (`teacher_policy`, default
    the heuristic the traces name) run in `sim` (default: `dl2_sim(window=J)`) with seeds from
    `eval_seed`."""
    cfg = cfg or WarmupConfig()
    start = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)

    # -- data ---------------------------------------------------------------------------
    shape, data = decode_traces(traces)
    net_cfg = DL2NetConfig(
        window=shape.window,
        models=shape.models,
        hidden=cfg.hidden,
        head=cfg.head,
        slots_scale=shape.slots_scale,
        epochs_scale=shape.epochs_scale,
        bundle_first=shape.bundle_first,
        interval_s=shape.interval_s,
        trigger=shape.trigger,
    )
    if val_traces is not None:
        val_shape, val_data = decode_traces(val_traces)
        if val_shape.obs != shape.obs or val_shape.models != shape.models:
            raise ValueError("validation traces were encoded differently")
        train_idx = np.arange(len(data["action"]))
    else:
        train_idx, val_idx = _split(data, cfg.val_fraction, rng)
        val_data = {k: v[val_idx] for k, v in data.items()}
    train = {k: torch.from_numpy(data[k][train_idx]) for k in ("obs", "mask", "action")}
    val = {k: torch.from_numpy(val_data[k]) for k in ("obs", "mask", "action")}
    has_val = val["action"].shape[0] > 0
    n_train = train["action"].shape[0]
    if n_train == 0:
        raise ValueError("no training decisions")

    # -- network and optimizer ------------------------------------------------------------
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        net = PolicyNet(net_cfg)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)

    # -- epochs -----------------------------------------------------------------------------
    rows: list[dict[str, Any]] = []
    best_loss, best_state, best_epoch, stale = float("inf"), None, 0, 0
    with Progress(disable=not cfg.progress, transient=True) as bar:
        task = bar.add_task("DL2 warm-up", total=cfg.max_epochs)
        for epoch in range(1, cfg.max_epochs + 1):
            net.train()
            perm = torch.from_numpy(rng.permutation(n_train))
            total = 0.0
            for i in range(0, n_train, cfg.batch_size):
                idx = perm[i : i + cfg.batch_size]
                logits = net.masked_logits(train["obs"][idx], train["mask"][idx])
                loss = masked_cross_entropy(
                    logits, train["mask"][idx], train["action"][idx], cfg.stop_smoothing
                )
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            net.eval()
            train_loss = total / n_train
            val_loss, val_acc = _evaluate(net, val) if has_val else (train_loss, float("nan"))
            rows.append(
                {
                    "phase": "warmup",
                    "step": epoch,
                    "wall_s": time.perf_counter() - start,
                    "train_loss": train_loss,
                    "val_loss": val_loss if has_val else None,
                    "val_accuracy": val_acc if has_val else None,
                }
            )
            bar.update(task, advance=1, description=f"DL2 warm-up loss {val_loss:.4f}")
            progress(epoch, cfg.max_epochs)
            if val_loss < best_loss - cfg.min_delta:
                best_loss, best_epoch, stale = val_loss, epoch, 0
                best_state = {k: v.clone() for k, v in net.state_dict().items()}
            else:
                stale += 1
            out_of_time = cfg.max_wall_s is not None and rows[-1]["wall_s"] > cfg.max_wall_s
            if stale >= cfg.patience or out_of_time:
                break
    if best_state is not None:
        net.load_state_dict(best_state)

    # -- metrics ------------------------------------------------------------------------------
    train_eval = {k: v[:50_000] for k, v in train.items()}
    train_loss, train_acc = _evaluate(net, train_eval)
    val_loss, val_acc = _evaluate(net, val) if has_val else (None, None)
    teacher = traces["teacher"].unique().to_list()
    metrics: dict[str, Any] = {
        "teacher": teacher[0] if len(teacher) == 1 else teacher,
        "epochs": len(rows),
        "best_epoch": best_epoch,
        "train_decisions": n_train,
        "val_decisions": int(val["action"].shape[0]),
        "train_loss": train_loss,
        "train_accuracy": train_acc,
        "val_loss": val_loss,
        "imitation_accuracy": val_acc,
        "train_wall_s": time.perf_counter() - start,
    }
    policy = DL2Policy(net, train_config={"stage": "warmup", **to_dict(cfg)})
    if val_workloads:
        sim = sim or dl2_sim(window=net_cfg.window)
        warm = average_jct(policy, val_workloads, sim, seed=eval_seed)
        ref = average_jct(
            teacher_policy or ALLOCATIONS.create(metrics["teacher"]),
            val_workloads,
            sim,
            seed=eval_seed,
        )
        metrics.update(val_avg_jct_s=warm, teacher_avg_jct_s=ref, jct_vs_teacher=warm / ref - 1.0)
    curve = pl.DataFrame(rows).with_columns(pl.col("step").cast(pl.Int32))
    for name in CURVE_COLUMNS:
        if name not in curve.columns:
            curve = curve.with_columns(pl.lit(None, dtype=pl.Float64).alias(name))
    curve = curve.select(CURVE_COLUMNS).with_columns(pl.col("episodes").cast(pl.Int32))
    return policy, metrics, curve
