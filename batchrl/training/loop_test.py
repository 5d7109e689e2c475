import dataclasses
import logging

import gymnasium as gym
import jax
import numpy as np
import pytest

import batchrl
from batchrl import configs
from batchrl.envs.jax import classic, jax_env
from batchrl.ppo import config as config_lib
from batchrl.testing import interrupt, jax_mock, loop_runs
from batchrl.training import checkpoint, keeper, loop, reuse, run, run_folder

DURATIONS = (1, 2, 3, 4)


def built(env, *, max_length, seed=0, eval_sample=False):
    config = config_lib.ClippedConfig(steps_per_update=8, num_minibatches=1, update_epochs=1)
    run = loop_runs.config_for(config, env, max_length=max_length, steps=64, seed=seed)
    run = dataclasses.replace(run, eval_sample=eval_sample)
    return loop.build(run, env, train_steps=8)


@pytest.mark.parametrize("episodes, rounds", [(1, 1), (4, 1), (5, 2), (8, 2)])
def test_evaluation_counts_each_envs_first_episode_in_whole_rounds(episodes, rounds):
    # Envs end episodes every 1, 2, 3, 4 steps. Were every episode that ended counted, a
    # round of 4 steps would hold four of length 1 and one of length 4 (mean 1.6); each
    # env's first weighs once, so the mean length is that of the durations.
    env = jax_mock.CountingBatch(DURATIONS)
    programs, state = built(env, max_length=4)
    _, summary = loop.evaluate(programs, state.eval, state.agent, episodes)
    assert summary["episode/count"] == rounds * len(DURATIONS)
    assert summary["episode/length"] == np.mean(DURATIONS)


def pendulum(length: int) -> jax_env.VmapBatch:
    """4 JAX-native Pendulums whose episodes end after `length` steps."""
    return jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, length), 4)


def test_the_same_eval_state_scores_the_same_and_the_next_round_draws_new_starts():
    env = pendulum(20)
    programs, state = built(env, max_length=20, seed=3)
    after, first = loop.evaluate(programs, state.eval, state.agent, 4)
    _, again = loop.evaluate(programs, state.eval, state.agent, 4)
    _, next_round = loop.evaluate(programs, after, state.agent, 4)
    assert first == again and first["episode/count"] == 4
    assert next_round["episode/return"] != first["episode/return"]
    # The eval state, and so every evaluation of a run, derives from the run's seed.
    _, other_state = built(env, max_length=20, seed=3)
    assert jax.random.key_data(other_state.eval.key).tolist() == (
        jax.random.key_data(state.eval.key).tolist()
    )


def test_a_run_with_eval_sample_scores_actions_sampled_by_the_eval_states_key():
    env = pendulum(20)
    programs, state = built(env, max_length=20, seed=3)
    sampling, _ = built(env, max_length=20, seed=3, eval_sample=True)
    _, mean = loop.evaluate(programs, state.eval, state.agent, 4)
    _, sampled = loop.evaluate(sampling, state.eval, state.agent, 4)
    _, again = loop.evaluate(sampling, state.eval, state.agent, 4)
    # The same parameters and starts: only the actions differ, so the returns do.
    assert sampled["episode/return"] != mean["episode/return"]
    # The eval state's key draws the samples: the same state samples the same.
    assert sampled == again and sampled["episode/count"] == mean["episode/count"] == 4


def test_evaluation_steps_the_eval_env_when_the_run_has_one():
    # Training envs end episodes every 1 to 4 steps; the eval envs every 3.
    env, eval_env = jax_mock.CountingBatch(DURATIONS), jax_mock.CountingBatch((3, 3, 3, 3))
    config = config_lib.ClippedConfig(steps_per_update=8, num_minibatches=1, update_epochs=1)
    run = loop_runs.config_for(config, env, max_length=4, steps=64)
    programs, state = loop.build(run, env, eval_env=eval_env, train_steps=8)
    assert not programs.shared_envs  # Training's episodes go on across evaluations.
    _, summary = loop.evaluate(programs, state.eval, state.agent, 4)
    assert summary["episode/count"] == 4 and summary["episode/length"] == 3
    with pytest.raises(ValueError, match=r"the eval env must have the env's spec and num_envs=4"):
        loop.build(run, env, eval_env=jax_mock.CountingBatch((3, 3)))


