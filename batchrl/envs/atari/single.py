"""One Gymnasium env that plays an Atari game as one env of a `BatchEnv.atari` plays it.

For what needs a single env where training has a batch in C++: filming a policy
(`visualize`), which ale-py's vector env cannot do, as it renders no frames. `make(game,
options)` takes BatchEnv.atari's game and options and builds, over ale-py's `AtariEnv`
(`gym.make(id, frameskip=1)`), Gymnasium's wrappers that do the same thing:

- `frameskip`, `img_height`, `img_width`, `grayscale` and `episodic_life`: Gymnasium's
  `AtariPreprocessing` (frame skip, the last two frames max-pooled, resize, grayscale,
  `terminal_on_life_loss`), with no no-op starts of its own;
- `use_fire_reset` and `noop_max`: `GameStart`, a game's start as ale-py makes it (FIRE
  where the game has it, then no-ops, 0 to `noop_max` - 1 frames in all, drawn from the
  env's `np_random`, not ale-py's generator);
- `reward_clipping`: `ClipReward` to [-1, 1];
- `stack_num`: `FrameStackObservation`, zero-padded, so the obs is [stack_num, height,
  width] uint8 as the batch's;
- `max_num_frames_per_episode`: `TimeLimit` on the frames stepped since the start, below
  the frame skip, so the step that reaches it ends there as in ale-py;
- `repeat_action_probability`, `full_action_space`, `continuous`,
  `continuous_action_threshold`: `AtariEnv`'s own; `thread_affinity_offset` is a batch's.

Its `render()` is the game's RGB screen [210, 160, 3], and `metadata["render_fps"]` the
Atari's 60 frames a second over the frame skip, so one frame a step plays in real time.
ale-py's `life_loss_info` (the game plays on after an episode that a lost life ended)
and `maxpool=False` have no Gymnasium wrapper and are refused.
"""

from __future__ import annotations

from typing import Any

import ale_py
import gymnasium as gym

from batchrl.envs.atari import settings as settings_lib

ATARI_FPS = 60  # The frames an Atari 2600 (NTSC) draws a second.


class GameStart(gym.Wrapper):
    """Starts each game as ale-py's vector env does: FIRE, then no-ops, on the raw frames.

    After the emulator's reset: one frame of FIRE when `use_fire_reset` and the game's
    action set has FIRE, then no-ops, so the start takes d frames with d uniform in
    [0, noop_max) (at least the FIRE); a game that ends in its no-ops starts again.
    """

    def __init__(self, env: gym.Env, noop_max: int, use_fire_reset: bool, full: bool):
        super().__init__(env)
        ale = env.unwrapped.ale
        actions = ale.getLegalActionSet() if full else ale.getMinimalActionSet()
        self.fire = use_fire_reset and ale_py.Action.FIRE in actions
        self.noop_max = noop_max

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """The game's first frame after the start; info as AtariEnv's of that frame."""
        _, info = self.env.reset(seed=seed, options=options)
        ale = self.env.unwrapped.ale
        if self.fire:
            ale.act(ale_py.Action.FIRE)
        drawn = int(self.np_random.integers(self.noop_max)) if self.noop_max > 0 else 0
        for _ in range(drawn - int(self.fire)):
            ale.act(ale_py.Action.NOOP)
            if ale.game_over():
                ale.reset_game()
        info = {
            **info,
            "lives": ale.lives(),
            "episode_frame_number": ale.getEpisodeFrameNumber(),
            "frame_number": ale.getFrameNumber(),
        }
        return ale.getScreenRGB(), info


def make(game: str, options: dict[str, Any], render_mode: str | None = None) -> gym.Env:
    """The env that plays `game` as each env of `BatchEnv.atari(game, n, **options)` does.

    `game` and `options` are read as BatchEnv.atari reads them (`settings.resolve`); a
    one-line ValueError names one this env cannot take.
    """
    settings = settings_lib.resolve(game, options)
    chosen = settings.options
    if settings.spec is None:
        raise ValueError(f"Atari game {game!r} has no single-player Gymnasium env")
    if chosen["life_loss_info"] and not chosen["episodic_life"]:
        raise ValueError(
            "one Gymnasium env cannot play a game on after a lost life ended its episode "
            "(life_loss_info): give episodic_life=True or neither"
        )
    if not chosen["maxpool"] and chosen["frameskip"] > 1:
        raise ValueError("AtariPreprocessing max-pools the last two frames: no maxpool=False")
    full = chosen["full_action_space"] or chosen["continuous"]
    env = gym.make(
        settings.spec.id,
        frameskip=1,
        repeat_action_probability=chosen["repeat_action_probability"],
        full_action_space=chosen["full_action_space"],
        continuous=chosen["continuous"],
        continuous_action_threshold=chosen["continuous_action_threshold"],
        # ale-py counts the frames stepped since a game's start, as TimeLimit does here
        # below the frame skip; ALE's own count would take in the start's frames.
        max_num_frames_per_episode=0,
        max_episode_steps=chosen["max_num_frames_per_episode"],
        render_mode=render_mode,
    )
    env = GameStart(env, chosen["noop_max"], chosen["use_fire_reset"], full)
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=0,
        frame_skip=chosen["frameskip"],
        screen_size=(chosen["img_width"], chosen["img_height"]),
        terminal_on_life_loss=chosen["episodic_life"],
        grayscale_obs=chosen["grayscale"],
    )
    if chosen["reward_clipping"]:
        env = gym.wrappers.ClipReward(env, -1, 1)
    env = gym.wrappers.FrameStackObservation(env, chosen["stack_num"], padding_type="zero")
    env.metadata = {**env.metadata, "render_fps": ATARI_FPS / chosen["frameskip"]}
    return env
