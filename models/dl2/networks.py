"""DL2's policy and value networks (section 4.1), built from a `DL2NetConfig`.

    head "flat" (DL2):
    obs (B, J*F) -> Linear -> ReLU -> ... (config.hidden) -> Linear -> (B, 3J+1) logits
    value network: the same body, one linear output (no activation).

    head "rows" (not in the paper): one network shared by the J job rows
    obs (B, J*F) -> (B, J, F) -> Linear -> ReLU -> ... (config.hidden) -> h (B, J, H)
      row logits  h -> Linear(H, 3) -> (B, 3J)       stop  mean_J(h) -> Linear(H, 1)
    value network: its own rows trunk, mean_J(h) -> Linear(H, 1).

The observation is `tracelib.envs.observation.encode_allocation` flattened; masks come from
`allocation_mask`. Invalid actions get probability 0: their logits are replaced by a large
negative number before the softmax, in training and in inference alike.

`FastPolicy` is a numpy copy of a flat policy network for the scheduling hot path: one
decision is tens to hundreds of inferences, each changing one job row, so the first layer's
pre-activation is updated from the three changed inputs instead of recomputed. `FastRows`
is the same for the rows head: an action recomputes the acted row alone (its three logits
and its share of the stop logit). `fast_policy(net)` gives the one that fits the network.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from models.dl2.config import DL2NetConfig
from tracelib.envs.observation import ACTION_KINDS, AllocationActions, allocation_mask
from tracelib.sim.builder import AllocationBuilder

MASKED = -1e9
"""Logit of an invalid action (exp underflows to exactly 0 in float32)."""


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _trunk(cfg: DL2NetConfig) -> nn.Sequential:
    """The rows head's shared row network: (..., F) -> (..., H), ReLU after every layer."""
    return nn.Sequential(*_mlp([cfg.n_features, *cfg.hidden]), nn.ReLU())


