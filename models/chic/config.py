"""Configuration of Chic's training (one dataclass; derived values computed here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from models.chic.networks import ChicNetConfig
from tracelib.envs.chic import ChicEnvConfig
from tracelib.scenarios.chic import ChicArenaScenario, ChicScenario


@dataclass(frozen=True)
class CEMConfig:
    """The modified cross-entropy method (Chic section 4.3, Algorithm 1)."""

    variant: str = "chic"
    """"chic" or "chic-pair"."""
    scenario: ChicScenario | ChicArenaScenario = field(default_factory=ChicScenario)
    """Where training and validation episodes run: Chic's own scenario (cluster, arrival
    rate, W and I) or the arena's DL2 setting (`ChicArenaScenario`; the episodes are the
    given workload sequences either way)."""
    iterations: int = 40
    """K: CEM iterations."""
    n_trajectories: int = 35
    """N: trajectories sampled from the current policy per iteration (paper: 35)."""
    uniform_trajectory: bool = True
    """Add trajectory N + 1 with actions uniform over the valid ones (the paper's
    modification of the plain cross-entropy method)."""
    elite_quantile: float = 0.3
    """rho: the elite are the trajectories at or above R_(floor((1 - rho) N)), the
    best 30% (paper: 0.3)."""
    smoothing: float = 0.7
    """alpha of theta_k = alpha * theta_hat_k + (1 - alpha) * theta_(k-1) (the paper gives
    no value apart from Adam's rate, which it also calls alpha; ours)."""
    lr: float = 0.01
    """Adam learning rate (paper: 0.01)."""
    fit_epochs: int = 40
    """Passes over the elite state-action pairs to solve eq. 9 each iteration (ours)."""
    minibatch: int = 256
    """Minibatch of that fit (ours)."""
    val_every: int = 2
    """Validate every so many iterations; the best validated policy is kept (paper: 2)."""
    shared_sequence: bool = False
    """All N + 1 trajectories of an iteration run on one sequence drawn for the iteration
    (common random numbers; a deviation, measured beside the paper's fresh draw per
    episode): the elite then differ by their actions, not by how busy their sequence was."""
    work_conserving: bool = False
    """Deviation (ChicEnvConfig.work_conserving): void masked while an idle job's tasks fit,
    in training and deployment."""
    mask_absent: bool = False
    """Mask actions on absent jobs during training instead of charging p1 (a deviation
    from the paper, measured beside it: the penalties otherwise dominate the returns' spread
    early on, so the elite are picked for avoiding absent jobs, not for scheduling well)."""
    greedy: bool = False
    """Validate (and deploy) with the most probable action instead of sampling pi."""
    net: ChicNetConfig | None = None
    """Network shape; None: the paper's for this variant and window."""
    env: ChicEnvConfig | None = None
    """MDP settings; None: the paper's (p1 = 5, p2 = 1, 20-minute reward unit)."""
    seed: int = 0
    """Root of initialization, dropout, minibatch order, sequence choice and actions."""

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.n_trajectories < 1 or self.val_every < 1:
            raise ValueError("iterations, n_trajectories and val_every must be positive")
        if not 0.0 < self.elite_quantile <= 1.0 or not 0.0 < self.smoothing <= 1.0:
            raise ValueError("elite_quantile and smoothing must be in (0, 1]")
        if self.fit_epochs < 1 or self.minibatch < 1 or self.lr <= 0:
            raise ValueError("fit_epochs, minibatch and lr must be positive")
        if self.net is not None and (
            self.net.variant != self.variant
            or self.net.window != self.scenario.window
            or self.net.setting != self.scenario.setting
        ):
            raise ValueError("net.variant, window and setting must match variant and scenario")

    @property
    def net_config(self) -> ChicNetConfig:
        """The network: `net`, or the paper's for this variant, window and setting."""
        return self.net or ChicNetConfig(
            variant=self.variant, window=self.scenario.window, setting=self.scenario.setting
        )

    @property
    def env_config(self) -> ChicEnvConfig:
        """Training MDP (absent-job actions penalized unless `mask_absent`)."""
        base = self.env or ChicEnvConfig()
        return ChicEnvConfig(
            **{
                **base.__dict__,
                "variant": self.variant,
                "mask_absent": self.mask_absent,
                "work_conserving": self.work_conserving or base.work_conserving,
            }
        )

    @property
    def eval_env_config(self) -> ChicEnvConfig:
        """Deployment: the greedy policy never wastes a step on an absent job."""
        return ChicEnvConfig(**{**self.env_config.__dict__, "mask_absent": True})
