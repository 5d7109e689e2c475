"""A single-file PPO written against Gymnasium's vector API, in the style of CleanRL.

The loop knows only `gymnasium.vector.VectorEnv`: `--vector sync` runs it on
`SyncVectorEnv`, `--vector async` on `AsyncVectorEnv`, `--vector batchrl` on
batchrl's `BatchEnv` of worker processes, and `--vector mujoco` on `BatchEnv.mujoco`
(MuJoCo tasks in C threads); the constructor in `make_envs` is the only difference. It
prints one JSON line with env-steps/s and the last episodes' mean return. Its Gaussian
policy takes Box observations and actions (Pendulum, MuJoCo's tasks); batchrl's own PPO
takes every space.

    python examples/ppo_vector.py --vector batchrl --env HalfCheetah-v5 --total-steps 100000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

from batchrl.envs import BatchEnv


@dataclasses.dataclass(frozen=True)
class Args:
    """The command line's settings (CleanRL's defaults for MuJoCo)."""

    env: str = "HalfCheetah-v5"
    vector: str = "batchrl"  # sync, async, batchrl or mujoco
    num_envs: int = 8
    total_steps: int = 100_000
    num_steps: int = 128  # Steps per env between updates.
    learning_rate: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    epochs: int = 10
    minibatches: int = 32
    clip: float = 0.2
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    seed: int = 0


def make_envs(vector: str, env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """The only place that names a vector env; the rest sees Gymnasium's API."""
    if vector == "sync":
        envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * num_envs)
    elif vector == "async":
        envs = gym.vector.AsyncVectorEnv([lambda: gym.make(env_id)] * num_envs)
    elif vector == "batchrl":
        envs = BatchEnv.external(env_id, num_envs)
    elif vector == "mujoco":
        envs = BatchEnv.mujoco(env_id, num_envs)
    else:
        raise ValueError(f"unknown --vector {vector!r}: use sync, async, batchrl or mujoco")
    spaces = {"observation": envs.single_observation_space, "action": envs.single_action_space}
    other = [
        (kind, space) for kind, space in spaces.items() if not isinstance(space, gym.spaces.Box)
    ]
    if other:
        envs.close()
        raise ValueError(
            f"this example's Gaussian policy takes Box observations and actions, and "
            f"{env_id}'s {other[0][0]} space is {other[0][1]}: batchrl's own PPO takes it "
            "(python -m batchrl.scripts.train, README)"
        )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs = gym.wrappers.vector.ClipAction(envs)
    envs = gym.wrappers.vector.NormalizeObservation(envs)
    return gym.wrappers.vector.NormalizeReward(envs, gamma=0.99)


class Agent(nn.Module):
    """Gaussian policy (state-independent log std) and value, two 64-unit tanh MLPs."""

    action_size: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        def mlp(x: jax.Array, out: int, scale: float) -> jax.Array:
            for _ in range(2):
                x = nn.tanh(nn.Dense(64, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return nn.Dense(out, kernel_init=nn.initializers.orthogonal(scale))(x)

        mean = mlp(obs, self.action_size, 0.01)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_size,))
        return mean, jnp.broadcast_to(log_std, mean.shape), mlp(obs, 1, 1.0)[..., 0]


def log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    """Log-density of `action` under the diagonal Gaussian."""
    z = (action - mean) / jnp.exp(log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)


