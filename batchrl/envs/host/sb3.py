"""A Stable-Baselines3 `VecEnv` over a `BatchEnv`: SB3's algorithms on batchrl's workers.

`PPO("MlpPolicy", VecEnv(BatchEnv.external("HalfCheetah-v5", 8)))` trains as it would on
SB3's `SubprocVecEnv`, with SB3's conventions: an env resets in the step that ends its
episode (inside its worker, no extra round trip), `dones = terminated | truncated`,
`infos[i]["terminal_observation"]` holds the episode's last obs and
`infos[i]["TimeLimit.truncated"]` says it was cut short. Observations are arrays, or
dicts of arrays for a `Dict` space, as SB3 takes them; SB3 takes no `Tuple` and no nested
`Dict` observations, which are refused when the adapter is made. Needs `stable-baselines3`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common import vec_env

from batchrl import env_spec
from batchrl.envs.host import arguments, batch, batch_taken, obs_tree

Indices = None | int | Iterable[int]


class VecEnv(vec_env.VecEnv):
    """SB3's vectorised-env interface over `batch_env`, which it closes when closed."""

    def __init__(self, batch_env: batch.BatchEnvBase):
        batch_taken.expect_batch(batch_env, "VecEnv wraps")
        check_observation_space(batch_env.single_observation_space)
        self.batch_env = batch_env
        super().__init__(
            batch_env.num_envs, batch_env.single_observation_space, batch_env.single_action_space
        )
        # The env's own, as DummyVecEnv's: VecVideoRecorder reads its `render_fps`.
        self.metadata = {k: v for k, v in batch_env.metadata.items() if k != "autoreset_mode"}
        self._stepping = False  # Whether a step_async's step is in flight.
        self._last_obs: Any = None  # The last obs returned, for a restarted env's last.

    def set_options(self, options: Sequence[dict | None] | dict | None = None) -> None:
        """SB3's options for the next reset: one dict for all envs, or a list of one per env.

        A list of another length is refused: it would leave envs without a reset.
        """
        if isinstance(options, Sequence) and len(options) != self.num_envs:
            raise ValueError(
                f"set_options takes one dict for every env or a list of {self.num_envs} "
                f"(one per env), got a list of {len(options)}"
            )
        super().set_options(options)

    def reset(self) -> Any:
        """Resets every env with the seeds and options set since the last reset.

        Envs given the same options (one dict for all, as `set_options(dict)` gives) reset
        together; each other env's options (`set_options([...])`, one dict per env, or None
        for none, as SB3's VecEnvs read it) are reset with one more call to the batch.
        """
        seeds = list(self._seeds)
        together: dict[int, tuple[dict | None, list[int]]] = {}
        for i, options in enumerate(self._options):
            key = id(options) if options else 0  # set_options(dict) shares one copy.
            together.setdefault(key, (dict(options or {}) or None, []))[1].append(i)
        obs = obs_tree.empty(self.batch_env.single_observation_space, self.num_envs)
        self.reset_infos = [{} for _ in range(self.num_envs)]
        for options, envs in together.values():
            part, infos = self.batch_env.reset_at(
                envs, seed=[seeds[i] for i in envs], options=options
            )
            env_spec.map_tree(lambda out, value, at=envs: out.__setitem__(at, value), obs, part)
            for i, info in zip(envs, infos, strict=True):
                self.reset_infos[i] = info
        self._reset_seeds()
        self._reset_options()
        self._last_obs = _copied(obs)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Starts every env's step, as SubprocVecEnv does: the caller computes meanwhile."""
        actions = check_actions(np.asarray(actions), self.action_space)
        self.batch_env.step_into_async(actions, AutoresetMode.SAME_STEP, read_infos=True)
        self._stepping = True

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict]]:
        """Steps every env; the envs that finish reset in the same step, as SB3 expects."""
        if not self._stepping:
            raise RuntimeError("step_wait without step_async: call step_async(actions) first")
        self._stepping = False
        obs = obs_tree.empty(self.batch_env.single_observation_space, self.num_envs)
        reward = np.empty(self.num_envs, np.float32)
        terminated = np.empty(self.num_envs, bool)
        truncated = np.empty(self.num_envs, bool)
        infos = self.batch_env.step_into_wait(obs, reward, terminated, truncated)
        sb3_infos = [
            self._sb3_info(i, infos[i], terminated, truncated) for i in range(self.num_envs)
        ]
        self._last_obs = _copied(obs)
        return obs, reward, terminated | truncated, sb3_infos

    def _sb3_info(self, i: int, info: dict, terminated: np.ndarray, truncated: np.ndarray) -> dict:
        """Env i's info in SB3's form; its reset's info goes to `reset_infos` as SB3 does.

        A restarted worker's episode was cut with no final obs: its terminal observation is
        the last one the episode gave, which SB3 bootstraps a truncation from (the step's
        obs begins the next episode).
        """
        if not (terminated[i] or truncated[i]):
            return {**info, "TimeLimit.truncated": False}
        if "final_obs" in info:
            self.reset_infos[i] = {
                k: v for k, v in info.items() if k not in ("final_obs", "final_info")
            }
            step_info, last_obs = dict(info["final_info"]), info["final_obs"]
        else:  # A restarted worker: its episode was cut, and obs already begins the next.
            step_info, last_obs = dict(info), env_spec.map_tree(lambda a: a[i], self._last_obs)
        step_info["terminal_observation"] = last_obs
        step_info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return step_info

    def close(self) -> None:
        self.batch_env.close()

    def get_attr(self, attr_name: str, indices: Indices = None) -> list[Any]:
        targets = self._get_indices(indices)
        return list(self.batch_env.get_attr(attr_name, indices=targets, call_methods=False))

    def set_attr(self, attr_name: str, value: Any, indices: Indices = None) -> None:
        """Sets the attribute where the env's wrappers hold it, so the env steps with it.

        As Gymnasium's vector envs (`set_wrapper_attr`); SB3's own VecEnvs set it on the
        outermost wrapper, where `get_attr` reads it back but the env never sees it.
        """
        targets = list(self._get_indices(indices))
        self.batch_env.set_attr(attr_name, [value] * len(targets), indices=targets)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Indices = None, **method_kwargs: Any
    ) -> list[Any]:
        targets = self._get_indices(indices)
        results = self.batch_env.call(method_name, *method_args, indices=targets, **method_kwargs)
        return list(results)

    def env_is_wrapped(self, wrapper_class: type, indices: Indices = None) -> list[bool]:
        return list(self.batch_env.is_wrapped(wrapper_class, indices=self._get_indices(indices)))

    def _get_indices(self, indices: Indices) -> list[int]:
        """SB3's indices as a list; a negative one counts from the end, as DummyVecEnv's do."""
        n = self.num_envs
        given = arguments.whole_indices(list(super()._get_indices(indices)))
        return [int(i) + n if -n <= int(i) < 0 else int(i) for i in given]

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(
                f"the envs render in mode {self.render_mode!r}, not 'rgb_array': no images",
                stacklevel=2,
            )
            return [None] * self.num_envs
        return list(self.batch_env.render())


