"""Harmony's placement decisions: the policy network, the server rules of its baselines and
exploration, and the decision loop they share.

Every placement here, learned or heuristic, is built the same way, one task at a time on a
`tracelib.envs.observation.PlacementDraft` and only through its action mask (2N'M actions:
job i's worker or PS on server m), so no scheduler can place over capacity or leave a job
half placed, and all of them see the same job-completeness rule as the DRL environment: a
job runs once all its requested workers and PSs are placed, else it waits.

Server rules (`RULES`), each picking among the servers the mask allows for a given task:
    load-balancing  least load: used share summed over GPU, CPU, memory (Harmony's LB)
    bin-packing     least capacity left (Harmony's exploration: "a machine with least
                    capacity left (where the worker or PS can still be accommodated)")
    tetris          Tetris' packing score: demand . free, both as shares of the server
    lif-line/-quad  least rise of LIF's predicted interference (`models.heuristics.lif`)
Heuristic drivers place jobs in arrival order (the first job that still fits), its tasks
alternating worker / PS.

The networks: each job row and each server row of the observation (`encode_placement`)
goes through its own fully connected layer (shared across rows). The paper's policy (Fig.
7, `head="flat"`) concatenates the results and maps them through the hidden layers (paper:
196, 196, 128) to 2N'M logits; the default (`head="pair"`) runs the same hidden layers on
each (job, server) pair instead, so a logit is computed from the job and the server it is
about wherever they sit in the observation. Invalid actions are masked to probability 0.
The value network is the flat body with one linear output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from models.harmony.config import HarmonyNetConfig
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.envs.environments import PlacementEnv
from tracelib.envs.observation import (
    PlacementActions,
    PlacementDraft,
    PlacementEncoding,
    PlacementObsConfig,
    placement_job_features,
    placement_server_features,
)
from tracelib.sim.cluster import row_classes
from tracelib.sim.snapshot import Allocation, JobPlacement, JobView, Placement, Snapshot

MASKED = torch.finfo(torch.float32).min
"""Logit of an invalid action: the lowest float32, so no valid logit can fall below it
however far training pushes the logits (with a fixed -1e9, logits beyond it let masked
actions be sampled)."""
MIN_ROWS = 4
"""Fewest rows `_PairBody.cell_scores` hands the pair MLP: torch's matrix product of 1 to 3
rows takes another kernel than that of more rows, whose sums can differ in the last bit."""

Rule = Callable[[PlacementDraft, int, int, np.ndarray], int]
"""(draft, job row, role, allowed servers) -> server."""


def _shares(draft: PlacementDraft) -> tuple[np.ndarray, np.ndarray]:
    cap = np.asarray(draft.snap.cluster.capacity, dtype=float)
    inv = np.divide(1.0, cap, out=np.zeros_like(cap), where=cap > 0)
    return cap, inv


def load_balancing(draft: PlacementDraft, i: int, role: int, allowed: np.ndarray) -> int:
    """Least-loaded allowed server (used share summed over resources; ties: lowest)."""
    cap, inv = _shares(draft)
    load = ((cap - draft.free) * inv).sum(axis=1)
    return int(allowed[np.argmin(np.round(load[allowed], 9))])


def bin_packing(draft: PlacementDraft, i: int, role: int, allowed: np.ndarray) -> int:
    """Allowed server with the least capacity left (free share summed; ties: lowest)."""
    _, inv = _shares(draft)
    left = (draft.free * inv).sum(axis=1)
    return int(allowed[np.argmin(np.round(left[allowed], 9))])


def tetris(draft: PlacementDraft, i: int, role: int, allowed: np.ndarray) -> int:
    """Tetris' alignment: the allowed server maximizing demand . free (shares)."""
    _, inv = _shares(draft)
    score = (draft.free * inv) @ (draft.demand(i, role) * inv[0])
    return int(allowed[np.argmax(np.round(score[allowed], 9))])