def test_the_host_runs_a_jax_native_run_as_whole_programs_not_op_by_op():
    # Every operation the host ran outside a program compiled one of its own on a run's
    # first phase: 60 of them, 3.7 s of a `pendulum_jax` run's start. What remains: the
    # init, simulations, train and eval programs, the keys, the checks and summaries.
    lowered = []
    reuse.clear()  # A run of this config in this process would leave nothing to lower.

    def count(event: str, duration: float, **_) -> None:
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            lowered.append(event)

    env = pendulum(10)
    config = config_lib.PenaltyConfig(update_every=4, update_epochs=1, policy_layers=(7,))
    run = loop_runs.config_for(config, env, max_length=10, steps=80, seed=3)
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        programs, state = loop.build(run, env, train_steps=10, eval_steps=10)
        first = len(lowered)
        for final in (False, True):
            state, _ = loop.run_phase(programs, state, eval_episodes=4, final=final)
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    # 4 and 8 here (JAX 0.10.2), 29 and more before; some slack for other JAX versions.
    assert first <= 6, first  # The agent's init, the simulations', the keys.
    assert len(lowered) - first <= 12, len(lowered) - first


@pytest.mark.slow  # An Atari run and its resume: tens of seconds.
def test_a_resumed_atari_run_begins_new_episodes_in_its_new_games(tmp_path, monkeypatch):
    # Atari's games live outside the checkpoint: after a restore its first phase restarts
    # them, so it acts on their frames, not on the saved ones, and counts new episodes.
    config = configs.get("breakout")
    settings = ["num_envs=2", "steps_per_update=16", "num_minibatches=2", "update_epochs=1"]
    settings += ["steps=64", "phase_steps=32", "eval_every=100", "final_episodes=1"]
    settings += ["max_length=64"]  # The final game cut short; its phases' episodes are not.
    for assignment in settings:
        config = configs.parse_override(config, assignment)
    rundir = run_folder.create(tmp_path, config, "breakout")
    with (
        interrupt.ctrl_c_at_call(monkeypatch, loop, "run_phase", 2),
        pytest.raises(KeyboardInterrupt),
    ):
        run.train(rundir, config)  # Phase 1 of 16 steps an env, then stopped.
    resumed = run.train(rundir, config)
    assert int(resumed.state.phases) == 2
    # Breakout's first episodes outlast 32 steps: counted from the restart, 16 at most.
    assert np.asarray(resumed.state.train.length).max() <= 16


