"""The tasks of the seed with its hyperparameters, JAX-native presets, and clipped variants.

Seed presets use the KL-penalty objective, 200-100 ReLU networks, 30 agents and 30
episodes per update, as the seed did; `*_clipped` presets use the clipped objective
with common-practice hyperparameters (SB3's and CleanRL's MuJoCo defaults). Pixel
presets (`*_minatar`, `minigrid_doorkey`, and the Atari games `breakout`, `pong`,
`beam_rider`) read images through CNNs, with the settings their sources trained PPO with.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from batchrl.configs import train_config
from batchrl.configs.train_config import TrainConfig
from batchrl.ppo import config as ppo_config


def default() -> TrainConfig:
    """The seed's defaults: KL-penalty PPO, 30 agents, 30 episodes per update."""
    return TrainConfig()


def pendulum() -> TrainConfig:
    """Pendulum-v1 swing-up in worker processes, 1M steps."""
    return train_config.replace(default(), env="Pendulum-v1", max_length=200, discount=0.95)


def pendulum_jax() -> TrainConfig:
    """The JAX-native Pendulum-v1, fully compiled, 1M steps."""
    return dataclasses.replace(pendulum(), env_kind="jax")


def cartpole() -> TrainConfig:
    """CartPole-v1 with a categorical policy, 200k steps."""
    return train_config.replace(default(), env="CartPole-v1", max_length=500, steps=200_000)


def cartpole_jax() -> TrainConfig:
    """The JAX-native CartPole-v1, fully compiled, 200k steps."""
    return dataclasses.replace(cartpole(), env_kind="jax")


def acrobot_gymnax() -> TrainConfig:
    """Acrobot-v1 from gymnax, fully compiled, clipped objective, 500k steps.

    Episodes end at the top (return about -60 to -100) or after 500 steps (-500).
    """
    algorithm = ppo_config.ClippedConfig(steps_per_update=128, num_minibatches=8, update_epochs=4)
    return TrainConfig(
        algorithm=algorithm,
        max_length=500,
        steps=500_000,
        num_envs=32,
        env="Acrobot-v1",
        env_kind="gymnax",
        phase_steps=40_960,  # Ten updates per phase.
        eval_episodes=32,
        eval_every=1,
    )


def _minatar(game: str, max_length: int = 1000) -> TrainConfig:
    """Clipped PPO on a MinAtar game from gymnax, fully compiled, 10M steps, from pixels.

    gymnax-blines' PPO settings for MinAtar (its agents/<game>/ppo.yaml, which trained the
    checkpoints gymnax's README scores): 64 envs x 128 steps an update, 8 minibatches, 4
    epochs, Adam at 5e-4 on gradients clipped to norm 0.5, discount 0.999, GAE lambda
    0.95, the ratio and the value clipped at 0.2, entropy 0.01, value 0.5, advantages
    standardised per minibatch, rewards unscaled. What differs: its network is an MLP of
    2 x 256 ReLU units on the flattened grid, here the MinAtar network (16 3x3 filters,
    128 units) each for the policy and the value, with linear outputs; its learning rate
    warms up over the first 5% of steps, here it is constant. gymnax's MinAtar has no
    sticky actions and a minimal action set, unlike the MinAtar paper's.
    """
    algorithm = ppo_config.ClippedConfig(
        steps_per_update=128,
        num_minibatches=8,
        update_epochs=4,
        learning_rate=5e-4,
        max_grad_norm=0.5,
        discount=0.999,
        gae_lambda=0.95,
        clip_ratio=0.2,
        clip_value=0.2,
        entropy_coef=0.01,
        value_coef=0.5,
        normalize_rewards=False,
        policy_layers=(),
        value_layers=(),
        activation="relu",
        cnn="minatar",
    )
    return TrainConfig(
        algorithm=algorithm,
        max_length=max_length,
        steps=10_000_000,
        num_envs=64,
        env=game,
        env_kind="gymnax",
        phase_steps=81_920,  # Ten updates per phase.
        eval_episodes=64,  # One round of the 64 envs, every fourth phase.
        eval_every=4,
        final_episodes=64,
    )


def breakout_minatar() -> TrainConfig:
    """Breakout-MinAtar from gymnax (10 x 10 x 4 grids, 3 actions), 10M steps."""
    return _minatar("Breakout-MinAtar")


