"""RL-TAPS' policy network: the state image in, one softmax per GPU over N + 1 job slots.

RL-TAPS 4.5.1 (Fig. 1): a single fully connected hidden layer shared by M output softmaxes.
The joint policy is the product of the per-GPU softmaxes (eq. 7), so its log-probability is
the sum of the chosen entries' log-probabilities. A per-GPU mask (empty slots are invalid,
the null slot always valid: `tracelib.envs.gpu`) is applied before each softmax.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from models.rltaps.config import RLTapsNetConfig


class PolicyNet(nn.Module):
    """(B, D) image -> (B, M, N + 1) logits."""

    def __init__(self, cfg: RLTapsNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.hidden = nn.Linear(cfg.input_dim, cfg.hidden_units)
        self.out = nn.Linear(cfg.hidden_units, cfg.n_outputs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, D) -> (B, M, N + 1) unmasked logits."""
        h = torch.relu(self.hidden(obs))  # (B, H)
        return self.out(h).view(-1, self.cfg.n_gpus, self.cfg.n_choices)

    def log_probs(self, obs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, D), (B, M, N + 1) bool -> (B, M, N + 1) masked log-softmax per GPU
        (-inf where masked)."""
        return torch.log_softmax(self(obs).masked_fill(~mask, -torch.inf), dim=-1)

    def log_prob_and_entropy(
        self, obs: torch.Tensor, mask: torch.Tensor, choice: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(A_t | S_t) = sum over GPUs of the chosen slot's log-probability (eq. 7),
        (B,), and the mean per-GPU entropy of the masked softmaxes, (B,)."""
        logp = self.log_probs(obs, mask)  # (B, M, N + 1)
        chosen = logp.gather(-1, choice.unsqueeze(-1)).squeeze(-1).sum(-1)  # (B,)
        p = logp.exp()
        entropy = -(p * logp.masked_fill(~mask, 0.0)).sum(-1).mean(-1)  # (B,)
        return chosen, entropy


class FastPolicy:
    """Numpy inference of a `PolicyNet` (a frozen copy of its weights), one state at a time:
    rollouts need thousands of single-state inferences, where torch's per-call overhead
    dominates."""

    def __init__(self, net: PolicyNet) -> None:
        with torch.no_grad():
            self.w1 = net.hidden.weight.detach().numpy().T.astype(np.float32).copy()  # (D, H)
            self.b1 = net.hidden.bias.detach().numpy().astype(np.float32).copy()  # (H,)
            self.w2 = net.out.weight.detach().numpy().T.astype(np.float32).copy()  # (H, M(N+1))
            self.b2 = net.out.bias.detach().numpy().astype(np.float32).copy()
        self.shape = (net.cfg.n_gpus, net.cfg.n_choices)

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """(D,) -> (M, N + 1) unmasked logits."""
        h = np.maximum(obs.astype(np.float32) @ self.w1 + self.b1, 0.0)
        return (h @ self.w2 + self.b2).reshape(self.shape)

    def choose(
        self, obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None
    ) -> np.ndarray:
        """(M,) slot per GPU: the most likely valid one when `rng` is None (inference,
        RL-TAPS 4.5.2), else drawn from each GPU's masked softmax with `rng` (training)."""
        return choose(self.logits(obs), mask, rng)


def choose(logits: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    """(M, N + 1) logits and bool mask -> (M,) choices, greedy or sampled per GPU. Every
    row of `mask` must allow something (the null slot always does)."""
    z = np.where(mask, logits, -np.inf)
    if rng is None:
        return z.argmax(axis=1)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    c = np.cumsum(p, axis=1)
    u = rng.random(len(c))[:, None] * c[:, -1:]
    picks = (c <= u).sum(axis=1)
    # Round-off can put u at the very top: fall back to the last valid entry.
    last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)
    return np.minimum(picks, last)
