"""PPO configs: one frozen dataclass per objective, its type picking the algorithm.

`PenaltyConfig` is the seed's BatchPPO (KL penalty with cutoff, episode memory), with
the seed's defaults. `ClippedConfig` is the clipped objective, with common-practice
defaults (Schulman et al. 2017, SB3, CleanRL). Both share `Common`: how observations
and rewards are scaled, the networks and the optimiser. Each is checked when built.

What the run decides, the objectives read as a `RunShape`: how many envs step
together, the longest episode, and the env steps of training. The run's config
(`configs.TrainConfig`) owns those, with the seed and the env.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from batchrl import env_spec, setting_types

REWARD_SCALES = ("reward", "return")
# When acting's normalisers take in the statistics of the steps it takes: "step", every
# batch step (the seed's); "segment", once a segment of acting ends, the normalisers
# staying as it began, so envs acting apart act as together (rollout actors); "auto",
# "segment" with rollout actors, else "step" (the run's config decides, `TrainConfig`).
NORMALIZER_UPDATES = ("auto", "step", "segment")
IMAGE_CHANNELS = ("auto", "first", "last")  # As `networks.encoder.channels_first` reads them.
CNNS = ("auto", "nature", "minatar", "none")  # As `networks.cnn.choose` reads them.


@dataclasses.dataclass(frozen=True)
class RunShape:
    """What an objective reads of the run that trains it, all fixed before it starts."""

    num_envs: int  # Envs stepped together: the batch an agent acts on.
    max_length: int  # The longest episode, in env steps: an episode memory slot's length.
    steps: int  # Env steps of training: the horizon of a decaying learning rate.

    def __post_init__(self):
        _at_least_one(self, "num_envs", "max_length", "steps")


@dataclasses.dataclass(frozen=True)
class Common:
    """What both objectives need: scaling of observations and rewards, networks, optimiser."""

    objective: ClassVar[str]  # Its name in OBJECTIVES and in a saved config.
    algorithm: ClassVar[str]  # `module:attribute` of the `algorithm.Algorithm` that trains it.
    recurrent: ClassVar[bool] = False  # A GRU policy; `PenaltyConfig` alone can train one.

    discount: float = 0.995
    normalize_observations: bool = True
    normalize_rewards: bool = True
    observation_clip: float = 5.0
    reward_clip: float = 10.0
    normalizer_updates: str = "auto"  # One of NORMALIZER_UPDATES.
    # Networks.
    policy_layers: tuple[int, ...] = (200, 100)
    value_layers: tuple[int, ...] = (200, 100)
    activation: str = "relu"
    init_output_factor: float = 0.1
    init_std: float = 0.35
    squash_mean: bool = True  # tanh keeps the Gaussian mean in (-1, 1), as the seed did.
    orthogonal_init: bool = False
    # Where image leaves (rank-3 Boxes) keep their channels: "auto" takes the smallest dim
    # for them when it comes first, as Stable-Baselines3 does; "first" or "last" says so.
    image_channels: str = "auto"
    # The CNN on each image leaf (`networks.cnn`): "auto" takes the Nature CNN for images of
    # 36 pixels a side or more, the MinAtar network from 3, and flattens smaller ones into
    # the MLP; "nature", "minatar", or "none" (every image flattened) for all of them.
    cnn: str = "auto"
    # Policy and value read images through one set of CNNs, trained by both losses (as
    # CleanRL's Atari agent); by default each has its own.
    shared_encoder: bool = False
    # Optimisation.
    learning_rate: float = 1e-4
    max_grad_norm: float | None = None
    update_epochs: int = 25
    entropy_coef: float = 0.0
    gae_lambda: float | None = None  # None: Monte-Carlo returns, as the seed.
    # "reward": divide rewards by the std of rewards (the seed). "return": by the std of
    # each env's discounted return so far (Gymnasium's NormalizeReward, SB3's VecNormalize).
    reward_scale: str = "reward"
    # Local devices each minibatch is split over (data-parallel update); 1: one device.
    learner_devices: int = 1

    def __post_init__(self):
        setting_types.read_fields(self)
        if self.activation not in ("relu", "tanh"):
            raise ValueError(f"unknown activation {self.activation!r}: use 'relu' or 'tanh'")
        _at_least_one(self, "update_epochs", "learner_devices")
        for name in ("policy_layers", "value_layers"):  # A layer of no units: no network.
            if any(units < 1 for units in getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)}: every layer needs 1 unit or more")
        if self.image_channels not in IMAGE_CHANNELS:
            raise ValueError(
                f"unknown image_channels {self.image_channels!r}: use one of {IMAGE_CHANNELS}"
            )
        if self.cnn not in CNNS:
            raise ValueError(f"unknown cnn {self.cnn!r}: use one of {CNNS}")
        if self.normalizer_updates not in NORMALIZER_UPDATES:
            raise ValueError(
                f"unknown normalizer_updates {self.normalizer_updates!r}: use one of "
                f"{NORMALIZER_UPDATES}"
            )
        if self.reward_scale not in REWARD_SCALES:
            raise ValueError(
                f"unknown reward_scale {self.reward_scale!r}: use one of {REWARD_SCALES}"
            )
        _finite(self, "learning_rate", "init_std", allowed="a positive, finite number")
        _finite(self, "init_output_factor", "entropy_coef")  # Infinite: NaN losses.
        _not_negative(self, "entropy_coef")
        _positive(self, "learning_rate", "init_std", "observation_clip", "reward_clip")
        _positive(self, "max_grad_norm")
        if not 0.0 < self.discount <= 1.0:
            raise ValueError(f"discount must be in (0, 1], got {self.discount}")
        if self.gae_lambda is not None and not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"gae_lambda must be in [0, 1] or None, got {self.gae_lambda}")

    def check(self, shape: RunShape) -> None:
        """Raises a one-line ValueError when a run of `shape` cannot train this config."""

    def unread(self, spec: env_spec.EnvSpec) -> list[str]:
        """A line for each setting changed from its default that nothing reads on `spec`.

        Accepted, as a backend's unused settings are (`configs.backends.unused`), but
        said: `init_std=5` on a categorical policy changed nothing, unsaid.
        """
        lines = []

        def say(names: tuple[str, ...], why: str) -> None:
            for name in names:
                value = getattr(self, name)
                # Either objective's default is none of the user's: a seed preset's
                # init_std carries over to `objective=clipped`.
                defaults = [getattr(kind, name, None) for kind in (PenaltyConfig, ClippedConfig)]
                if value not in defaults:
                    shown = repr(value) if isinstance(value, str) else value
                    lines.append(f"{name}={shown} is not used {why}")

        if self.orthogonal_init:
            say(("init_output_factor",), "with orthogonal_init: the policy's output starts at 0.01")
        if not self.normalize_rewards:
            say(("reward_clip", "reward_scale"), "with normalize_rewards off: rewards stay raw")
        if not self.normalize_observations:
            say(("observation_clip",), "with normalize_observations off: observations stay raw")
        if spec.discrete and spec.action is None:
            say(("init_std",), "on discrete actions: a categorical policy has no std")
        leaves = env_spec.leaves(spec.observation)
        # A CNN named by the run refuses such an observation (`networks.encoder`), said so.
        if not any(leaf.kind == env_spec.IMAGE for leaf in leaves) and self.cnn in ("auto", "none"):
            say(("shared_encoder", "image_channels"), "on observations without images")
        if getattr(self, "recurrent", False):
            say(("chunk_length",), "with recurrent: a GRU policy trains on whole episodes")
        return lines


@dataclasses.dataclass(frozen=True)
class PenaltyConfig(Common):
    """The seed's objective: episode memory and an adaptive KL penalty with cutoff."""

    objective: ClassVar[str] = "kl_penalty"
    algorithm: ClassVar[str] = "batchrl.ppo.objectives:PENALTY"

    recurrent: bool = False  # A GRU policy; trains on whole episodes.
    update_every: int = 30  # Episodes per update.
    chunk_length: int = 50  # Steps of an episode per minibatch row.
    batch_size: int = 30  # Minibatch rows, each `chunk_length` steps of an episode.
    kl_target: float = 1e-2
    kl_init_penalty: float = 1.0
    kl_cutoff_factor: float = 2.0
    kl_cutoff_coef: float = 1000.0

    def __post_init__(self):
        super().__post_init__()
        _at_least_one(self, "update_every", "batch_size", "chunk_length")
        if self.recurrent and not self.policy_layers:  # The GRU is its last layer.
            raise ValueError(
                "recurrent=True needs at least one policy layer (the last is the GRU's size), "
                "got policy_layers=()"
            )
        _finite(self, "kl_init_penalty", allowed="a positive, finite number")
        _finite(self, "kl_cutoff_coef")
        _not_negative(self, "kl_cutoff_coef")
        _positive(self, "kl_target", "kl_init_penalty", "kl_cutoff_factor")

    def chunk(self, max_length: int) -> int:
        """Steps per minibatch row: a whole episode for a GRU, else chunk_length at most."""
        return max_length if self.recurrent else min(self.chunk_length, max_length)

    def memory_length(self, max_length: int) -> int:
        """Steps an episode memory slot holds: `max_length` in whole chunks, rounded up.

        An env's own time limit sets `max_length` (MountainCarContinuous's 999, a
        JAX-native env's), which the preset's chunk_length need not divide; the rows past
        it hold padding, which the update skips.
        """
        chunk = self.chunk(max_length)
        return -(-max_length // chunk) * chunk

    def check(self, shape: RunShape) -> None:
        """The update's minibatches must split over the learner's devices."""
        # batch_size rows, or every row of a smaller memory (`penalty.update`: a slot an
        # episode to keep and one an env, in chunks).
        chunk = self.chunk(shape.max_length)
        rows = (self.update_every + shape.num_envs) * (
            self.memory_length(shape.max_length) // chunk
        )
        batch = min(self.batch_size, rows)
        if batch % self.learner_devices:  # Before any folder, naming the settings.
            per = "" if self.recurrent else " * ceil(max_length / chunk_length)"  # Or episodes.
            raise ValueError(
                f"minibatches of min(batch_size = {self.batch_size}, (update_every + "
                f"num_envs){per} = {rows}) = {batch} rows do not split over "
                f"learner_devices = {self.learner_devices}"
            )


@dataclasses.dataclass(frozen=True)
class ClippedConfig(Common):
    """The clipped objective: fixed steps per env per update, shuffled minibatches, GAE.

    Defaults are SB3's and CleanRL's MuJoCo settings, but for `observation_clip`: the
    seed's 5 standard deviations, where both clip at 10 (the held-out results were run so);
    and `init_std` is in the [-1, 1] units the Gaussian acts in, mapped onto a Box's bounds.
    """

    objective: ClassVar[str] = "clipped"
    algorithm: ClassVar[str] = "batchrl.ppo.objectives:CLIPPED"

    discount: float = 0.99
    policy_layers: tuple[int, ...] = (64, 64)
    value_layers: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    init_std: float = 1.0
    # A tanh-squashed mean cannot reach the action bounds, so the policy shrinks its std to
    # get there; a linear mean, as in SB3 and CleanRL, lets the env clip the action instead
    # (a HalfCheetah seed whose std fell to about 0.08 and return to 792 reached 5,322 with
    # it and rewards scaled by returns).
    squash_mean: bool = False
    orthogonal_init: bool = True
    learning_rate: float = 3e-4
    max_grad_norm: float | None = 0.5
    update_epochs: int = 10
    gae_lambda: float | None = 0.95
    reward_scale: str = "return"
    # Fall linearly over `steps` to 1/N of learning_rate at the last of N updates, as
    # CleanRL's anneal_lr.
    anneal_learning_rate: bool = False
    # Rise linearly from `discount` to this over `steps` in the advantages (François-Lavet et
    # al. 2015, "How to discount deep RL"); None: `discount` throughout. Rewards are scaled
    # by returns at `discount`.
    final_discount: float | None = None
    steps_per_update: int = 256  # Steps per env between updates.
    num_minibatches: int = 32
    clip_ratio: float = 0.2
    clip_value: float | None = None
    target_kl: float | None = None  # Stop an update's epochs early above this KL.
    value_coef: float = 0.5
    # Standardise advantages within each minibatch (SB3, CleanRL); off as Tianshou's MuJoCo PPO.
    normalize_advantages: bool = True
    # Recompute values and GAE with the current value net before every epoch (Tianshou).
    recompute_advantages: bool = False

    def __post_init__(self):
        super().__post_init__()
        _at_least_one(self, "steps_per_update", "num_minibatches")
        _finite(self, "value_coef")
        _not_negative(self, "value_coef")
        _positive(self, "clip_ratio", "clip_value", "target_kl")
        if self.final_discount is not None and not 0.0 < self.final_discount <= 1.0:
            raise ValueError(f"final_discount must be in (0, 1] or None, got {self.final_discount}")
        if self.final_discount is not None and self.final_discount < self.discount:
            raise ValueError(  # Accepted before: the discount fell where it was said to rise.
                f"final_discount={self.final_discount} is below discount={self.discount}: the "
                "discount rises from discount to final_discount (None: discount throughout)"
            )

    def check(self, shape: RunShape) -> None:
        """Minibatches must divide the rollout, and hold two rows to standardise advantages.

        One row's advantage standardised is 0: every update's policy gradient was zero.
        """
        batch_steps = shape.num_envs * self.steps_per_update
        if batch_steps % self.num_minibatches:
            raise ValueError(
                f"num_minibatches = {self.num_minibatches} must divide num_envs * "
                f"steps_per_update = {batch_steps} into minibatches of equal rows"
            )
        rows = batch_steps // self.num_minibatches
        if rows == 1 and self.normalize_advantages:
            raise ValueError(
                f"minibatches of num_envs * steps_per_update / num_minibatches = 1 row "
                f"standardise each advantage to 0, so the policy learns nothing: lower "
                f"num_minibatches = {self.num_minibatches} or set normalize_advantages=false"
            )
        if rows % self.learner_devices:  # Before any folder, naming the settings.
            raise ValueError(
                f"minibatches of num_envs * steps_per_update / num_minibatches = {rows} rows "
                f"do not split over learner_devices = {self.learner_devices}"
            )

    def total_updates(self, shape: RunShape) -> int:
        """Updates in the run's `steps` env steps: whole rollouts, as the run trains them.

        Rounded up, a budget of 7.8 rollouts (`phase_steps` not a multiple of one) left
        the last of its 7 updates at a quarter of the rate where annealing reaches 1/7.
        """
        return max(1, shape.steps // (shape.num_envs * self.steps_per_update))


def _positive(config: object, *names: str) -> None:
    """A one-line ValueError for a setting of `names` not above 0 (None passes: off)."""
    for name in names:
        value = getattr(config, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")


def _not_negative(config: object, *names: str) -> None:
    """A one-line ValueError for a weight of `names` below 0: it would push its loss up."""
    for name in names:
        value = getattr(config, name)
        if value < 0:
            raise ValueError(f"{name} must be 0 or more, got {value}")


def _finite(config: object, *names: str, allowed: str = "a finite number") -> None:
    """A one-line ValueError for a setting of `names` that is infinite.

    NaN is refused by `_positive` or, for the others, by `TrainConfig`.
    """
    for name in names:
        value = getattr(config, name)
        if math.isinf(value):
            raise ValueError(f"{name} must be {allowed}, got {value}")


def _at_least_one(config: object, *names: str) -> None:
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} must be at least 1, got {getattr(config, name)}")


Config = PenaltyConfig | ClippedConfig
# The one table of objectives: each config type names its algorithm (`algorithm.of`).
OBJECTIVES: dict[str, type[PenaltyConfig] | type[ClippedConfig]] = {
    PenaltyConfig.objective: PenaltyConfig,
    ClippedConfig.objective: ClippedConfig,
}