@dataclass(frozen=True, eq=False)
class LIFRule:
    """Least Interference First: the allowed server where LIF's predicted interference
    (summed job slowdowns, `LIFPlacement.increase`) rises least; ties: the job's own
    servers, then the lowest index."""

    lif: Any
    """A `models.heuristics.lif.LIFPlacement`."""

    def __call__(self, draft: PlacementDraft, i: int, role: int, allowed: np.ndarray) -> int:
        snap = draft.snap
        views = list(snap.fixed_jobs) + list(draft.jobs)
        types = np.array([v.type_index for v in views], dtype=np.int64)
        counts = np.zeros((snap.cluster.n_servers, len(views)))
        for k, v in enumerate(snap.fixed_jobs):
            np.add.at(counts[:, k], list(v.placement.workers + v.placement.ps), 1)
        base = len(snap.fixed_jobs)
        for r, (w_on, p_on) in enumerate(draft.placed):
            np.add.at(counts[:, base + r], w_on + p_on, 1)
        delta = self.lif.increase(counts, types, base + i)
        order = np.lexsort((allowed, -counts[allowed, base + i], np.round(delta[allowed], 12)))
        return int(allowed[order[0]])


def lif_rule(kind: str) -> LIFRule:
    """LIF-Line ("line") or LIF-Quad ("quad") fitted on the default sample set."""
    from models.heuristics.lif import LIFPlacement, default_model

    return LIFRule(LIFPlacement(default_model(kind)))


RULES: dict[str, Callable[[], Rule]] = {
    "load-balancing": lambda: load_balancing,
    "tetris": lambda: tetris,
    "lif-line": lambda: lif_rule("line"),
    "lif-quad": lambda: lif_rule("quad"),
    "bin-packing": lambda: bin_packing,
}


def next_task(
    draft: PlacementDraft, mask: np.ndarray, order: Sequence[int] | None = None
) -> tuple[int, int] | None:
    """The (job row, role) a heuristic places next: the first job with an allowed task
    (in row order, i.e. arrival, or in `order`, a permutation of the draft's rows), workers
    and PSs alternating (the kind with more still to place first)."""
    allowed = mask.any(axis=2)  # (N', 2)
    rows = [i for i in (range(len(draft.jobs)) if order is None else order) if allowed[i].any()]
    if not rows:
        return None
    i = int(rows[0])
    first = 0 if draft.need[i, 0] >= draft.need[i, 1] else 1
    role = first if allowed[i, first] else 1 - first
    return i, role


def decision_of(draft: PlacementDraft) -> tuple[Allocation, Placement]:
    """The decision a finished draft stands for: the jobs with every task placed."""
    rows = draft.complete()
    alloc = Allocation.of(
        {draft.jobs[i].job_id: (len(draft.placed[i][0]), len(draft.placed[i][1])) for i in rows}
    )
    placement = Placement.of(
        {draft.jobs[i].job_id: JobPlacement.of(*draft.placed[i]) for i in rows}
    )
    return alloc, placement


JobKey = Callable[[JobView, Snapshot], float]
"""A job order: the waiting job with the smallest key is placed first (ties: arrival)."""

Step = Callable[[PlacementDraft, np.ndarray, int], None]
"""Called before each task is placed: (draft, action mask (2N'M,), the action taken)."""


def _remaining_iterations(job: JobView, snap: Snapshot) -> float:
    return job.remaining_epochs_est * snap.catalogue[job.type_index].iters_per_epoch


ORDERS: dict[str, JobKey | None] = {
    "arrival": None,
    "shortest": _remaining_iterations,
    "smallest-area": lambda job, snap: (
        _remaining_iterations(job, snap) * (job.requested_workers + job.requested_ps)
    ),
    "newest": lambda job, snap: -job.arrival_s,
}
"""Job orders a rule may place the waiting jobs in (the smallest key first; Harmony's
baselines: arrival). Work is what a scheduler knows: the user's epoch estimate times the
model's iterations per epoch ("shortest"), times the job's tasks ("smallest-area")."""


