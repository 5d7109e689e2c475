"""Presets of tasks seen through images: MinAtar (an MLP on the grid), MiniGrid and Atari (CNNs).

Each uses the settings its source trained PPO with (gymnax-blines for MinAtar, the
MiniGrid authors' rl-starter-files, CleanRL's ppo_atari); `presets.PRESETS` names them.
"""

from __future__ import annotations

from batchrl.configs.train_config import TrainConfig
from batchrl.ppo import config as ppo_config


def _minatar(game: str, max_length: int = 1000) -> TrainConfig:
    """Clipped PPO on a MinAtar game from gymnax, fully compiled, 10M steps, from its grid.

    gymnax-blines' PPO settings for MinAtar (its agents/<game>/ppo.yaml, which trained the
    checkpoints gymnax's README scores): 64 envs x 128 steps an update, 8 minibatches, 4
    epochs, Adam at 5e-4 on gradients clipped to norm 0.5, discount 0.999, GAE lambda
    0.95, the ratio and the value clipped at 0.2, entropy 0.01, value 0.5, advantages
    standardised per minibatch, rewards unscaled, and its network: an MLP of 2 x 256 ReLU
    units on the flattened grid each for the policy and the value (`cnn="none"`). The
    MinAtar network (`cnn="minatar"`, no hidden layers) settles early on Breakout: on one
    GPU run (seed 100, 10M steps) it stayed at 5.5 from 0.7M to 3.4M steps and ended at
    10.5, where this MLP reached 44. Its `lr_warmup` of 0.05 ramps from `lr_begin` to
    `lr_end`, both 5e-4: a constant rate, as here. It scores sampled actions (its
    `batch_evaluate` draws from the policy); these presets score the mode, as every
    results table does (Breakout's held-out IQM: 25.3 with the mode, 24.3 sampled).
    gymnax's MinAtar has no sticky actions and a minimal action set, unlike the MinAtar
    paper's.
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
        policy_layers=(256, 256),
        value_layers=(256, 256),
        activation="relu",
        cnn="none",
    )
    return TrainConfig(
        algorithm=algorithm,
        max_length=max_length,
        steps=10_000_000,
        num_envs=64,
        env=game,
        backend="gymnax",
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
    """Clipped PPO on an Atari game in ale-py's vector env (backend 'ale'), 10M steps.

    CleanRL's ppo_atari.py: 8 envs x 128 steps an update, 4 minibatches, 4 epochs, Adam
    at 2.5e-4 falling linearly to 1/N of it at the last of N updates, gradients clipped to
    norm 0.5, discount 0.99, GAE lambda 0.95, the ratio and the value clipped at 0.1,
    entropy 0.01, value 0.5, advantages standardised per minibatch, rewards clipped to
    [-1, 1] and not scaled; the Nature CNN shared by policy and value (orthogonal init,
    0.01 for the logits); frames
    of DQN's preprocessing (4 frames skipped, max-pooled, 84 x 84 grayscale, 4 stacked,
    no-ops and FIRE at a game's start), no sticky actions. A lost life ends the episode
    for the learner and the game plays on (ale-py's life_loss_info), as CleanRL's
    EpisodicLifeEnv. What differs: CleanRL's FireResetEnv presses FIRE after every lost
    life too, here the agent presses it itself; ale-py draws 0 to 29 no-ops (one fewer
    after FIRE), CleanRL 1 to 30. Evaluation plays whole games with sampled actions
    (`eval_sample`), as CleanRL's curves (its training episodes') and the RL Zoo's
    `enjoy.py` (stochastic by default for Atari) score Atari: a mean-action policy may
    never press FIRE after a lost life and play on to the 108,000-frame limit (its
    evaluations took 146 of the 453 s of one GPU run). It scores the game's own, unclipped
    score. `--set env=ALE/<Game>-v5` plays any other game.
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
        backend="ale",
        env_kwargs={
            "repeat_action_probability": 0.0,
            "life_loss_info": True,
            "reward_clipping": True,
        },
        phase_steps=10_240,  # Ten updates per phase.
        eval_episodes=8,  # One round of the 8 envs' whole games, every tenth phase.
        eval_every=10,
        final_episodes=32,
        eval_sample=True,
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