def train(args: Args, make: Callable[[], gym.vector.VectorEnv] | None = None) -> dict:
    """Runs PPO for `args.total_steps`; returns what it measured."""
    if args.total_steps < args.num_steps * args.num_envs:
        raise ValueError(
            f"--total-steps {args.total_steps} trains no update: one takes num_steps x "
            f"num_envs = {args.num_steps * args.num_envs} steps"
        )
    if args.minibatches < 1 or (args.num_steps * args.num_envs) % args.minibatches:
        raise ValueError(
            f"--minibatches {args.minibatches} does not split an update's num_steps x "
            f"num_envs = {args.num_steps * args.num_envs} steps evenly: give a divisor of it"
        )
    envs = make() if make is not None else make_envs(args.vector, args.env, args.num_envs)
    action_size = envs.single_action_space.shape[0]
    agent = Agent(action_size)
    key = jax.random.key(args.seed)
    key, init_key = jax.random.split(key)
    params = agent.init(init_key, jnp.zeros((1, *envs.single_observation_space.shape)))
    updates = args.total_steps // (args.num_steps * args.num_envs)
    sgd_steps = updates * args.epochs * args.minibatches
    schedule = optax.linear_schedule(args.learning_rate, 0.0, sgd_steps)
    optimizer = optax.chain(
        optax.clip_by_global_norm(args.max_grad_norm), optax.adam(schedule, eps=1e-5)
    )
    opt_state = optimizer.init(params)

    @jax.jit
    def act(params, obs, key):
        mean, log_std, value = agent.apply(params, obs)
        action = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
        return action, log_prob(mean, log_std, action), value

    def loss(params, batch):
        obs, action, old_log_prob, advantage, target, valid = batch
        mean, log_std, value = agent.apply(params, obs)

        def average(x):  # Over the steps that are transitions of an episode.
            return jnp.sum(x * valid) / jnp.maximum(jnp.sum(valid), 1.0)

        ratio = jnp.exp(log_prob(mean, log_std, action) - old_log_prob)
        centred = advantage - average(advantage)
        advantage = centred / (jnp.sqrt(average(centred**2)) + 1e-8)
        clipped = jnp.clip(ratio, 1 - args.clip, 1 + args.clip)
        policy_loss = -average(jnp.minimum(ratio * advantage, clipped * advantage))
        return policy_loss + args.value_coef * 0.5 * average((value - target) ** 2)

    @jax.jit
    def update(params, opt_state, rollout, last_value, key):
        obs, action, old_log_prob, reward, done, value, valid = rollout

        # Generalised advantage estimation, backwards over the rollout.
        def gae(carry, step):
            next_value, next_advantage = carry
            reward, done, value = step
            delta = reward + args.gamma * next_value * (1 - done) - value
            advantage = delta + args.gamma * args.gae_lambda * (1 - done) * next_advantage
            return (value, advantage), advantage

        _, advantage = jax.lax.scan(
            gae, (last_value, jnp.zeros_like(last_value)), (reward, done, value), reverse=True
        )
        flat = jax.tree.map(
            lambda x: x.reshape(-1, *x.shape[2:]),
            (obs, action, old_log_prob, advantage, advantage + value, valid),
        )
        size = flat[0].shape[0]

        def epoch(carry, key):
            def minibatch(carry, indices):
                params, opt_state = carry
                grads = jax.grad(loss)(params, jax.tree.map(lambda x: x[indices], flat))
                changes, opt_state = optimizer.update(grads, opt_state, params)
                return (optax.apply_updates(params, changes), opt_state), None

            order = jax.random.permutation(key, size).reshape(args.minibatches, -1)
            return jax.lax.scan(minibatch, carry, order)[0], None

        keys = jax.random.split(key, args.epochs)
        return jax.lax.scan(epoch, (params, opt_state), keys)[0]

    returns: list[float] = []
    obs, _ = envs.reset(seed=args.seed)
    # Gymnasium's default autoreset (NEXT_STEP): the step after an episode's last one
    # resets the env; it is no transition of either episode and is left out of the loss.
    resetting = np.zeros(args.num_envs, np.float32)
    start = time.perf_counter()
    for _ in range(updates):
        rollout = []
        for _ in range(args.num_steps):
            key, act_key = jax.random.split(key)
            action, action_log_prob, value = act(params, obs, act_key)
            action = np.asarray(action)
            next_obs, reward, terminated, truncated, infos = envs.step(action)
            done = np.logical_or(terminated, truncated).astype(np.float32)
            rollout.append((obs, action, action_log_prob, reward, done, value, 1 - resetting))
            resetting = done
            if "episode" in infos:
                returns += infos["episode"]["r"][infos["_episode"]].tolist()
            obs = next_obs
        rollout = [jnp.asarray(np.stack(column)) for column in zip(*rollout, strict=True)]
        key, update_key = jax.random.split(key)
        last_value = act(params, obs, update_key)[2]  # The value does not use the key.
        params, opt_state = update(params, opt_state, rollout, last_value, update_key)
    seconds = time.perf_counter() - start
    envs.close()
    steps = updates * args.num_steps * args.num_envs
    return {
        "vector": args.vector,
        "env": args.env,
        "num_envs": args.num_envs,
        "env_steps": steps,
        "seconds": round(seconds, 2),
        "env_steps_per_sec": round(steps / seconds),
        "episodes": len(returns),
        "mean_return_last_10": round(float(np.mean(returns[-10:])), 2) if returns else None,
        "returns": returns,
        "params": params,
    }


def main() -> None:
    """Trains with the command line's settings and prints one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Args):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=type(field.default), default=field.default)
    args = Args(**vars(parser.parse_args()))
    try:
        result = train(args)
    except ValueError as error:
        parser.error(str(error))
    print(json.dumps({k: v for k, v in result.items() if k not in ("returns", "params")}))


if __name__ == "__main__":
    main()