class RowsHead(nn.Module):
    """The rows head's logits (see the module docstring). (B, J*F) -> (B, 3J + 1)."""

    def __init__(self, cfg: DL2NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.trunk = _trunk(cfg)
        self.out = nn.Linear(cfg.hidden[-1], ACTION_KINDS)
        self.stop = nn.Linear(cfg.hidden[-1], 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hid = self.trunk(obs.view(obs.shape[0], self.cfg.window, self.cfg.n_features))  # (B,J,H)
        # (B, J, 3) -> (B, 3J): row i's kinds at 3i + kind, `AllocationActions`' layout
        per_row = self.out(hid).reshape(obs.shape[0], -1)
        return torch.cat([per_row, self.stop(hid.mean(1))], -1)  # (B, 3J + 1)


class PooledValue(nn.Module):
    """The rows head's value: mean over rows of the shared row network. (B, J*F) -> (B, 1)."""

    def __init__(self, cfg: DL2NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.trunk = _trunk(cfg)
        self.out = nn.Linear(cfg.hidden[-1], 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hid = self.trunk(obs.view(obs.shape[0], self.cfg.window, self.cfg.n_features))
        return self.out(hid.mean(1))


def _body(cfg: DL2NetConfig, rows: type[nn.Module], outputs: int) -> nn.Module:
    """A network's body for `cfg.head`: the row-wise module `rows`, or an MLP from the
    flat observation to `outputs` values."""
    if cfg.head == "rows":
        return rows(cfg)
    return _mlp([cfg.input_dim, *cfg.hidden, outputs])


class PolicyNet(nn.Module):
    """pi(a | s): masked softmax over 3J + 1 actions."""

    def __init__(self, cfg: DL2NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.body = _body(cfg, RowsHead, cfg.n_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, J*F) -> (B, 3J+1) unmasked logits."""
        return self.body(obs)

    def masked_logits(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, J*F), (B, 3J+1) bool -> (B, 3J+1) logits, invalid ones at MASKED."""
        return self.forward(obs).masked_fill(~mask, MASKED)

    def distribution(self, obs: torch.Tensor, mask: torch.Tensor) -> Categorical:
        """The masked action distribution."""
        return Categorical(logits=self.masked_logits(obs, mask))

    def get_action(
        self, obs: torch.Tensor, mask: torch.Tensor, greedy: bool = False
    ) -> torch.Tensor:
        """(B,) actions: sampled, or the most likely valid one."""
        logits = self.masked_logits(obs, mask)
        if greedy:
            return logits.argmax(dim=-1)
        return Categorical(logits=logits).sample()


class ValueNet(nn.Module):
    """V(s): the policy network's body with one linear output."""

    def __init__(self, cfg: DL2NetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.body = _body(cfg, PooledValue, 1)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, J*F) -> (B,)."""
        return self.body(obs).squeeze(-1)

    forward = get_value


def needy_rows(builder: AllocationBuilder, mask: np.ndarray, window: int) -> list[int]:
    """Rows of the first `window` jobs still lacking a worker or a PS whose worker+PS pair
    is valid in the (exact) encoder `mask`."""
    workers, ps = builder.workers, builder.ps
    both = AllocationActions(window).add_both
    return [
        i
        for i in range(min(len(workers), window))
        if (workers[i] == 0 or ps[i] == 0) and mask[both(i)]
    ]


def bundle_mask(mask: np.ndarray, needy: list[int], actions: AllocationActions) -> np.ndarray:
    """While jobs wait for their first bundle, only their worker+PS pairs are valid."""
    out = np.zeros_like(mask)
    for i in needy:
        out[actions.add_both(i)] = True
    return out


def acting_mask(
    mask: np.ndarray, builder: AllocationBuilder | None, cfg: DL2NetConfig
) -> np.ndarray:
    """The encoder's `mask` restricted to the jobs' first worker+PS pairs while some job
    waits for one (`bundle_first`; no builder: no decision open, `mask` as it is)."""
    if cfg.bundle_first and builder is not None:
        needy = needy_rows(builder, mask, cfg.window)
        if needy:
            return bundle_mask(mask, needy, cfg.actions)
    return mask


def policy_mask(builder: AllocationBuilder, cfg: DL2NetConfig) -> np.ndarray:
    """(3J + 1,) actions a DL2 policy may take: the encoder's mask, restricted to the jobs'
    first worker+PS pairs while some job waits for one (`bundle_first`)."""
    return acting_mask(allocation_mask(builder, cfg.obs), builder, cfg)


def masked_log_prob(logits: np.ndarray, mask: np.ndarray, action: int) -> float:
    """log pi(action) under the masked softmax of `logits` (what PPO's ratio compares with)."""
    z = np.where(mask, logits, -np.inf)
    top = z.max()
    return float(z[action] - top - np.log(np.exp(z - top).sum()))


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) entropy of the masked distribution (invalid actions contribute nothing)."""
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    return -(p * logp).masked_fill(~mask, 0.0).sum(dim=-1)


class FastPolicy:
    """Numpy inference of a flat `PolicyNet` (a frozen copy of its weights), single state at
    a time.

    `start(obs)` computes the first layer's pre-activation of a full observation;
    `changed(pre, index, delta)` updates it after some inputs changed; `logits(pre)` runs the
    rest of the network (into buffers reused across calls: copy what you keep)."""

    def __init__(self, net: PolicyNet) -> None:
        linears = [m for m in net.body if isinstance(m, nn.Linear)]
        with torch.no_grad():
            self.w = [m.weight.detach().numpy().T.astype(np.float32) for m in linears]
            self.b = [m.bias.detach().numpy().astype(np.float32) for m in linears]
        self._h = [np.empty(w.shape[1], dtype=np.float32) for w in self.w]
        # ReLU as a maximum against an array of zeros: the same bits as against the scalar
        # 0.0 (signed zeros, NaN and infinities included), at half the call's cost.
        self._zeros = [np.zeros(w.shape[1], dtype=np.float32) for w in self.w]

    def start(self, obs: np.ndarray) -> np.ndarray:
        """(J*F,) observation -> (H1,) first-layer pre-activation."""
        return obs.astype(np.float32) @ self.w[0] + self.b[0]

    def changed(self, pre: np.ndarray, index: slice, delta: np.ndarray) -> None:
        """In place: inputs `index` of the observation changed by `delta` (float32)."""
        pre += delta.astype(np.float32, copy=False) @ self.w[0][index]

    def inputs(self, index: slice) -> np.ndarray:
        """The first layer's weights of inputs `index`, (len, H1): `changed` is
        `pre += delta @ inputs(index)` (a view, so the same product bit for bit)."""
        return self.w[0][index]

    def logits(self, pre: np.ndarray, last_bias: np.ndarray | None = None) -> np.ndarray:
        """(H1,) pre-activation -> (3J+1,) unmasked logits; with `last_bias` (the output
        layer's bias, -inf at invalid actions: `masked_bias`) the masked ones in the same
        addition, each valid logit the same bits as unmasked."""
        h = np.maximum(pre, self._zeros[0], out=self._h[0])
        last = len(self.w) - 1
        for k in range(1, last + 1):
            out = self._h[k]
            np.dot(h, self.w[k], out=out)
            out += self.b[k] if k < last or last_bias is None else last_bias
            if k < last:
                np.maximum(out, self._zeros[k], out=out)
            h = out
        return h

    def bound_logits(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """`logits` with a last bias, as a function with the weights and buffers bound: the
        same operations in the same order (the same bits), without the per-layer loop and
        attribute lookups, for DL2's two hidden layers (other depths: `logits` itself)."""
        if len(self.w) != 3:
            return self.logits
        (_, w1, w2), (_, b1, _) = self.w, self.b
        h0, h1, out = self._h
        z0, z1 = self._zeros[0], self._zeros[1]
        dot, maximum, add = np.dot, np.maximum, np.add

        def logits(pre: np.ndarray, last_bias: np.ndarray) -> np.ndarray:
            maximum(pre, z0, out=h0)
            dot(h0, w1, out=h1)
            add(h1, b1, out=h1)
            maximum(h1, z1, out=h1)
            dot(h1, w2, out=out)
            return add(out, last_bias, out=out)

        return logits

    def masked_bias(self, valid: np.ndarray) -> np.ndarray:
        """(3J+1,) the output layer's bias where `valid`, -inf elsewhere (for `logits`)."""
        return np.where(valid, self.b[-1], np.float32(-np.inf))

    def full_logits(self, obs: np.ndarray) -> np.ndarray:
        """(J*F,) -> (3J+1,) logits, no incremental state."""
        return self.logits(self.start(obs))


_CHUNK = 8
"""Rows per matrix product when `FastRows` runs many rows: OpenBLAS splits a product of
more than 2^18 multiply-adds across threads (J = 20 rows through a 128 x 128 layer is
327,680), and its threads then spin on the other core after every such product."""


class FastRows:
    """Numpy inference of a rows-head `PolicyNet` (a frozen copy of its weights).

    `begin(obs)` runs every row of a (J, F) observation; `set_row(row, x)` reruns one row
    after its inputs changed (its three logits, and its share of the stop logit: stop is
    linear in the rows' mean hidden units, so it is the mean of each row's own term);
    `logits(bias)` adds a mask bias (0 valid, -inf invalid: `masked_bias`) to the current
    logits, into a buffer reused across calls (copy what you keep)."""

    def __init__(self, net: PolicyNet) -> None:
        if net.cfg.head != "rows":
            raise ValueError("FastRows needs a rows-head network")
        head = net.body
        linears = [m for m in head.trunk if isinstance(m, nn.Linear)]
        with torch.no_grad():
            w = [m.weight.detach().numpy().T.astype(np.float32) for m in linears]
            b = [m.bias.detach().numpy().astype(np.float32) for m in linears]
            # the row's three logits and its stop term from one product: (H, 4), (4,)
            w.append(
                np.concatenate(
                    [head.out.weight.detach().numpy().T, head.stop.weight.detach().numpy().T], 1
                ).astype(np.float32)
            )
            b.append(np.concatenate([head.out.bias.detach().numpy(), np.zeros(1, np.float32)]))
            self.b_stop = float(head.stop.bias.detach().numpy()[0])
        self.w0, self.b0 = w[0], b[0]  # (F, H0), (H0,)
        # Past the first layer, each layer's bias is a last row of its weights, multiplied
        # by a constant 1 kept at the end of the previous layer's output buffer: one product
        # per layer and no separate addition on the one-row path.
        self.w_aug = [
            np.vstack([wk, bk]).astype(np.float32) for wk, bk in zip(w[1:], b[1:], strict=True)
        ]
        self.w, self.b = w, b
        self.window = net.cfg.window
        actions = net.cfg.actions
        self._z = np.zeros(actions.n, dtype=np.float32)  # (3J + 1,) logits
        # each row's three logits in `_z`, by row (a tuple read in the per-action loop)
        self._row_logits = tuple(actions.row(i) for i in range(self.window))
        self._out = np.empty_like(self._z)
        self._terms = [0.0] * self.window  # each row's stop term
        self._total = 0.0  # their sum
        self._pre = np.empty(w[0].shape[1], dtype=np.float32)
        self._h = [np.ones(wk.shape[1] + 1, dtype=np.float32) for wk in w[:-1]]  # (Hk + 1,)
        self._act = [h[:-1] for h in self._h]  # the units, views; the last entry stays 1
        self._pres = [np.empty(wk.shape[1], dtype=np.float32) for wk in w[1:-1]]
        self._zeros = [np.zeros(wk.shape[1], dtype=np.float32) for wk in w[:-1]]
        self._last = np.empty(4, dtype=np.float32)

    def _rows(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n, F) rows -> (n, H0) first-layer pre-activations and (n, 4) each row's three
        logits and stop term."""
        pre = np.empty((len(x), self.w0.shape[1]), dtype=np.float32)
        out = np.empty((len(x), 4), dtype=np.float32)
        for at in range(0, len(x), _CHUNK):
            h = pre[at : at + _CHUNK] = x[at : at + _CHUNK].astype(np.float32) @ self.w0 + self.b0
            for w, b in zip(self.w[1:], self.b[1:], strict=True):
                h = np.maximum(h, np.float32(0.0)) @ w + b
            out[at : at + _CHUNK] = h
        return pre, out

    def begin(self, obs: np.ndarray) -> np.ndarray:
        """Every row of a (J, F) observation; returns the rows' first-layer pre-activations
        (J, H0), which `set_row_pre` takes one row at a time."""
        pre, last = self._rows(obs)
        self._z[:-1] = last[:, :3].reshape(-1)
        self._terms[:] = last[:, 3].astype(np.float64).tolist()  # in place: bound below
        self._total = sum(self._terms)
        self._z[-1] = self._total / self.window + self.b_stop
        return pre

    def set_row(self, row: int, x: np.ndarray) -> None:
        """Row `row`'s inputs are now `x` (F,) float32."""
        pre = np.dot(x, self.w0, out=self._pre)
        pre += self.b0
        self.set_row_pre(row, pre)

    def bound_set_row_pre(self) -> Callable[[int, np.ndarray], None]:
        """`set_row_pre` with the weights and buffers bound: the same operations in the same
        order, without the per-layer loop and attribute lookups, for two hidden layers (the
        run's; other depths: `set_row_pre` itself)."""
        if len(self.w_aug) != 2:
            return self.set_row_pre
        (w1, w_last), (act0, act1), (h0, h1) = self.w_aug, self._act, self._h
        (z0, z1), (pre1,), last = self._zeros, self._pres, self._last
        z, terms, window, b_stop = self._z, self._terms, self.window, self.b_stop
        row_logits = self._row_logits
        dot, maximum = np.dot, np.maximum

        def set_row_pre(row: int, pre: np.ndarray) -> None:
            maximum(pre, z0, out=act0)
            dot(h0, w1, out=pre1)
            maximum(pre1, z1, out=act1)
            dot(h1, w_last, out=last)
            z[row_logits[row]] = last[:3]
            term = float(last[3])
            self._total += term - terms[row]
            terms[row] = term
            z[-1] = self._total / window + b_stop

        return set_row_pre

    def set_row_pre(self, row: int, pre: np.ndarray) -> None:
        """Row `row`'s first-layer pre-activation is now `pre` (H0,)."""
        np.maximum(pre, self._zeros[0], out=self._act[0])
        h = self._h[0]
        for w, pre, act, zero, nxt in zip(
            self.w_aug[:-1], self._pres, self._act[1:], self._zeros[1:], self._h[1:], strict=True
        ):
            np.dot(h, w, out=pre)
            np.maximum(pre, zero, out=act)
            h = nxt
        last = np.dot(h, self.w_aug[-1], out=self._last)
        self._z[self._row_logits[row]] = last[:3]
        term = float(last[3])
        self._total += term - self._terms[row]
        self._terms[row] = term
        self._z[-1] = self._total / self.window + self.b_stop

    def logits(self, bias: np.ndarray) -> np.ndarray:
        """(3J+1,) current logits plus `bias` (a buffer: copy what you keep)."""
        return np.add(self._z, bias, out=self._out)

    @staticmethod
    def masked_bias(valid: np.ndarray) -> np.ndarray:
        """(3J+1,) 0 where `valid`, -inf elsewhere (for `logits`)."""
        return np.where(valid, np.float32(0.0), np.float32(-np.inf))

    def full_logits(self, obs: np.ndarray) -> np.ndarray:
        """(J*F,) -> (3J+1,) logits (a copy), no incremental state kept."""
        self.begin(obs.reshape(self.window, -1))
        return self._z.copy()


def fast_policy(net: PolicyNet) -> FastPolicy | FastRows:
    """The numpy inference that fits `net`'s head."""
    return FastRows(net) if net.cfg.head == "rows" else FastPolicy(net)


def choose(logits: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None) -> int:
    """The most likely valid action when `rng` is None, else one drawn from the masked
    softmax with `rng`. `mask` must allow at least one action."""
    return choose_masked(np.where(mask, logits, -np.inf), rng)


def choose_masked(z: np.ndarray, rng: np.random.Generator | None) -> int:
    """`choose` of logits already masked: invalid actions at -inf (one draw with `rng`)."""
    if rng is None:
        return int(z.argmax())
    p = np.exp(z - z.max())
    c = np.cumsum(p)
    return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), len(c) - 1)
