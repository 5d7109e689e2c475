import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from batchrl.envs import classic, jax_env
from batchrl.ppo import config as config_lib
from batchrl.ppo import policy as policy_lib
from batchrl.training import loop


def train(config, env, steps_per_phase, eval_steps, phases):
    phase = loop.build(config, env, train_steps=steps_per_phase, eval_steps=eval_steps)
    return list(loop.run(phase, env.num_envs, steps_per_phase, phases)), phase


PENDULUM = config_lib.clipped(
    num_agents=32, steps_per_update=128, num_minibatches=16, update_epochs=10, discount=0.95
)
CARTPOLE = config_lib.clipped(
    num_agents=16,
    steps_per_update=128,
    num_minibatches=8,
    update_epochs=4,
    learning_rate=2.5e-3,
    entropy_coef=0.01,
    normalize_rewards=False,
)


@pytest.mark.slow
def test_pendulum_learns_to_swing_up():
    env = jax_env.Batched(classic.make("Pendulum-v1"), PENDULUM.num_agents)
    metrics, _ = train(PENDULUM, env, 1280, 200, phases=8)  # 328k env steps
    assert metrics[-1]["eval/count"] == env.num_envs
    assert metrics[-1]["eval/return"] >= -250, [m["eval/return"] for m in metrics]


@pytest.mark.slow
def test_cartpole_learns_to_balance():
    env = jax_env.Batched(classic.make("CartPole-v1"), CARTPOLE.num_agents)
    metrics, _ = train(CARTPOLE, env, 1280, 500, phases=5)  # 102k env steps
    assert metrics[-1]["eval/return"] >= 475, [m["eval/return"] for m in metrics]


def test_same_seed_same_results():
    config = dataclasses.replace(PENDULUM, num_agents=4, steps_per_update=16, num_minibatches=4)
    env = jax_env.Batched(classic.make("Pendulum-v1"), 4)
    first, phase_a = train(config, env, 32, 10, phases=2)
    second, phase_b = train(config, env, 32, 10, phases=2)
    assert phase_a.agent_state.updates == 4
    leaves = [jax.tree.leaves(p.agent_state.replace(key=None)) for p in (phase_a, phase_b)]
    for a, b in zip(*leaves, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [m["train/policy_loss"] for m in first] == [m["train/policy_loss"] for m in second]


@dataclasses.dataclass(frozen=True)
class ConstantReward:
    """Reward 1 every step, the same observation always; episodes end after 5 steps."""

    num_envs: int
    end: str
    observation_shape: tuple = (1,)
    action_shape: tuple = (1,)
    discrete: bool = False
    num_actions: None = None

    def init(self, key):
        del key
        return jnp.zeros(self.num_envs, jnp.int32), jnp.zeros((self.num_envs, 1))

    def reset(self, env_state, obs, key, mask):
        del key
        return jnp.where(mask, 0, env_state), obs

    def step(self, env_state, action):
        steps = env_state + 1
        ended = steps >= 5
        never = jnp.zeros_like(ended)
        terminated, truncated = (ended, never) if self.end == "terminated" else (never, ended)
        obs = jnp.zeros((self.num_envs, 1))
        return steps, jax_env.TimeStep(obs, jnp.ones(self.num_envs), terminated, truncated)


@pytest.mark.parametrize(
    ("end", "low", "high"), [("truncated", 8.0, 12.0), ("terminated", 2.0, 3.5)]
)
def test_a_time_limit_is_bootstrapped_not_treated_as_terminal(end, low, high):
    # With discount 0.9 the value of an endless stream of reward 1 is 10. A time limit the
    # policy cannot see must not change it; a real terminal state after 5 steps must: the
    # value is then the mean over the 5 positions of the remaining return, about 2.7.
    config = config_lib.clipped(
        num_agents=8,
        steps_per_update=20,
        num_minibatches=4,
        discount=0.9,
        normalize_observations=False,
        normalize_rewards=False,
        learning_rate=3e-3,
    )
    env = ConstantReward(8, end)
    _, phase = train(config, env, 400, 5, phases=3)
    networks = policy_lib.for_env(config, env)
    value = float(networks.value(phase.agent_state.params, jnp.zeros((1, 1)))[0])
    assert low < value < high
