"""The PPO config: one frozen dataclass for both objectives, checked when built.

Defaults are the seed's BatchPPO (KL penalty with cutoff, episode memory). The clipped
objective's fields default to common practice (Schulman et al. 2017, SB3, CleanRL).
"""

from __future__ import annotations

import dataclasses

OBJECTIVES = ("kl_penalty", "clipped")
REWARD_SCALES = ("reward", "return")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything PPO needs to know; derived values are properties."""

    objective: str = "kl_penalty"
    seed: int = 0
    steps: int = 1_000_000  # Env steps of training; the horizon of a decaying learning rate.
    # Environment side.
    num_agents: int = 30
    max_length: int = 1000
    discount: float = 0.995
    normalize_observations: bool = True
    normalize_rewards: bool = True
    observation_clip: float = 5.0
    reward_clip: float = 10.0
    # "reward": divide rewards by the std of rewards (the seed). "return": by the std of
    # each env's discounted return so far (Gymnasium's NormalizeReward, SB3's VecNormalize).
    reward_scale: str = "reward"
    # Networks.
    policy_layers: tuple[int, ...] = (200, 100)
    value_layers: tuple[int, ...] = (200, 100)
    activation: str = "relu"
    init_output_factor: float = 0.1
    init_std: float = 0.35
    squash_mean: bool = True  # tanh keeps the Gaussian mean in (-1, 1), as the seed did.
    orthogonal_init: bool = False
    recurrent: bool = False
    # Optimisation.
    learning_rate: float = 1e-4
    # Clipped objective: fall linearly to zero over `steps`, as CleanRL's anneal_lr.
    anneal_learning_rate: bool = False
    max_grad_norm: float | None = None
    update_epochs: int = 25
    entropy_coef: float = 0.0
    gae_lambda: float | None = None  # None: Monte-Carlo returns, as the seed.
    # The seed's objective: episode memory and an adaptive KL penalty with cutoff.
    update_every: int = 30  # Episodes per update.
    chunk_length: int = 50  # Steps of an episode per minibatch row.
    batch_size: int = 30  # Episodes per minibatch.
    kl_target: float = 1e-2
    kl_init_penalty: float = 1.0
    kl_cutoff_factor: float = 2.0
    kl_cutoff_coef: float = 1000.0
    # The clipped objective: fixed steps per env per update, shuffled minibatches.
    steps_per_update: int = 256  # Steps per env between updates.
    num_minibatches: int = 32
    clip_ratio: float = 0.2
    clip_value: float | None = None
    target_kl: float | None = None  # Stop an update's epochs early above this KL.
    value_coef: float = 0.5
    # Recompute values and GAE with the current value net before every epoch (Tianshou).
    recompute_advantages: bool = False
    # Local devices each minibatch is split over (data-parallel update); 1: one device.
    learner_devices: int = 1

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}: use one of {OBJECTIVES}")
        if self.reward_scale not in REWARD_SCALES:
            raise ValueError(
                f"unknown reward_scale {self.reward_scale!r}: use one of {REWARD_SCALES}"
            )
        if self.reward_scale == "return" and self.objective != "clipped":
            raise ValueError("reward_scale='return' needs objective='clipped'")
        for name in ("anneal_learning_rate", "recompute_advantages"):
            if getattr(self, name) and self.objective != "clipped":
                raise ValueError(f"{name}=True needs objective='clipped'")
        if self.activation not in ("relu", "tanh"):
            raise ValueError(f"unknown activation {self.activation!r}: use 'relu' or 'tanh'")
        positive = ("num_agents", "max_length", "update_epochs", "update_every", "batch_size")
        positive += ("learner_devices",)
        for name in (*positive, "steps_per_update", "num_minibatches", "chunk_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.learning_rate > 0.0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0.0 < self.discount <= 1.0:
            raise ValueError(f"discount must be in (0, 1], got {self.discount}")
        if self.max_length % self.chunk:
            raise ValueError(
                f"chunk_length = {self.chunk_length} must divide max_length = {self.max_length}"
            )
        if self.objective == "clipped" and self.batch_steps % self.num_minibatches:
            raise ValueError(
                f"num_agents * steps_per_update = {self.batch_steps} must divide into "
                f"num_minibatches = {self.num_minibatches}"
            )

    @property
    def chunk(self) -> int:
        """Steps per minibatch row of the seed's objective: chunk_length, at most max_length."""
        return min(self.chunk_length, self.max_length)

    @property
    def batch_steps(self) -> int:
        """Env steps per update of the clipped objective."""
        return self.num_agents * self.steps_per_update

    @property
    def total_updates(self) -> int:
        """Updates of the clipped objective in `steps` env steps."""
        return -(-self.steps // self.batch_steps)

    @property
    def minibatch_size(self) -> int:
        """Transitions per minibatch of the clipped objective."""
        return self.batch_steps // self.num_minibatches


# The clipped objective's common-practice settings (SB3's and CleanRL's MuJoCo defaults).
CLIPPED_DEFAULTS: dict[str, object] = dict(
    objective="clipped",
    num_agents=8,
    discount=0.99,
    policy_layers=(64, 64),
    value_layers=(64, 64),
    activation="tanh",
    init_std=1.0,
    # A tanh-squashed mean cannot reach the action bounds, so the policy shrinks its std to
    # get there: on HalfCheetah-v5 the entropy fell from 8.4 to -4.7 in 1M steps and the KL
    # between consecutive policies reached 0.12 (seed 3 ended at 792). A linear mean, as in
    # SB3 and CleanRL, lets the env clip the action instead.
    squash_mean=False,
    reward_scale="return",  # As SB3's VecNormalize and Gymnasium's NormalizeReward.
    orthogonal_init=True,
    learning_rate=3e-4,
    max_grad_norm=0.5,
    update_epochs=10,
    gae_lambda=0.95,
    steps_per_update=256,
    num_minibatches=32,
)


def clipped(**overrides: object) -> Config:
    """The clipped objective with common-practice defaults (SB3, CleanRL)."""
    return Config(**{**CLIPPED_DEFAULTS, **overrides})
