"""AtariGroup: a batch's envs as the games of ale-py's AtariVectorEnv, in its C++ threads.

ale-py steps every game, with the Atari preprocessing of DQN (frame skip, max-pool,
grayscale 84 x 84 frames, a stack of 4, no-op starts), on a pool of C++ threads in this
process; a step is one `send` of the actions and one `recv` of the results, arrays over
the whole batch. A `Group`, so `BatchEnv` steps it as any other group.

The games autoreset as ale-py's NEXT_STEP does, a game that ended starting anew in place
of its next step. SAME_STEP is that, with the games that ended reset at once; DISABLED
leaves the resets to the caller (`BatchEnv` refuses a step of a game that ended). With
`life_loss_info`, a lost life ends the episode (terminated) and the game plays on, as
ale-py does: a reset without a seed of such a game goes on from where it is,
as Stable-Baselines3's EpisodicLifeEnv does, and only a game over starts a new game.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from ale_py.vector_env import AtariVectorEnv
from gymnasium.vector import AutoresetMode

from batchrl.envs import spaces
from batchrl.envs.atari import settings as settings_lib
from batchrl.envs.host import arguments, obs_tree, split, stepper
from batchrl.envs.host import autoreset as autoreset_lib
from batchrl.envs.host import infos as infos_lib
from batchrl.envs.host.group import Step

INFO_KEYS = ("lives", "episode_frame_number", "frame_number")  # As ale-py's AtariEnv's info.
_PYTHON = frozenset(INFO_KEYS)  # Each a Python int in an env's info, as AtariEnv gives it.
# What an env of the group answers `attribute` with.
ATTRIBUTES = ("spec", "render_mode", "metadata", "np_random_seed")
_NO_SEED = -1  # ale-py's seed for a reset that keeps the game's random stream.
_SEEDS = 2**31  # ale-py's seeds are C++ ints: 0 to 2**31 - 1.


class AtariGroup:
    """`num_envs` games of one Atari ROM on `threads` C++ threads.

    None: one per core this process may run on (`split.cores`, its CPU affinity), where
    ale-py's own default would start one per core of the machine. Threads that take every
    such core are pinned one to each, unless `thread_affinity_offset` says otherwise:
    ale-py's games then step 2-21 % faster (`benchmarks/atari_throughput.py`).
    """

    def __init__(self, game: str, num_envs: int, *, threads: int | None = None, **options: Any):
        self.threads = arguments.check_threads(threads) or split.cores()
        pinned = split.first_core_to_pin(self.threads)
        settings = settings_lib.resolve(game, {"thread_affinity_offset": pinned, **options})
        num_envs = arguments.check_num_envs(num_envs)
        self.vector_env: AtariVectorEnv | None = AtariVectorEnv(
            settings.rom,
            num_envs,
            num_threads=self.threads,
            autoreset_mode=AutoresetMode.NEXT_STEP,
            **settings.options,
        )
        self.settings = settings
        self.num_envs = num_envs
        self.name = game
        self.observation_space = spaces.check_observation_space(
            self.vector_env.single_observation_space, game
        )
        self.action_space = spaces.check_action_space(self.vector_env.single_action_space, game)
        self.buffers = stepper.Buffers.allocate(num_envs, self.observation_space, self.action_space)
        self.restarts = 0
        # Each env's info as its last step or reset left it, one array [k] per key.
        self._info = {key: np.zeros(num_envs, np.int32) for key in INFO_KEYS}
        self._seeds = np.full(num_envs, _NO_SEED, np.int64)
        # Envs whose episode ended on a lost life with the game on (life_loss_info).
        self._playing_on = np.zeros(num_envs, bool)
        chosen = settings.options
        self._life_ends = chosen["life_loss_info"] and not chosen["episodic_life"]
        self._mode = AutoresetMode.DISABLED
        self._pending_reset: tuple | None = None
        self._reset_once = False
        self._unread = False  # A step sent whose results no `step_wait` read: a Ctrl-C's.
        # Set by what calls the games from compiled programs (`bridge.ale_ffi`): blocks
        # until those dispatched so far have run, so that closing never frees games that
        # a queued call still steps (it would wait forever on the freed threads).
        self.wait_for_calls: Callable[[], None] | None = None

    # -- the group interface ----------------------------------------------------------------

    def step_async(
        self,
        actions: np.ndarray,
        autoreset: AutoresetMode = AutoresetMode.DISABLED,
        read_infos: bool = False,
    ) -> None:
        """Sends the actions: the games step in their threads while other groups step."""
        vector = self._open()
        self._drop_unread(vector)
        if not self._reset_once:
            raise gym.error.ResetNeeded("BatchEnv.atari's games step only after a reset")
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):  # One outside hangs ale-py's threads.
            outside = np.flatnonzero((actions < space.start) | (actions >= space.start + space.n))
            if outside.size:
                first = int(outside[0])
                raise ValueError(
                    f"env {first}'s action {actions[first]} is not in {space}: a game takes "
                    f"{space.start} to {space.start + space.n - 1}"
                )
        self.buffers.action[...] = actions
        self._mode = autoreset
        vector.send(self.buffers.action)
        self._unread = True

    def step_wait(self) -> Step:
        """The step's results in the buffers; SAME_STEP resets the games that ended at once."""
        obs, reward, terminated, truncated, info = self._open().recv()
        self._unread = False
        order = _env_order(info)
        if isinstance(order, slice) and obs.flags.writeable:
            # ale-py's arrays are the step's own (the next `recv` makes new ones), and the
            # batch copies them into the step's: the group keeps them as its latest obs.
            self.buffers = dataclasses.replace(self.buffers, obs=obs)
        else:
            self.buffers.obs[...] = obs[order]
        buffers = self.buffers
        buffers.reward[:] = reward[order]
        buffers.terminated[:] = terminated[order]
        buffers.truncated[:] = truncated[order]
        lives_before = self._info["lives"]
        self._info = {key: np.asarray(info[key])[order] for key in INFO_KEYS}
        over = self._game_ends(lives_before)
        special: dict[int, dict] = {}
        if self._mode is AutoresetMode.SAME_STEP and over.any():
            ended = np.flatnonzero(over)
            final_obs = buffers.obs[ended].copy()
            final_infos = [self._info_of(i) for i in ended]
            self._reset(ended, [None] * len(ended))
            for n, i in enumerate(ended):
                special[int(i)] = autoreset_lib.final(
                    final_obs[n], final_infos[n], self._info_of(i)
                )
        columns = self._info
        infos = infos_lib.Owed(lambda: infos_lib.Columns(columns, self.num_envs, special, _PYTHON))
        return buffers.obs, buffers.reward, buffers.terminated, buffers.truncated, infos

    def reset_async(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: dict | None
    ) -> None:
        self._pending_reset = (np.asarray(indices, np.int64), list(seeds))

    def reset_wait(self) -> tuple[Any, list[dict]]:
        indices, seeds = self._pending_reset
        self._pending_reset = None
        self._reset(indices, seeds)
        return obs_tree.take(self.buffers.obs, indices), [self._info_of(i) for i in indices]

    def attribute(self, index: int, name: str) -> Any:
        """`spec`, `render_mode` (None), `metadata` or `np_random_seed` (-1 unless seeded)."""
        self._open()
        if name == "spec":
            return self.settings.spec
        if name == "render_mode":
            return None
        if name == "metadata":
            return {"render_modes": []}
        if name == "np_random_seed":
            return int(self._seeds[index])
        raise AttributeError(
            f"the games of BatchEnv.atari run in ale-py's C++ threads and have no {name!r}: "
            f"they answer {', '.join(ATTRIBUTES)}"
        )

    def call(self, index: int, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        return self.attribute(index, name)  # Every attribute is a value, none a method.

    def set_attr(self, index: int, name: str, value: Any) -> None:
        raise AttributeError(
            f"the games of BatchEnv.atari cannot set {name!r} per env; pass the setting to "
            f"BatchEnv.atari as an option"
        )

    def is_wrapped(self, index: int, wrapper_class: type) -> bool:
        return False  # ale-py preprocesses in C++: no Gymnasium wrapper.

    def ready(self, timeout: float) -> bool:
        return True  # The envs step in `step_wait` and reset in `reset_wait`.

    def close(self) -> None:
        """Ends the games' threads, once no dispatched program still calls them.

        ale-py joins the threads when its vector interface is freed.
        """
        if self.vector_env is not None and self.wait_for_calls is not None:
            self.wait_for_calls()
        vector, self.vector_env = self.vector_env, None
        if vector is not None:
            vector.ale = None  # The last reference: its threads are joined here.

    # -- plumbing ---------------------------------------------------------------------------

    def _open(self) -> AtariVectorEnv:
        if self.vector_env is None:
            raise gym.error.ClosedEnvironmentError("these games of BatchEnv.atari are closed")
        return self.vector_env

    def _drop_unread(self, vector: AtariVectorEnv) -> None:
        """Reads the results of a step a Ctrl-C cut off before `step_wait`, and drops them.

        ale-py answers each call with the oldest results not yet read: left there, every
        later step (and a reset's first) returned the step before it, for good.
        """
        if self._unread:
            self._unread = False
            vector.recv()

    def _game_ends(self, lives_before: np.ndarray) -> np.ndarray:
        """[k] bool: the envs whose game this step ended, which ale-py resets at their next step.

        Notes the envs that lost a life with the game on (`life_loss_info`): terminated,
        yet their game goes on. (A life lost at the very frame of the time limit reads as
        one to play on; ale-py then starts a new game at the next step.)
        """
        buffers = self.buffers
        ended = buffers.terminated | buffers.truncated
        if not self._life_ends:
            self._playing_on[:] = False
            return ended
        lives = self._info["lives"]
        lost_a_life = (lives < lives_before) & (lives > 0)
        self._playing_on[:] = buffers.terminated & ~buffers.truncated & lost_a_life
        return ended & ~self._playing_on

    def _reset(self, indices: np.ndarray, seeds: Sequence[int | None]) -> None:
        """Resets the envs at `indices` as ale-py does; their obs and info kept.

        A game that ended on a lost life and plays on is not reset unless seeded: its
        episode goes on from where it is.
        """
        vector = self._open()
        self._drop_unread(vector)
        indices = np.asarray(indices, np.int64)
        seeds = [_check_seed(seed) for seed in seeds]
        fresh = (np.array(seeds, np.int64) != _NO_SEED) | ~self._playing_on[indices]
        mask = np.zeros(self.num_envs, bool)
        mask[indices[fresh]] = True
        if not self._reset_once and not mask.all():
            raise ValueError(
                f"BatchEnv.atari resets every env first, then any of them; got envs "
                f"{indices.tolist()} of {self.num_envs}"
            )
        self._playing_on[indices] = False
        if not fresh.any():
            return
        seed_of = dict(zip(indices.tolist(), seeds, strict=True))
        ordered = np.flatnonzero(mask)  # ale-py takes the seeds in env order.
        obs, info = vector.reset(
            seed=np.array([seed_of[int(i)] for i in ordered], np.int64),
            options={"reset_mask": mask},
        )
        self._reset_once = True
        order = _env_order(info)
        self.buffers.obs[ordered] = obs[order][ordered]
        # New arrays: the infos of the last step, which may be read later, keep theirs.
        for key in INFO_KEYS:
            column = self._info[key].copy()
            column[ordered] = np.asarray(info[key])[order][ordered]
            self._info[key] = column
        given = [seed_of[int(i)] for i in ordered]
        self._seeds[ordered] = np.where(np.array(given) == _NO_SEED, self._seeds[ordered], given)

    def _info_of(self, index: int) -> dict:
        return {key: int(self._info[key][index]) for key in INFO_KEYS}


def _env_order(info: dict) -> np.ndarray | slice:
    """The rows of a result in env order (ale-py returns every env's, ordered by `env_id`).

    All of them as they are (`slice(None)`, no copy) where they are in env order already,
    as ale-py answers a whole batch.
    """
    env_id = np.asarray(info["env_id"])
    if (env_id[1:] > env_id[:-1]).all() and env_id[0] == 0:  # 0, 1, ..., n - 1.
        return slice(None)
    return np.argsort(env_id, kind="stable")


def _check_seed(seed: int | None) -> int:
    """A reset's seed as ale-py takes it: -1 for none, else below 2**31 (C++'s int).

    Larger seeds (Gymnasium's go to 2**32 - 1) are taken modulo 2**31; a negative one is
    a one-line ValueError, as in Gymnasium.
    """
    if seed is None:
        return _NO_SEED
    if seed < 0:
        raise ValueError(f"an Atari game's seed must be at least 0, got {seed}")
    return int(seed) % _SEEDS