def space_invaders_minatar() -> TrainConfig:
    """SpaceInvaders-MinAtar from gymnax (10 x 10 x 6 grids, 4 actions), 10M steps."""
    return _minatar("SpaceInvaders-MinAtar")


def asterix_minatar() -> TrainConfig:
    """Asterix-MinAtar from gymnax (10 x 10 x 4 grids, 5 actions), 10M steps."""
    return _minatar("Asterix-MinAtar")


def freeway_minatar() -> TrainConfig:
    """Freeway-MinAtar from gymnax (10 x 10 x 7 grids, 3 actions), 10M steps.

    Its episodes last 2,500 steps, gymnax's limit for Freeway.
    """
    return _minatar("Freeway-MinAtar", max_length=2500)


def minigrid_doorkey() -> TrainConfig:
    """MiniGrid-DoorKey-5x5-v0 in worker processes: a 7 x 7 view and a direction, 500k steps.

    The env is `envs.host.minigrid_env:make`: MiniGrid's env without its mission string,
    the image bounded by the indices it holds (`pip install -e '.[minigrid]'`). Reward at
    the goal, 1 - 0.9 * steps / 250, else 0. PPO settings of the MiniGrid authors'
    rl-starter-files (scripts/train.py, torch-ac's PPO): 16 envs x 128 steps an update,
    minibatches of 256, 4 epochs, Adam at 1e-3 on gradients clipped to norm 0.5, discount
    0.99, GAE lambda 0.95, the ratio and the value clipped at 0.2, entropy 0.01, value
    loss weighed 1 (its squared error, unhalved, at 0.5), advantages and rewards as they
    are. Its network (three 2x2 convolutions, then 64 tanh units for each of the policy
    and the value) is here the MinAtar network before them, and the direction, which it
    ignores, is read as a one-hot beside.
    """
    algorithm = ppo_config.ClippedConfig(
        steps_per_update=128,
        num_minibatches=8,
        update_epochs=4,
        learning_rate=1e-3,
        max_grad_norm=0.5,
        discount=0.99,
        gae_lambda=0.95,
        clip_ratio=0.2,
        clip_value=0.2,
        entropy_coef=0.01,
        value_coef=1.0,
        normalize_rewards=False,
        normalize_advantages=False,
        policy_layers=(64,),
        value_layers=(64,),
        activation="tanh",
        cnn="minatar",
    )
    return TrainConfig(
        algorithm=algorithm,
        max_length=250,  # MiniGrid's own limit for a 5 x 5 grid: 10 x 5 x 5 steps.
        steps=500_000,
        num_envs=16,
        env="batchrl.envs.host.minigrid_env:make",
        env_kwargs={"env_id": "MiniGrid-DoorKey-5x5-v0"},
        phase_steps=20_480,  # Ten updates per phase.
        eval_episodes=16,
        eval_every=1,
        final_episodes=32,
    )


def _atari(env: str) -> TrainConfig:
    """Clipped PPO on an Atari game in ale-py's vector env (env_backend 'ale'), 10M steps.

    CleanRL's ppo_atari.py: 8 envs x 128 steps an update, 4 minibatches, 4 epochs, Adam
    at 2.5e-4 falling linearly to zero, gradients clipped to norm 0.5, discount 0.99, GAE
    lambda 0.95, the ratio and the value clipped at 0.1, entropy 0.01, value 0.5,
    advantages standardised per minibatch, rewards clipped to [-1, 1] and not scaled; the
    Nature CNN shared by policy and value (orthogonal init, 0.01 for the logits); frames
    of DQN's preprocessing (4 frames skipped, max-pooled, 84 x 84 grayscale, 4 stacked,
    no-ops and FIRE at a game's start), no sticky actions. A lost life ends the episode
    for the learner and the game plays on (ale-py's life_loss_info), as CleanRL's
    EpisodicLifeEnv. What differs: CleanRL's FireResetEnv presses FIRE after every lost
    life too, here the agent presses it itself; ale-py draws 0 to 29 no-ops (one fewer
    after FIRE), CleanRL 1 to 30. Evaluation plays whole games with the mean action and
    scores the game's own, unclipped score (CleanRL reports its training episodes').
    `--set env=ALE/<Game>-v5` plays any other game.
    """
    algorithm = ppo_config.ClippedConfig(
        steps_per_update=128,
        num_minibatches=4,
        update_epochs=4,
        learning_rate=2.5e-4,
        anneal_learning_rate=True,
        max_grad_norm=0.5,
        discount=0.99,
        gae_lambda=0.95,
        clip_ratio=0.1,
        clip_value=0.1,
        entropy_coef=0.01,
        value_coef=0.5,
        normalize_rewards=False,
        policy_layers=(),
        value_layers=(),
        activation="relu",
        cnn="nature",
        shared_encoder=True,
    )
    return TrainConfig(
        algorithm=algorithm,
        max_length=27_000,  # ale-py's 108,000 frames, 30 minutes of play, at 4 a step.
        steps=10_000_000,
        num_envs=8,
        env=env,
        env_backend="ale",
        env_kwargs={
            "repeat_action_probability": 0.0,
            "life_loss_info": True,
            "reward_clipping": True,
        },
        phase_steps=10_240,  # Ten updates per phase.
        eval_episodes=8,  # One round of the 8 envs' whole games, every tenth phase.
        eval_every=10,
        final_episodes=32,
    )


