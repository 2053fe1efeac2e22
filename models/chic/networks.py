"""Chic's policy network pi'(a | s; theta) (section 5), built from a `ChicNetConfig`.

    obs (B, I*F + 1) -> Linear 64 -> ReLU -> Dropout 0.5 -> Linear 32 -> ReLU
                     -> Linear 4 -> ReLU -> Linear (B, A) logits -> masked softmax

A = 2I + 1 (Chic) or I + 1 (Chic-Pair). The observation is Chic's own scenario's
(`tracelib.envs.chic.chic_features`: 3 models, pooled cluster) or, with `setting="dl2"`,
the arena's (`tracelib.envs.chic_arena.chic_arena_features`: the DL2 catalogue's 8
models, the evaluation's window). Invalid actions (tracelib.envs.chic masks) get
probability 0. `NumpyPolicy` is the same network in numpy for rollouts (dropout off, as at
inference): an episode is hundreds of single-state inferences, where torch's per-call
overhead dominates.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from models.chic.config import ChicNetConfig

"""Where a network's observation comes from: Chic's own scenario, or the arena's DL2
setting (`ChicNetConfig.setting`)."""

MASKED = -1e9
"""Logit of an invalid action."""

_max, _sum, _cumsum = np.maximum.reduce, np.add.reduce, np.add.accumulate
"""ndarray.max, .sum and .cumsum of a 1-D float array, called directly."""


class ChicPolicyNet(nn.Module):
    """pi'(a | s; theta): logits over the variant's actions."""

    def __init__(self, cfg: ChicNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        sizes = [cfg.input_dim, *cfg.hidden]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU()]
            if i == 0 and cfg.dropout > 0:
                layers.append(nn.Dropout(cfg.dropout))
        layers.append(nn.Linear(sizes[-1], cfg.n_actions))
        self.body = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, input_dim) -> (B, n_actions) unmasked logits."""
        return self.body(obs)

    def masked_log_probs(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, input_dim), (B, n_actions) bool -> (B, n_actions) log-probabilities."""
        return torch.log_softmax(self.forward(obs).masked_fill(~mask, MASKED), dim=-1)

    def cross_entropy_step(
        self,
        optimizer: torch.optim.Optimizer,
        obs: torch.Tensor,
        mask: torch.Tensor,
        actions: torch.Tensor,
    ) -> float:
        """One optimizer step of masked cross-entropy toward `actions` on a minibatch;
        returns the loss summed over its samples (mean loss times their number)."""
        logp = self.masked_log_probs(obs, mask)
        loss = -logp.gather(1, actions[:, None]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss.detach()) * len(actions)


class NumpyPolicy:
    """Inference copy of a `ChicPolicyNet` (eval mode: no dropout). One instance holds
    its layers' buffers, so it serves one caller at a time."""

    def __init__(self, net: ChicPolicyNet) -> None:
        linears = [m for m in net.body if isinstance(m, nn.Linear)]
        self.weights = [m.weight.detach().double().numpy().T.copy() for m in linears]
        self.biases = [m.bias.detach().double().numpy().copy() for m in linears]
        # A rollout is hundreds of thousands of single-state inferences of a small network,
        # where allocating each layer's output costs as much as computing it: every layer
        # writes into its own buffer.
        self._x = np.empty(self.weights[0].shape[0])
        self._layers = [
            (w, b, np.empty(w.shape[1]), np.zeros(w.shape[1]))
            for w, b in zip(self.weights, self.biases, strict=True)
        ]

    def _forward(self, obs: np.ndarray) -> np.ndarray:
        """`logits` into the last layer's buffer (overwritten by the next call)."""
        x = self._x
        np.copyto(x, obs)  # float32 -> float64, as astype
        layers = self._layers
        last = len(layers) - 1
        # ndarray.dot is np.dot without its dispatch, and a ufunc takes its output
        # positionally, or against an array of zeros, at less cost per call than by keyword
        # or against a scalar: the same products, sums and ReLU.
        for k, (w, b, out, zeros) in enumerate(layers):
            x.dot(w, out)
            np.add(out, b, out)
            if k < last:
                np.maximum(out, zeros, out=out)
            x = out
        return x

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """(input_dim,) -> (n_actions,) logits."""
        return self._forward(obs).copy()

    def _probs(self, logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Masked softmax of `logits` (a new array)."""
        # The ufuncs' reductions themselves: what ndarray.max and .sum call, without their
        # Python wrappers (a third of a reduction's cost on a few dozen actions).
        z = np.where(mask, logits, -np.inf)
        np.subtract(z, _max(z), out=z)
        np.exp(z, out=z)
        np.divide(z, _sum(z), out=z)
        return z

    def probs(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(input_dim,), (n_actions,) bool -> masked softmax (n_actions,)."""
        return self._probs(self._forward(obs), mask)

    def act(self, obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None) -> int:
        """Sample an action (greedy, the most probable valid one, when rng is None)."""
        if rng is None:
            return int(np.argmax(np.where(mask, self._forward(obs), -np.inf)))
        p = self._probs(self._forward(obs), mask)
        return int(min(_cumsum(p).searchsorted(rng.random() * _sum(p)), len(p) - 1))