def place_in_order(
    snap: Snapshot,
    obs: PlacementObsConfig,
    rule: Rule,
    key: JobKey | None = None,
    on_step: Step | None = None,
) -> tuple[Allocation, Placement]:
    """The heuristics' decision loop: waiting jobs in arrival order (`next_task`), or by
    `key`, each task on the server `rule` picks among those the mask allows, until nothing
    more fits. `on_step` sees every step as a policy action (a teacher's recording)."""
    draft = PlacementDraft.start(snap, PlacementEnv.requested(snap), obs.window)
    actions = PlacementActions(obs.window, snap.cluster.n_servers)
    order = None
    if key is not None:  # sorted() is stable: equal keys stay in arrival order
        order = sorted(range(len(draft.jobs)), key=lambda i: key(draft.jobs[i], snap))
    while True:
        flat = draft.mask(obs)
        mask = actions.grid(flat)  # (N', 2, M)
        task = next_task(draft, mask, order)
        if task is None:
            break
        i, role = task
        server = rule(draft, i, role, np.flatnonzero(mask[i, role]))
        if on_step is not None:
            on_step(draft, flat, actions.of(i, role, server))
        draft.place(i, role, server)
    return decision_of(draft)


@dataclass(frozen=True, eq=False)
class RulePlacement:
    """A Harmony baseline as a simulator decision policy (fixed placement mode)."""

    rule_name: str
    obs: PlacementObsConfig = field(default_factory=PlacementObsConfig)
    interval_s: float | None = None
    uses_oracle: bool = False
    order: str = "arrival"
    """Job order (`ORDERS`); the paper's baselines: arrival."""

    def __post_init__(self) -> None:
        if self.rule_name not in RULES:
            raise ValueError(
                f"unknown placement rule {self.rule_name!r}; known: {', '.join(RULES)}"
            )
        if self.order not in ORDERS:
            raise ValueError(f"unknown job order {self.order!r}; known: {', '.join(ORDERS)}")
        object.__setattr__(self, "_rule", RULES[self.rule_name]())

    @classmethod
    def named(cls, name: str, **kwargs: Any) -> RulePlacement:
        """The heuristic called `name`: a rule of `RULES`, or "<rule>/<order>"."""
        rule, _, order = name.partition("/")
        return cls(rule, order=order or "arrival", **kwargs)

    @property
    def name(self) -> str:
        """The rule's name, "/<order>" appended unless arrival."""
        return self.rule_name if self.order == "arrival" else f"{self.rule_name}/{self.order}"

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Place waiting jobs task by task with the rule, in the job order: the whole queue
        sorted, not only the first `obs.window` jobs of it (what a network sees)."""
        key = ORDERS[self.order]
        if key is not None:
            snap = replace(snap, jobs=tuple(sorted(snap.jobs, key=lambda job: key(job, snap))))
        return place_in_order(snap, self.obs, self._rule)


# -- networks ------------------------------------------------------------------------------


class _Body(nn.Module):
    """(B, obs_dim) -> (B, out): per-row layers, merge, hidden layers, linear output."""

    def __init__(self, cfg: HarmonyNetConfig, out: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.job = nn.Linear(cfg.job_features, cfg.row_embed)
        self.server = nn.Linear(cfg.server_features, cfg.row_embed)
        layers: list[nn.Module] = []
        width = (cfg.window + cfg.n_servers) * cfg.row_embed
        for h in cfg.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, out))
        self.head = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        split = c.window * c.job_features
        jobs = obs[:, :split].reshape(-1, c.window, c.job_features)  # (B, N', Fj)
        servers = obs[:, split:].reshape(-1, c.n_servers, c.server_features)  # (B, M, Fs)
        merged = torch.cat(
            [torch.relu(self.job(jobs)).flatten(1), torch.relu(self.server(servers)).flatten(1)],
            dim=1,
        )  # (B, (N' + M) * E)
        return self.head(merged)


class _PairBody(nn.Module):
    """(B, obs_dim) -> (B, 2N'M): one shared MLP scores every (job, server) pair."""

    def __init__(self, cfg: HarmonyNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.base = cfg.server_features - 2 * cfg.window  # free resources + per-model tasks
        e = cfg.row_embed
        self.job = nn.Linear(cfg.job_features, e)
        self.server = nn.Linear(self.base, e)
        self.summary = nn.Linear(2 * e, e)
        layers: list[nn.Module] = []
        width = 3 * e + 2
        for h in cfg.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 2))
        self.head = nn.Sequential(*layers)

    def _embed(
        self, obs: torch.Tensor, classes: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, obs_dim) -> job embeddings (B, N', E), server embeddings (B, M, E), each
        pair's per-model task counts (B, N', M, 2) and the context (B, E). `classes`, for
        B = 1: each server's class (M,) and one server of each class (K,), servers of a
        class having equal rows; their rows are embedded once (the same numbers)."""
        c = self.cfg
        b, n, m = obs.shape[0], c.window, c.n_servers
        split = n * c.job_features
        jobs = obs[:, :split].reshape(b, n, c.job_features)  # (B, N', Fj)
        servers = obs[:, split:].reshape(b, m, c.server_features)  # (B, M, Fs)
        d = servers[:, :, self.base :].reshape(b, m, n, 2).transpose(1, 2)  # (B, N', M, 2)
        je = torch.relu(self.job(jobs))  # (B, N', E)
        if classes is None:
            se = torch.relu(self.server(servers[:, :, : self.base]))  # (B, M, E)
        else:
            which, first = classes
            if len(first) < MIN_ROWS:  # see MIN_ROWS: repeats, never read
                first = np.concatenate([first, np.repeat(first[:1], MIN_ROWS - len(first))])
            once = torch.relu(self.server(servers[0, torch.from_numpy(first), : self.base]))
            se = once[torch.from_numpy(which)][None]  # (1, M, E)
        ctx = torch.relu(self.summary(torch.cat([je.mean(1), se.mean(1)], dim=1)))  # (B, E)
        return je, se, d, ctx

    def cell_scores(self, obs: torch.Tensor, cells: np.ndarray) -> np.ndarray:
        """(1, obs_dim), (N', M) bool -> (P, 2) float32: the worker and PS logits of the P
        (job row, server) cells in `cells`, in `np.nonzero` order, each `forward`'s bit for
        bit. Inference only.

        Most servers look alike to a job (idle ones, or those holding none of the window's
        tasks at the same load), and a pair's logits depend only on its input, so each
        distinct pair input is scored once: on a 236-server cluster, tens of rows instead
        of hundreds per inference. A product of 1 to 3 rows takes another kernel whose sums
        can differ in the last bit, so at least `MIN_ROWS` rows are scored (repeats)."""
        c = self.cfg
        n, m = c.window, c.n_servers
        # A cell's input is its row's job embedding, its server's embedding, their task
        # counts and the context. Servers with equal observation rows (their resources and
        # every window job's tasks there) form one class, embedded once, and cells of one
        # row and one class have the same input. Cells of two classes may still share an
        # input; they are scored twice, to the same bits.
        rows = obs[0, n * c.job_features :].reshape(m, c.server_features).numpy()  # (M, Fs)
        server_class, first_server = row_classes(rows)
        je, se, _, ctx = self._embed(obs, (server_class, first_server))
        ni, mi = np.nonzero(cells)  # P cells
        k = len(first_server)
        pair = ni * k + server_class[mi]  # (P,) its (row, class) pair
        present = np.zeros(n * k, dtype=bool)
        present[pair] = True
        kinds = np.flatnonzero(present)  # U distinct pairs
        which = (np.cumsum(present) - 1)[pair]  # (P,) each cell's pair among them
        dn, dm = kinds // k, first_server[kinds % k]  # a cell of each
        # The pair MLP's input rows, copied in numpy (a few calls instead of torch's gathers):
        # job embedding, server embedding, the job's tasks on the server, context.
        e = c.row_embed
        distinct = np.zeros((max(len(kinds), MIN_ROWS), 3 * e + 2), dtype=np.float32)
        distinct[: len(kinds), :e] = je[0].numpy()[dn]
        distinct[: len(kinds), e : 2 * e] = se[0].numpy()[dm]
        distinct[: len(kinds), 2 * e : 2 * e + 2] = rows[
            dm[:, None], self.base + 2 * dn[:, None] + (0, 1)
        ]
        distinct[:, 2 * e + 2 :] = ctx[0].numpy()
        distinct[len(kinds) :] = distinct[0]  # see MIN_ROWS: repeats, never read
        x = torch.from_numpy(distinct)
        for layer in self.head:  # `self.head(x)` without each module call's hook handling
            x = layer.forward(x)
        return x.numpy()[which]  # (P, 2)

    def forward(self, obs: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of every action; with `rows` (B, N') bool, only the pairs of those job
        rows are scored and the other rows' logits are 0 (the caller masks them): a
        decision allows the tasks of one job at a time, so on a 96-server cluster this
        scores M pairs instead of N'M."""
        c = self.cfg
        b, n, m, e = obs.shape[0], c.window, c.n_servers, c.row_embed
        je, se, d, ctx = self._embed(obs)
        if rows is None:
            rows = torch.ones(b, n, dtype=torch.bool)
        bi, ni = rows.nonzero(as_tuple=True)  # K scored (sample, job row) pairs
        k = bi.shape[0]
        pairs = torch.cat(
            [
                je[bi, ni][:, None].expand(k, m, e),
                se[bi],
                d[bi, ni],
                ctx[bi][:, None].expand(k, m, e),
            ],
            dim=-1,
        )  # (K, M, 3E + 2)
        out = obs.new_zeros(b, n, m, 2)
        out = out.index_put((bi, ni), self.head(pairs))  # (B, N', M, 2): worker, PS logit
        return out.permute(0, 1, 3, 2).reshape(b, 2 * n * m)  # action (2i + role) * M + m


class PolicyNet(nn.Module):
    """pi(a | s) over 2N'M placement actions."""

    def __init__(self, cfg: HarmonyNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.body = _PairBody(cfg) if cfg.head == "pair" else _Body(cfg, cfg.n_actions)

    def masked_logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, obs_dim), (B, 2N'M) bool -> (B, 2N'M), invalid at MASKED."""
        if self.cfg.head == "pair":
            c = self.cfg
            rows = mask.reshape(-1, c.window, 2 * c.n_servers).any(dim=2)  # (B, N')
            return self.body(obs, rows).masked_fill(~mask, MASKED)
        return self.body(obs).masked_fill(~mask, MASKED)

    def distribution(self, obs: torch.Tensor, mask: torch.Tensor) -> Categorical:
        return Categorical(logits=self.masked_logits(obs, mask))

    def greedy_action(
        self,
        obs: torch.Tensor,
        mask: np.ndarray,
        allows: Callable[[int, int, int], bool] | None = None,
    ) -> int | None:
        """The argmax of `masked_logits(obs, mask)` (the lowest action among equal logits)
        for one observation (1, obs_dim) and its mask (2N'M,) bool with some action
        allowed. With `allows` (`PlacementDraft.candidates`), `mask` is a superset of the
        allowed actions and `allows(i, role, server)` tells which are: the best action it
        allows, None if it allows none. The pair head reads the candidates' logits from
        `cell_scores` without laying out all 2N'M of them. Inference only: training's
        gradients keep `masked_logits`' sums."""
        c = self.cfg
        n, m = c.window, c.n_servers
        allowed = np.flatnonzero(mask)  # ascending, as the argmax breaks ties
        row_role, server = np.divmod(allowed, m)
        if c.head == "pair":
            cells = mask.reshape(n, 2, m).any(axis=1)  # (N', M)
            scores = self.body.cell_scores(obs, cells)  # (P, 2)
            at = np.zeros((n, m), dtype=np.intp)
            at[cells] = np.arange(len(scores))
            values = scores[at[row_role >> 1, server], row_role & 1]
        else:
            values = self.masked_logits(obs, torch.from_numpy(mask)[None])[0].numpy()[allowed]
        best = int(np.argmax(values))
        if allows is None:
            return int(allowed[best])

        def ok(k: int) -> bool:
            rr = int(row_role[k])
            return allows(rr >> 1, rr & 1, int(server[k]))

        if ok(best):  # the common case: the best candidate is allowed
            return int(allowed[best])
        # Best first, equal logits in action order (a stable sort): the first allowed one is
        # the argmax over the allowed actions.
        for k in np.argsort(-values, kind="stable"):
            if ok(k):
                return int(allowed[k])
        return None


class ValueNet(nn.Module):
    """V(s): the policy's architecture with one linear output."""

    def __init__(self, cfg: HarmonyNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.body = _Body(cfg, 1)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, obs_dim) -> (B,)."""
        return self.body(obs).squeeze(-1)


def check_catalogue(cfg: HarmonyNetConfig) -> None:
    """The observation's feature counts must match the network's."""
    jf = len(placement_job_features(DL2_CATALOGUE))
    sf = len(placement_server_features(DL2_CATALOGUE, cfg.obs_config()))
    if (jf, sf) != (cfg.job_features, cfg.server_features):
        raise ValueError(
            f"observation has {jf}/{sf} features, network {cfg.job_features}/{cfg.server_features}"
        )


@dataclass(eq=False)
class HarmonyPolicy:
    """A trained Harmony placement policy as a simulator decision policy: each interval,
    repeated greedy inferences place the waiting jobs' tasks until the mask is empty."""

    net: PolicyNet
    value_net: ValueNet | None = None
    name: str = "harmony"
    train_config: dict[str, Any] = field(default_factory=dict)
    interval_s: float | None = None
    uses_oracle: bool = False

    @property
    def cfg(self) -> HarmonyNetConfig:
        return self.net.cfg

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Greedy placement of the waiting jobs."""
        return self.place_counts(snap, PlacementEnv.requested(snap))

    def place_counts(
        self, snap: Snapshot, counts: dict[int, tuple[int, int]]
    ) -> tuple[Allocation, Placement]:
        """Greedy placement of `counts` (job id -> workers, PSs) of the first N' of
        `snap.jobs` among `snap.fixed_jobs`: the argmax action until the mask is empty;
        jobs with every task placed make the decision."""
        obs_cfg = self.cfg.obs_config()
        draft = PlacementDraft.start(snap, counts, obs_cfg.window)
        actions = PlacementActions(obs_cfg.window, snap.cluster.n_servers)
        encoding = PlacementEncoding(draft, obs_cfg)
        obs = torch.from_numpy(encoding.obs)[None]  # shares its memory: current at each step
        with torch.no_grad():
            while True:
                # Only the best candidates are checked (`PlacementDraft.candidates`):
                # the same action as the argmax over `draft.mask`.
                candidates, allows = draft.candidates(obs_cfg)
                if not candidates.any():
                    break
                action = self.net.greedy_action(obs, candidates, allows)
                if action is None:
                    break
                i, role, server = actions.decode(action)
                draft.place(i, role, server)
                encoding.placed(i, server)
        return decision_of(draft)

    def resized(self, n_servers: int, window: int) -> HarmonyPolicy:
        """This policy for a cluster of `n_servers` and a window of `window` jobs: the pair
        head's weights do not depend on either (only its reshapes do), so they are kept;
        the flat value network does, so it is dropped unless the shapes are unchanged.
        ValueError for the flat head, whose weights fix both."""
        cfg = replace(self.cfg, n_servers=n_servers, window=window)
        if cfg == self.cfg:
            return self
        if cfg.head != "pair":
            raise ValueError(
                f"a {cfg.head!r}-head policy is sized for {self.cfg.n_servers} servers and a "
                f"window of {self.cfg.window}; only the pair head can be resized"
            )
        net = PolicyNet(cfg)
        net.load_state_dict(self.net.state_dict(), strict=True)
        return HarmonyPolicy(net, None, self.name, dict(self.train_config))

    def checkpoint_config(self) -> dict[str, Any]:
        return {"net": asdict(self.cfg), "train": self.train_config}

    def save(self, path, meta=None) -> str:
        """Weights-only checkpoint of both networks; returns its sha256."""
        from models.checkpoints import save_checkpoint

        state = {"policy": self.net.state_dict()}
        if self.value_net is not None:
            state["value"] = self.value_net.state_dict()
        system = self.train_config.get("system", "harmony")
        return save_checkpoint(
            path, system=system, config=self.checkpoint_config(), state=state, meta=meta
        )


def policy_from_checkpoint(ckpt, name: str | None = None) -> HarmonyPolicy:
    """Rebuild a `HarmonyPolicy` from a loaded checkpoint."""
    from models.checkpoints import CheckpointError

    try:
        # older checkpoints: no d, the flat head
        raw = {"job_placement": False, "head": "flat", **ckpt.config["net"]}
        cfg = HarmonyNetConfig(**{**raw, "hidden": tuple(raw["hidden"])})
        net = PolicyNet(cfg)
        net.load_state_dict(ckpt.state["policy"], strict=True)
        value = None
        if "value" in ckpt.state:
            value = ValueNet(cfg)
            value.load_state_dict(ckpt.state["value"], strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"not a Harmony placement checkpoint: {exc}") from None
    return HarmonyPolicy(
        net, value, name=name or ckpt.system, train_config=dict(ckpt.config.get("train", {}))
    )


def predicted_reward(
    draft: PlacementDraft, speed_model: Any, extra: tuple[int, int, int] | None = None
) -> float:
    """Eqn. 1's reward rate of a (partial) placement as `speed_model` predicts it: the sum
    over running jobs and the draft's jobs with a task placed of speed / iterations per
    epoch / total epochs (per second), with `extra` = (job row, role, server) added."""
    snap = draft.snap
    iters = {jt.type_index: jt.iters_per_epoch for jt in snap.catalogue}
    types, ws, ps, places, epochs = [], [], [], [], []
    for v in snap.fixed_jobs:
        types.append(v.type_index)
        ws.append(v.workers)
        ps.append(v.ps)
        places.append(v.placement)
        epochs.append(v.epochs_est)
    for k, job in enumerate(draft.jobs):
        w_on, p_on = list(draft.placed[k][0]), list(draft.placed[k][1])
        if extra is not None and k == extra[0]:
            (w_on if extra[1] == 0 else p_on).append(extra[2])
        if not w_on and not p_on:
            continue
        types.append(job.type_index)
        ws.append(max(len(w_on), 1))
        ps.append(max(len(p_on), 1))
        places.append(JobPlacement.of(w_on, p_on))
        epochs.append(job.epochs_est)
    if not types:
        return 0.0
    speed = speed_model.placed(types, ws, ps, places, snap.cluster.n_servers)
    return float(sum(s / iters[t] / e for s, t, e in zip(speed, types, epochs, strict=True)))


@dataclass(frozen=True, eq=False)
class GreedySpeedPlacement:
    """Reference, not a baseline of the paper: each task (in the heuristics' order) goes to
    the allowed server that maximizes the interval reward (Eqn. 1, sum over placed jobs of
    speed / iterations per epoch / epochs) as `speed_model` predicts it, with the jobs
    placed so far. With the true speed model it is the one-step optimum of Harmony's own
    reward; with the reward predictor it shows how well the predictor ranks placements."""

    speed_model: Any
    """A `PlacedSpeedModel` (the simulator's `SpeedModel`, or a `RewardPredictor`)."""
    name: str = "greedy"
    obs: PlacementObsConfig = field(default_factory=PlacementObsConfig)
    interval_s: float | None = None
    uses_oracle: bool = False

    def _best(self, draft: PlacementDraft, i: int, role: int, allowed: np.ndarray) -> int:
        scores = [predicted_reward(draft, self.speed_model, (i, role, int(s))) for s in allowed]
        return int(allowed[int(np.argmax(scores))])

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Place waiting jobs task by task, each where the predicted reward is highest."""
        return place_in_order(snap, self.obs, self._best)