def breakout() -> TrainConfig:
    """Breakout (ALE/Breakout-v5, 4 actions) through ale-py, 10M steps."""
    return _atari("ALE/Breakout-v5")


def pong() -> TrainConfig:
    """Pong (ALE/Pong-v5, 6 actions) through ale-py, 10M steps."""
    return _atari("ALE/Pong-v5")


def beam_rider() -> TrainConfig:
    """BeamRider (ALE/BeamRider-v5, 9 actions) through ale-py, 10M steps."""
    return _atari("ALE/BeamRider-v5")


def _discrete(env: str, max_length: int, steps: int, **overrides: object) -> TrainConfig:
    """Clipped PPO for a small task of discrete observations, evaluated on many episodes.

    Their returns vary a lot from episode to episode (a hand of cards, a slippery lake),
    so evaluation takes 200 episodes, and the final policy 1,000.
    """
    algorithm = ppo_config.ClippedConfig(
        steps_per_update=128, num_minibatches=4, update_epochs=4, entropy_coef=0.01
    )
    config = TrainConfig(
        algorithm=algorithm,
        max_length=max_length,
        steps=steps,
        num_envs=8,
        env=env,
        phase_steps=10_240,  # Ten updates per phase.
        eval_episodes=200,
        eval_every=10,
        final_episodes=1000,
    )
    return train_config.replace(config, **overrides)


def blackjack() -> TrainConfig:
    """Blackjack-v1: a Tuple of three Discrete observations, 500k steps.

    Basic strategy's expected return is about -0.05 a hand; a random policy's about -0.4.
    """
    return _discrete("Blackjack-v1", 10, 500_000, discount=1.0)


def frozenlake() -> TrainConfig:
    """FrozenLake-v1, 4x4 and slippery: a Discrete observation, 500k steps.

    The return is the share of episodes that reach the goal within 100 steps; the best
    policy's is about 0.74, a random policy's about 0.015.
    """
    return _discrete("FrozenLake-v1", 100, 500_000)


def pointmaze() -> TrainConfig:
    """PointMaze_UMaze-v3 of Gymnasium-Robotics: a goal-conditioned Dict observation, 1M steps.

    Sparse reward, and the episode ends at the goal, so the return is the success rate
    (`pip install -e '.[robotics]'`).
    """
    config = clipped(
        TrainConfig(env="gymnasium_robotics:PointMaze_UMaze-v3", max_length=300, steps=1_000_000)
    )
    return train_config.replace(config, env_kwargs={"continuing_task": False})


def _mujoco(env: str, steps: int, **overrides: object) -> TrainConfig:
    fields = {"env": env, "max_length": 1000, "steps": steps, **overrides}
    return train_config.replace(default(), **fields)


def reacher() -> TrainConfig:
    """Reacher-v5 (episodes end at 50 steps), 5M steps.

    The seed kept 1000 steps per episode in memory; Reacher's episodes end at 50, so a
    memory that long is mostly padding (docs/results.md).
    """
    return _mujoco("Reacher-v5", 5_000_000, max_length=50, discount=0.985, update_every=60)


def cheetah() -> TrainConfig:
    """HalfCheetah-v5, 10M steps."""
    return _mujoco("HalfCheetah-v5", 10_000_000, discount=0.99)