class StartLog(gym.Env):
    """An env that appends each episode's random start to the file at `path`."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, path: str):
        self.path, self.start = path, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.start = float(self.np_random.uniform(-1.0, 1.0))
        with open(self.path, "a") as file:
            file.write(f"{self.start!r}\n")
        return np.array([self.start], np.float32), {}

    def step(self, action):
        return np.array([self.start], np.float32), -abs(self.start), False, False, {}


@pytest.mark.slow  # A run on worker envs, and its resume: ten seconds and more.
def test_a_resumed_run_on_worker_envs_does_not_begin_its_first_episodes_again(tmp_path):
    # Built as at the run's start and restarted unseeded, the envs of every resume began
    # the episodes of the run's first phase, and of its first evaluation, again.
    path = tmp_path / "starts.txt"
    settings = dict(num_envs=2, update_every=2, max_length=50, eval_every=1)
    settings |= dict(eval_episodes=2, final_episodes=2, policy_layers=(8,), value_layers=(8,))
    run = batchrl.train(
        "pendulum", env=f"{__name__}:StartLog", env_kwargs={"path": str(path)},
        steps=100, logdir=tmp_path, **settings,
    )  # fmt: skip
    first = path.read_text().splitlines()
    batchrl.resume(run.rundir, steps=200)
    resumed = path.read_text().splitlines()[len(first) :]
    # Each build resets the 2 envs twice, seeded (training and evaluation share them).
    built = set(first[:4])
    assert set(resumed[:4]) == built and len(resumed) > 4
    assert (set(resumed) - built).isdisjoint(first), (first, resumed)


def test_a_resume_whose_checkpoints_none_load_says_what_to_do(tmp_path):
    env = jax_mock.CountingBatch(DURATIONS)
    programs, state = built(env, max_length=4)
    directory = run_folder.checkpoints(tmp_path)
    directory.mkdir()
    (directory / "ckpt-000000000001.bin").write_bytes(b"")  # Empty, as a full disk left it.
    with pytest.raises(checkpoint.CheckpointError) as raised:
        keeper.restore(tmp_path, programs, state, env.env_spec)
    message = str(raised.value)
    assert message.startswith(f"none of the 1 checkpoints in {directory} loads; the newest, ")
    assert message.endswith(f"move {str(directory)!r} away to train the run again from its start")
    # Checkpoints of a config since edited (another env count): the config is what to mend.
    other = jax_mock.CountingBatch(DURATIONS[:2])
    checkpoint.save(directory, 2, built(other, max_length=4)[1], 3)
    # The run's own spec stays: rewritten with the edited config's, the folder put back
    # would not load.
    run_folder.write_spec(tmp_path, jax_mock.DictCountingBatch(DURATIONS[:2]).env_spec)
    spec = (tmp_path / run_folder.SPEC).read_bytes()
    with pytest.raises(checkpoint.CheckpointError) as raised:
        keeper.restore(tmp_path, programs, state, env.env_spec)
    assert (tmp_path / run_folder.SPEC).read_bytes() == spec
    message = str(raised.value)
    assert ": structure mismatch at /" in message
    assert message.endswith(
        f"; put back what was changed in config.yaml, or move {str(directory)!r} away to train "
        "the run again from its start"
    )


def test_rows_in_a_folder_of_no_checkpoint_are_said_to_be_written_anew(tmp_path, caplog):
    env = jax_mock.CountingBatch(DURATIONS)
    programs, state = built(env, max_length=4)
    for steps, held in [((8, 16), "2 phases' rows"), ((8,), "1 phase's row")]:
        rows = "".join(f'{{"step": {step}, "train/return": 1.0}}\n' for step in steps)
        run_folder.metrics(tmp_path).write_text(rows)  # Its checkpoints deleted, say.
        with caplog.at_level(logging.WARNING, "batchrl.training"):
            assert keeper.restore(tmp_path, programs, state, env.env_spec) is state
        said = f"{tmp_path.name} holds {held} but no checkpoint: the run trains again"
        assert [r.getMessage() for r in caplog.records] == [
            f"{said} from its start and writes them anew"
        ]
        caplog.clear()


@pytest.mark.parametrize("objective", ["kl_penalty", "clipped"])
def test_a_row_holds_an_updates_metrics_only_when_its_phase_trained_one(objective):
    # Phases of 10 steps an env: the first and third train nothing. The penalty
    # objective's memory of 4 episodes (20 steps each) fills in the second and fourth, as
    # the clipped objective's 20 steps an env do.
    if objective == "clipped":
        config = config_lib.ClippedConfig(steps_per_update=20, num_minibatches=1, update_epochs=1)
    else:
        config = config_lib.PenaltyConfig(update_every=4, update_epochs=1)
    config = dataclasses.replace(config, policy_layers=(8,), value_layers=(8,))
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 20), 4)
    rows, _ = loop_runs.train(config, env, 10, 20, phases=4, max_length=20)
    updated = [row for row in rows if "train/policy_loss" in row]
    assert [rows.index(row) + 1 for row in updated] == [2, 4]
    for name in ("train/value_loss", "train/entropy", "train/kl", "train/grad_norm"):
        assert [name in row for row in rows] == [row in updated for row in rows], name
    assert all("normalizer/reward_std" in row and "train/count" in row for row in rows)


@pytest.mark.parametrize(
    "observations, rewards, logged",
    [
        (True, False, {"normalizer/obs_mean", "normalizer/obs_std", "normalizer/count"}),
        (False, True, {"normalizer/reward_std", "normalizer/count"}),
        (False, False, set()),
    ],
)
def test_a_row_summarises_only_the_normalisers_its_config_applies(observations, rewards, logged):
    # The learner keeps both normalisers' statistics whatever the config, and a row
    # showed them all: on Atari a reward_std beside normalize_rewards: false.
    config = config_lib.PenaltyConfig(
        update_every=4,
        update_epochs=1,
        policy_layers=(8,),
        value_layers=(8,),
        normalize_observations=observations,
        normalize_rewards=rewards,
    )
    env = jax_env.VmapBatch(jax_env.TimeLimit(classic.make("Pendulum-v1").env, 20), 4)
    rows, _ = loop_runs.train(config, env, 20, 20, phases=1, max_length=20)
    assert {name for name in rows[-1] if name.startswith("normalizer/")} == logged