def _copied(obs: Any) -> Any:
    """A copy of a tree of arrays."""
    return env_spec.map_tree(np.copy, obs)


def check_actions(actions: np.ndarray, space: gym.Space) -> np.ndarray:
    """`actions`, or a one-line TypeError for a fraction where `space` takes integers.

    The batch casts actions to the space's dtype, which would truncate 0.7 to 0; whole
    floats pass, as SB3's PPO sends a `MultiBinary` action as float 0s and 1s.
    """
    dtype = space.dtype
    if actions.dtype.kind != "f" or dtype is None or dtype.kind not in "biu":
        return actions
    with np.errstate(invalid="ignore"):  # NaN and inf are refused below.
        changed = np.flatnonzero(actions != actions.astype(dtype))
    if changed.size:
        raise TypeError(
            f"action {actions.flat[changed[0]]} does not fit the action space {space}: it "
            f"takes integers, and a cast to {dtype} would change it"
        )
    return actions


def check_observation_space(space: gym.Space) -> None:
    """Raises a one-line TypeError for observations SB3 does not take: Tuples, nested Dicts."""
    nests = (gym.spaces.Dict, gym.spaces.Tuple)
    if isinstance(space, gym.spaces.Tuple):
        where = "obs is a Tuple"
    else:
        children = space.spaces.items() if isinstance(space, gym.spaces.Dict) else ()
        inner = [(key, child) for key, child in children if isinstance(child, nests)]
        if not inner:
            return
        key, child = inner[0]
        where = f"obs{env_spec.key_path(key)} is a {type(child).__name__} inside a Dict"
    raise TypeError(
        f"SB3 does not take Tuple observations or nested Dict ones ({where}): flatten them with "
        f"a wrapper (gymnasium.wrappers.FlattenObservation), or train with batchrl's own PPO"
    )