def walker() -> TrainConfig:
    """Walker2d-v5, 10M steps."""
    return _mujoco("Walker2d-v5", 10_000_000)


def hopper() -> TrainConfig:
    """Hopper-v5, 10M steps."""
    return _mujoco("Hopper-v5", 10_000_000, update_every=60)


def ant() -> TrainConfig:
    """Ant-v5, 20M steps."""
    return _mujoco("Ant-v5", 20_000_000)


def humanoid() -> TrainConfig:
    """Humanoid-v5, 50M steps."""
    return _mujoco("Humanoid-v5", 50_000_000, update_every=60)


def clipped(base: TrainConfig, **tuning: object) -> TrainConfig:
    """`base`'s task with the clipped objective and SB3/CleanRL MuJoCo hyperparameters.

    Evaluation: 8 episodes (whole rounds of the envs) after every 4th phase of ten updates;
    the final policy's 32, so that two evaluations of the same parameters differ less than
    runs of different seeds do (docs/results.md measures both). The final policy is the
    mean of the parameters of the last 3 phases (`average_last`), so one late update
    cannot decide a run (docs/results.md, "Late collapses").
    """
    config = TrainConfig(
        algorithm=ppo_config.ClippedConfig(),
        max_length=base.max_length,
        steps=min(base.steps, 1_000_000),
        num_envs=8,
        env=base.env,
        env_kind=base.env_kind,
        phase_steps=20_480,  # Ten updates per phase.
        eval_episodes=8,
        eval_every=4,
        final_episodes=32,
        average_last=3,
    )
    return train_config.replace(config, **tuning)


def _clipped_preset(name: str) -> TrainConfig:
    return clipped(_SEED[name](), **_CLIPPED_TUNING.get(name, {}))


_SEED = {
    "pendulum": pendulum,
    "pendulum_jax": pendulum_jax,
    "cartpole": cartpole,
    "cartpole_jax": cartpole_jax,
    "acrobot_gymnax": acrobot_gymnax,
    "blackjack": blackjack,
    "frozenlake": frozenlake,
    "pointmaze": pointmaze,
    "reacher": reacher,
    "cheetah": cheetah,
    "walker": walker,
    "hopper": hopper,
    "ant": ant,
    "humanoid": humanoid,
}
# Tasks seen through images, read by CNNs.
_PIXELS = {
    "breakout_minatar": breakout_minatar,
    "space_invaders_minatar": space_invaders_minatar,
    "asterix_minatar": asterix_minatar,
    "freeway_minatar": freeway_minatar,
    "minigrid_doorkey": minigrid_doorkey,
    "breakout": breakout,
    "pong": pong,
    "beam_rider": beam_rider,
}
_MUJOCO = ("reacher", "cheetah", "walker", "hopper", "ant", "humanoid")

# What each clipped preset changes from the shared defaults; docs/results.md says why.
_CLIPPED_TUNING: dict[str, dict[str, object]] = {
    "cheetah": {
        "num_envs": 16,
        "steps_per_update": 128,
        "init_std": 0.5,
        "policy_layers": (256, 256),
        "value_layers": (256, 256),
        "num_minibatches": 8,
        "anneal_learning_rate": True,
        "recompute_advantages": True,
    },
    "ant": {
        "env_kwargs": {"include_cfrc_ext_in_observation": False},
        "init_std": 0.6,
        "policy_layers": (256, 256),
        "value_layers": (256, 256),
        "num_minibatches": 8,
        "anneal_learning_rate": True,
        "recompute_advantages": True,
        "normalize_advantages": False,
        "value_coef": 0.25,
    },
    "humanoid": {
        "env_kwargs": {"include_cfrc_ext_in_observation": False},
        "anneal_learning_rate": True,
        "recompute_advantages": True,
    },
    "walker": {"anneal_learning_rate": True},
    "hopper": {"final_discount": 0.995},
    "reacher": {"max_length": 1000, "init_std": 0.35},
}

PRESETS: dict[str, Callable[[], TrainConfig]] = {
    **_SEED,
    **_PIXELS,
    **{f"{name}_clipped": functools.partial(_clipped_preset, name) for name in _MUJOCO},
}


def get(name: str) -> TrainConfig:
    """The preset called `name`; a one-line error listing the presets otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown config {name!r}: choose one of {', '.join(PRESETS)}")
    return PRESETS[name]()
