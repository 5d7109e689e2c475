import dataclasses
import functools
import importlib
import json
import math
import os
import re
import subprocess
import sys
import textwrap

import gymnasium as gym
import jax
import numpy as np
import pytest
import yaml

import batchrl
from batchrl import configs
from batchrl.envs.host import lifecycle
from batchrl.envs.jax import classic, gymnax_env
from batchrl.scripts import evaluate, train
from batchrl.testing import cue, mock
from batchrl.training import api, checkpoint, given_env, run_folder

TINY_PENALTY = dict(
    num_envs=4,
    update_every=4,
    max_length=50,
    eval_episodes=4,
    final_episodes=4,
    policy_layers=(16, 16),
    value_layers=(16, 16),
)
# The discrete presets (clipped objective) on 4 envs: an update every 32 env steps.
TINY_CLIPPED = dict(
    num_envs=4,
    steps_per_update=8,
    num_minibatches=2,
    update_epochs=2,
    phase_steps=64,
    eval_episodes=4,
    final_episodes=4,
    eval_every=1,
    policy_layers=(16,),
    value_layers=(16,),
)


# One test process runs this module (`--dist loadgroup`), so its trained run is made once.
pytestmark = pytest.mark.xdist_group("api_test")


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory) -> batchrl.Run:
    logdir = tmp_path_factory.mktemp("runs")
    # The env by its class: the folder records it as module:qualname, and every reader
    # (the command's resume, evaluate) builds it again from there.
    return batchrl.train(
        "pendulum_jax", env=classic.Pendulum, steps=400, seed=3, logdir=logdir, **TINY_PENALTY
    )


def test_a_presets_settings_are_written_in_full_after_a_plain_import_of_batchrl():
    # As training.md writes them; `batchrl.configs` was no attribute after `import batchrl`.
    # dir() and tab completion name what is imported on first use, importing none of it.
    code = (
        "import sys, yaml, batchrl\n"
        "print(yaml.safe_dump(batchrl.configs.to_dict(batchrl.configs.get('cheetah'))))\n"
        "assert {'train', 'resume', 'load', 'Run', 'Policy', 'configs'} <= set(dir(batchrl))\n"
        "print('jax' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert configs.from_dict(yaml.safe_load(done.stdout)) == configs.get("cheetah")
    assert done.stderr == "False\n"  # Imported on first use, JAX with it: none of it.


def test_train_writes_the_commands_run_folder_and_returns_its_metrics(pendulum):
    assert pendulum.rundir.parent.is_dir()
    assert run_folder.parse(pendulum.rundir.name)[1] == "pendulum_jax"
    config = run_folder.read_config(pendulum.rundir)
    assert config == pendulum.config
    assert config.env == "batchrl.envs.jax.classic.pendulum:Pendulum"
    assert (config.seed, config.steps, config.num_envs, config.algorithm.update_every) == (
        3, 400, 4, 4,
    )  # fmt: skip
    # 400 env steps in phases of one update (4 episodes of 50 steps on 4 envs): 2 phases.
    assert [row["step"] for row in pendulum.metrics] == [200, 400]
    assert pendulum.evaluations == pendulum.metrics[-1:]  # eval_every=10: the last only.
    assert np.isfinite(pendulum.metrics[-1]["final/return"])
    spec = run_folder.read_spec(pendulum.rundir)
    assert spec == classic.make("Pendulum-v1").env_spec
    assert checkpoint.steps(run_folder.checkpoints(pendulum.rundir)) == [1, 2]
    # One line for `print(run)` or a notebook, not the state's arrays.
    evaluated = pendulum.metrics[-1]["eval/return"]
    assert repr(pendulum) == (
        f"Run(rundir='{pendulum.rundir}', env='{config.env}', seed=3, steps=400, "
        f"eval_return={evaluated:.6g})"
    )


def test_the_command_and_evaluate_read_the_folder(pendulum):
    timestamp = run_folder.parse(pendulum.rundir.name)[0]
    rows = run_folder.metrics(pendulum.rundir).read_text()
    args = ["--logdir", str(pendulum.rundir.parent), "--timestamp", timestamp]
    assert train.main(args) == 0  # A finished run: resumed, it trains no further.
    assert run_folder.metrics(pendulum.rundir).read_text() == rows
    (row,) = evaluate.evaluate(pendulum.rundir, episodes=4, phases=[2])
    assert row["episodes"] >= 4 and np.isfinite(row["return"])


def test_a_run_folder_or_a_yaml_file_is_a_config_to_start_from(pendulum, tmp_path):
    # As a preset: the saved settings under the folder's name part; --seed, --set on top.
    config, name = api.named_config(str(pendulum.rundir))
    assert (config, name) == (pendulum.config, "pendulum_jax")
    assert api.named_config(str(pendulum.rundir / "config.yaml")) == (config, name)
    assert api.configure(str(pendulum.rundir), seed=4)[:2] == (
        dataclasses.replace(config, seed=4),
        name,
    )
    # `run.rundir` itself, a Path, as `load` and `resume` take it: a TypeError named str only.
    assert api.configure(pendulum.rundir / "config.yaml", seed=4)[:2] == (
        dataclasses.replace(config, seed=4),
        name,
    )
    with pytest.raises(TypeError, match=r"^config is a preset's name, a run folder or YAML"):
        api.configure(3)
    mine = tmp_path / "my settings.yaml"  # A file of one's own, written as config.yaml is.
    mine.write_text((pendulum.rundir / "config.yaml").read_text())
    assert api.named_config(str(mine)) == (config, "my_settings")
    logdir = tmp_path / "runs"
    settings = ["--seed", "4", "--set", "steps=200"]
    argv = ["--logdir", str(logdir), "--config", str(pendulum.rundir / "config.yaml")]
    assert train.main([*argv, *settings]) == 0
    (folder,) = logdir.iterdir()
    assert run_folder.parse(folder.name)[1] == "pendulum_jax"
    assert run_folder.read_config(folder) == dataclasses.replace(config, seed=4, steps=200)
    # A YAML file's name that names no file: that, not the list of presets.
    with pytest.raises(ValueError, match=r"^config file 'nope\.yaml' does not exist$"):
        api.named_config("nope.yaml")
    unknown = r"^unknown config 'nope': .*; or give a run folder or a config's YAML file$"
    with pytest.raises(ValueError, match=unknown):
        api.named_config("nope")


def test_a_loaded_policy_acts_as_the_runs_on_one_observation_and_a_batch(pendulum):
    policy = batchrl.load(pendulum.rundir)
    space = gym.make("Pendulum-v1").action_space
    obs = np.array([0.6, -0.8, 1.5], np.float32)
    action = policy.act(obs)
    assert action.shape == (1,) and action.dtype == np.float32 and space.contains(action)
    np.testing.assert_array_equal(action, pendulum.policy.act(obs))  # The last checkpoint's.
    batch = np.stack([obs, -obs, np.zeros(3, np.float32)])
    actions = policy.act(batch)
    assert actions.shape == (3, 1) and all(space.contains(a) for a in actions)
    np.testing.assert_array_equal(actions[0], action)
    samples = [policy.act(obs, deterministic=False) for _ in range(3)]
    assert all(space.contains(a) for a in samples)
    assert not all(np.array_equal(a, action) for a in samples)  # Drawn, not the mode.


def test_actions_are_the_callers_to_change_in_place(pendulum):
    """As SB3's `predict` and `action_space.sample`: noise added in place, an in-place clip."""
    policy = batchrl.load(pendulum.rundir)
    space = gym.make("Pendulum-v1").action_space
    for obs in (np.zeros(3, np.float32), np.zeros((2, 3), np.float32)):
        action = policy.act(obs)
        action += 5.0
        np.clip(action, space.low, space.high, out=action)
        np.testing.assert_array_equal(action, np.full((*obs.shape[:-1], 1), 2.0, np.float32))


def test_a_policy_compiles_once_for_each_batch_size_it_meets(pendulum, caplog):
    """Sub-batches of varying size, as a user's envs end: no program compiled twice."""
    policy = batchrl.load(pendulum.rundir)
    one, two = np.zeros(3, np.float32), np.zeros((2, 3), np.float32)
    policy.act(one), policy.act(two)  # Each size's programs, compiled once.
    caplog.set_level("WARNING", logger="jax")
    with jax.log_compiles():
        for _ in range(3):
            policy.act(one), policy.act(two)
    assert not [record.getMessage() for record in caplog.records if "ompil" in record.getMessage()]


def test_the_best_policy_loads_and_bad_observations_are_named(pendulum):
    policy = batchrl.load(pendulum.rundir, best=True)
    # Without the episode memory, which no policy reads: the seed's `humanoid` wrote its
    # 147 MB of running episodes into best.bin as into each checkpoint.
    saved = checkpoint._read(pendulum.rundir / "checkpoints" / checkpoint.BEST)[1]
    assert saved["agent"]["storage"] == {"__fresh__": True}
    with pytest.raises(ValueError, match=r"^obs has shape \(2,\): expected \(3,\) for one env"):
        policy.act(np.zeros(2))
    assert policy.act([0.0, 1.0, 0.0]).shape == (1,)  # Any array-like leaf.
    with pytest.raises(ValueError, match=r"^a batch of observations holds at least one, got 0$"):
        policy.act(np.zeros((0, 3)))
    env = gym.make("Pendulum-v1")
    reset = env.reset(seed=0)
    expected = "float32 (3,) for one env, or [N, *(3,)] for a batch"
    bad = [  # NumPy's "inhomogeneous shape" error, or acting on nan, before.
        (reset, f"obs is a tuple of 2 items that make no array: expected {expected}; "),
        (env.step(policy.act(reset[0])), "obs is a tuple of 5 items that make no array: "),
        ({"obs": reset[0]}, f"obs is a dict: expected {expected}"),
        (np.array([1.0, None, 0.0]), f"obs is an array of object: expected {expected}"),
    ]
    for obs, message in bad:
        with pytest.raises(ValueError) as error:
            policy.act(obs)
        assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert str(error.value).endswith(expected)
    with pytest.raises(ValueError, match=r"env\.reset\(\) returns \(obs, info\) and env\.step"):
        policy.act(reset)


def test_a_nan_observation_is_one_line_not_a_nan_action(pendulum):
    policy = batchrl.load(pendulum.rundir)
    said = "holds nan: the policy acts on finite observations only, and its action would be nan"
    batch = np.zeros((3, 3), np.float32)
    batch[2, 1] = np.nan  # One env's of three.
    for obs in (np.array([np.nan, 0.0, 0.0], np.float32), batch):
        with pytest.raises(ValueError, match=f"^obs {re.escape(said)}$"):
            policy.act(obs)
    assert gym.make("Pendulum-v1").action_space.contains(policy.act(batch[:2])[1])


def test_load_without_a_good_checkpoint_is_one_line(pendulum, tmp_path):
    copy = tmp_path / run_folder.name("20260101T000000", "pendulum_jax")
    copy.mkdir()
    for name in (run_folder.CONFIG, run_folder.SPEC):
        (copy / name).write_bytes((pendulum.rundir / name).read_bytes())
    with pytest.raises(run_folder.RunFolderError, match=r"has no checkpoint yet$"):
        batchrl.load(copy)
    with pytest.raises(run_folder.RunFolderError, match="has no best policy: no phase evaluated"):
        batchrl.load(copy, best=True)
    with pytest.raises(run_folder.RunFolderError, match=r"does not exist$"):
        batchrl.load(tmp_path / "nope")
    saved = checkpoint.path_for(run_folder.checkpoints(pendulum.rundir), 2)
    data = bytearray(saved.read_bytes())
    data[-1] ^= 0xFF
    corrupt = checkpoint.path_for(run_folder.checkpoints(copy), 2)
    corrupt.parent.mkdir()
    corrupt.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError) as error:
        batchrl.load(copy)
    assert str(error.value) == (
        f"none of the 1 checkpoints in {corrupt.parent} loads; "
        f"the newest, {corrupt}: checksum mismatch: the payload is corrupted"
    )
    # A resume that raises the budget and fails to restore leaves the config as it was.
    config = (copy / run_folder.CONFIG).read_bytes()
    with pytest.raises(checkpoint.CheckpointError, match="none of the 1 checkpoints"):
        batchrl.resume(copy, steps=2 * run_folder.read_config(copy).steps)
    assert (copy / run_folder.CONFIG).read_bytes() == config
    (corrupt.parent / run_folder.BEST).write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match="checksum mismatch"):
        batchrl.load(copy, best=True)


def test_a_file_or_the_logdir_in_place_of_a_run_folder_names_the_folder_to_give(pendulum, capsys):
    """SB3 loads a model's file, and the train command's --logdir is the runs' parent."""
    rundir, logdir = str(pendulum.rundir), str(pendulum.rundir.parent)
    config = pendulum.rundir / run_folder.CONFIG
    with pytest.raises(run_folder.RunFolderError) as error:
        batchrl.load(config)
    assert str(error.value) == (
        f"{str(config)!r} is a file, not a run folder: give {rundir!r}, the run folder holding it"
    )
    best = run_folder.checkpoints(rundir) / run_folder.BEST  # A checkpoint's file loads.
    np.testing.assert_array_equal(
        batchrl.load(best, best=True).act(np.zeros(3)),
        batchrl.load(rundir, best=True).act(np.zeros(3)),
    )
    said = f"{logdir!r} holds 1 run folder(s), not a run: give one, such as {rundir!r}"
    with pytest.raises(run_folder.RunFolderError, match=f"^{re.escape(said)}$"):
        batchrl.load(logdir)
    # evaluate takes the logdir as its runs (`evaluate --logdir runs/seeds`), each a row.
    capsys.readouterr()
    assert evaluate.main(["--logdir", logdir, "--episodes", "1", "--best"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(row["run"], row["best"]) for row in rows] == [(pendulum.rundir.name, True)]
    inside = str(run_folder.checkpoints(rundir))  # Beside best.bin, a folder in the run's.
    said = f"{inside!r} is in a run folder: give {rundir!r}"
    with pytest.raises(run_folder.RunFolderError, match=f"^{re.escape(said)}$"):
        batchrl.load(inside)


@pytest.mark.slow
def test_a_jax_native_env_object_trains_in_memory():
    run = batchrl.train("cartpole_jax", env=classic.make("CartPole-v1"), steps=400, **TINY_PENALTY)
    assert run.rundir is None and (run.config.backend, run.config.env) == ("jax", "CartPole")
    assert repr(run).startswith("Run(rundir=None, env='CartPole', seed=0, steps=400, eval_return=")
    assert [row["step"] for row in run.metrics][-1] == 400
    action = run.policy.act(np.zeros(4, np.float32))
    assert isinstance(action, np.int64) and gym.make("CartPole-v1").action_space.contains(action)
    assert run.policy.act(np.zeros((2, 4))).dtype == np.int64
    with pytest.raises(run_folder.RunFolderError, match=r"^rundir is None: a run trained with "):
        batchrl.load(run.rundir)  # pathlib's TypeError before.


def test_a_gymnasium_env_made_by_gym_make_is_recorded_by_its_id_keywords_and_step_limit():
    made = gym.make("Pendulum-v1", g=5.0, max_episode_steps=100)
    config, name, given = api.configure("pendulum_jax", env=made)  # As PPO("MlpPolicy", env).
    assert given is None and name == "pendulum_jax"
    assert (config.backend, config.env, config.env_kwargs) == (
        "processes",
        "Pendulum-v1",
        {"g": 5.0},
    )
    assert config.max_length == 100
    # With max_length too, whichever ends an episode first: the made limit of 100 was lost.
    assert api.configure("pendulum", env=made, max_length=150)[0].max_length == 100
    assert api.configure("pendulum", env=made, max_length=50)[0].max_length == 50
    # Above the id's 200, as Gymnasium's TimeLimit takes it: the run's envs were cut at 200.
    above = gym.make("Pendulum-v1", max_episode_steps=500)
    config, _, given = api.configure("pendulum", env=above, max_length=1000)
    assert config.max_length == 500 and given().spec.max_episode_steps == 500
    with pytest.raises(ValueError) as error:
        given_env.recordable(config, given, "runs")
    assert str(error.value) == (
        "env 'Pendulum-v1' was made with max_episode_steps=500, above its id's 200, which a "
        "run folder, whose envs are made by id, cannot record: give a constructor that makes "
        "it, defined at a module's top level, or logdir=None"
    )
    config, _, given = api.configure(
        "pendulum", env=gym.make("Pendulum-v1", render_mode="rgb_array")
    )
    assert (given, config.env_kwargs, config.max_length) == (
        None,
        {"render_mode": "rgb_array"},
        200,
    )
    import ale_py

    gym.register_envs(ale_py)  # ale-py's ids; the `ale` backend keeps the preset's options.
    for sticky in (0.1, 0.25):  # 0.25, v5's registered default, gave way to the preset's 0.0.
        game = gym.make("ALE/Breakout-v5", repeat_action_probability=sticky)
        config, _, given = api.configure("breakout", env=game)
        assert (given, config.backend, config.env) == (None, "ale", "ALE/Breakout-v5")
        assert config.env_kwargs == {
            **configs.get("breakout").env_kwargs,
            "repeat_action_probability": sticky,
        }


def test_a_vector_env_or_a_partial_given_as_env_is_said_for_what_it_is():
    # A vector env was said to lack a JAX-native env's env_spec and max_length.
    vector = gym.make_vec("Pendulum-v1", 4, vectorization_mode="sync")
    with pytest.raises(TypeError) as error:
        api.configure("pendulum", env=vector)
    assert str(error.value) == (
        "env is a vector env, SyncVectorEnv: a run makes its own batch of envs, so give one "
        "env's id, constructor or gym.make env, with num_envs=4"
    )
    # A partial was named 'partial' in every line, and said to be wrapped after gym.make.
    partial = functools.partial(gym.make, "Pendulum-v1", g=3.0)
    config, _, given = api.configure("pendulum", env=partial)
    assert config.env == "Pendulum-v1" and given is partial
    assert refusal(partial) == (
        "env 'Pendulum-v1' is a functools.partial of gym.make('Pendulum-v1', ...), which a "
        "run folder cannot record: give the id as env, its keywords as env_kwargs, or "
        "logdir=None"
    )
    # One of a class said it had no module:qualname, its class's in plain sight.
    assert refusal(functools.partial(mock.CountingEnv, 5, end="truncated")) == (
        "env 'CountingEnv' is a functools.partial, which a run folder cannot record: give "
        "env='batchrl.testing.mock:CountingEnv', env_kwargs={'end': 'truncated'} (its "
        "positional arguments among them), or logdir=None"
    )
    # One of a script's class: not env='__main__:Mine', which no other process imports.
    mine = type("Mine", (mock.CountingEnv,), {"__module__": "__main__"})
    assert refusal(functools.partial(mine, duration=5)) == (
        "env 'Mine' is defined in this script, which the train command and evaluate never "
        "run: define it in a module and give env='module:Mine', or logdir=None"
    )


def refusal(env) -> str:
    """Why a run folder cannot record `env` given to the pendulum preset, in one line."""
    config, _, given = api.configure("pendulum", env=env)
    with pytest.raises(ValueError) as error:
        given_env.recordable(config, given, "runs")
    return str(error.value)


@pytest.mark.slow
def test_a_gymnasium_env_wrapped_after_gym_make_trains_as_wrapped_in_memory_only(tmp_path):
    clipped = gym.wrappers.ClipReward(gym.make("Pendulum-v1"), -0.5, 0.5)
    with pytest.raises(ValueError) as error:
        batchrl.train("pendulum", env=clipped, logdir=tmp_path)
    assert str(error.value) == (
        "env 'Pendulum-v1' was wrapped or changed after gym.make, which a run folder cannot "
        "record: give a constructor defined at a module's top level, or logdir=None"
    )
    assert not any(tmp_path.iterdir())
    run = batchrl.train("pendulum", env=clipped, steps=400, **TINY_PENALTY)  # Worker envs.
    returns = [row["train/return"] for row in run.metrics if "train/return" in row]
    assert returns and min(returns) >= -0.5 * 50  # Clipped rewards over max_length's 50 steps.
    with pytest.raises(TypeError) as error:
        batchrl.train("pendulum", env=cue.Cue(), logdir=None)
    assert str(error.value) == (
        "env is a Cue that gym.make did not make, so it cannot be made again for each of the "
        "run's envs: give its constructor or id"
    )


def test_a_budget_that_rounds_up_to_whole_phases_says_so_in_the_first_line(capsys):
    # 250 steps trained 400 and said nothing of it (6,000 once trained 199,980).
    run = batchrl.train("pendulum_jax", steps=250, **TINY_PENALTY)
    assert run.metrics[-1]["step"] == 400
    first = capsys.readouterr().out.splitlines()[0]
    assert "; steps=250 rounded up to 2 whole phases of 200: 400 env steps; " in first
    batchrl.train("pendulum_jax", steps=400, **TINY_PENALTY)
    assert "rounded" not in capsys.readouterr().out


@pytest.mark.slow  # Five short runs: tens of seconds.
def test_a_budget_that_ends_before_the_first_update_is_a_one_line_warning(tmp_path, caplog):
    # 100 steps of 4 envs end before 4 episodes of 50: the untrained policy's scores were
    # returned without a word, as were the clipped objective's 64 steps of a 160-step update.
    caplog.set_level("WARNING", logger="batchrl")
    settings = dict(TINY_PENALTY, phase_steps=100, eval_every=1)
    run = batchrl.train("pendulum_jax", steps=100, logdir=tmp_path, **settings)
    assert "train/kl" not in run.metrics[-1] and run.metrics[-1]["final/return"] < 0
    clipped = dict(TINY_CLIPPED, objective="clipped", steps_per_update=40)
    batchrl.train("pendulum_jax", steps=64, **clipped)
    said = [record.getMessage() for record in caplog.records]
    assert [text for text in said if text.startswith("the run trained no update")] == [
        "the run trained no update: its 100 env steps ended before the first, which comes "
        "after update_every=4 episodes; raise steps for a trained policy",
        "the run trained no update: its 64 env steps ended before the first, which comes "
        "after 160 env steps (num_envs=4 x steps_per_update=40); raise steps for a trained "
        "policy",
    ]
    caplog.clear()
    batchrl.resume(run.rundir, steps=300)  # Its first update is in its folder's rows.
    batchrl.resume(run.rundir, steps=400)
    batchrl.train("pendulum_jax", steps=64, objective="clipped", **TINY_CLIPPED)
    said = [record.getMessage() for record in caplog.records]
    assert not [text for text in said if text.startswith("the run trained no update")]


def test_checkpoints_past_the_one_resumed_that_do_not_load_are_set_aside(tmp_path, caplog):
    # Three empty files of higher steps: the resume skipped them, and the rotation then
    # deleted each checkpoint it wrote, and the one it resumed from: none loaded after.
    settings = dict(TINY_PENALTY, phase_steps=200)
    run = batchrl.train("pendulum_jax", steps=400, logdir=tmp_path, **settings)
    directory = run.rundir / "checkpoints"
    for step in (900, 901, 902):
        (directory / f"ckpt-{step:012d}.bin").write_bytes(b"")
    caplog.set_level("WARNING", logger="batchrl")
    resumed = batchrl.resume(run.rundir, steps=800)
    assert resumed.metrics[-1]["step"] == 800
    assert sorted(path.name for path in directory.glob("ckpt-*")) == [
        f"ckpt-{step:012d}.bin" for step in (2, 3, 4)
    ]
    assert sorted(path.name for path in directory.glob("skipped-*")) == [
        f"skipped-ckpt-{step:012d}.bin" for step in (900, 901, 902)
    ]
    said = [record.getMessage() for record in caplog.records]
    assert f"set aside {directory / 'ckpt-000000000902.bin'}, which does not load, as " in (
        "\n".join(said)
    )
    batchrl.load(run.rundir)  # Its newest checkpoint, the resumed run's last.


@pytest.mark.parametrize("kind", ["garbage", "another run's"])
def test_a_best_policy_that_does_not_load_is_set_aside_and_replaced(tmp_path, caplog, kind):
    # Garbage in best.bin was kept on without a word, past every phase that scored less
    # than the rows' best, and `evaluate --best` found it only later. Another run's, of
    # other layers, was kept on as well, and `load(best=True)` refused it.
    settings = dict(TINY_PENALTY, phase_steps=200, eval_every=1)
    run = batchrl.train("pendulum_jax", steps=400, logdir=tmp_path / "run", **settings)
    best = run.rundir / "checkpoints" / "best.bin"
    if kind == "garbage":
        best.write_bytes(b"not a checkpoint")
        why = "bad magic: not a batchrl checkpoint"
    else:
        settings["policy_layers"] = (8,)
        other = batchrl.train("pendulum_jax", steps=200, logdir=tmp_path / "other", **settings)
        best.write_bytes((other.rundir / "checkpoints" / "best.bin").read_bytes())
        why = "structure mismatch at /agent/learner/params"
    copied = best.read_bytes()
    caplog.set_level("WARNING", logger="batchrl")
    batchrl.resume(run.rundir, steps=600)
    said = [record.getMessage() for record in caplog.records]
    (aside,) = [text for text in said if "skipped-best.bin" in text]
    assert aside.startswith(f"{best}: {why}")
    assert aside.endswith("; set aside as skipped-best.bin: the next evaluation is kept")
    assert (best.parent / "skipped-best.bin").read_bytes() == copied
    batchrl.load(run.rundir, best=True)  # Phase 3's, evaluated after the resume.


def test_rows_that_end_before_the_checkpoint_resumed_are_said(tmp_path, caplog):
    # A folder copied while its run trained: rows of phase 1, checkpoints of phase 3.
    run = batchrl.train("pendulum_jax", steps=600, logdir=tmp_path, **TINY_PENALTY, phase_steps=200)
    metrics = run.rundir / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])
    caplog.set_level("WARNING", logger="batchrl")
    batchrl.resume(run.rundir, steps=800)
    assert (
        "metrics.jsonl's rows end at env step 200, before its checkpoint's 600: the phases "
        "between have no rows (was the folder copied while its run trained?)"
    ) in [record.getMessage() for record in caplog.records]


@pytest.mark.slow
def test_a_run_stopped_in_python_resumes_there_as_if_never_stopped(tmp_path, monkeypatch, capsys):
    # Ctrl-C in a notebook stops `batchrl.train`; `batchrl.resume` goes on from its folder.
    from batchrl.testing import interrupt
    from batchrl.training import loop

    settings = dict(steps=1000, seed=2, **TINY_PENALTY)
    whole = batchrl.train("pendulum_jax", logdir=tmp_path / "whole", **settings)
    with (
        interrupt.ctrl_c_at_call(monkeypatch, loop, "run_phase", 3),
        pytest.raises(KeyboardInterrupt),
    ):
        batchrl.train("pendulum_jax", logdir=tmp_path / "stopped", **settings)
    stopped = interrupt.only_folder(tmp_path / "stopped")
    # The folder a resume takes, named where the run said it stopped.
    assert (
        f"interrupted: saved a checkpoint at env step 400 in {stopped}\n" in capsys.readouterr().out
    )
    resumed = batchrl.resume(stopped)
    last, (whole_bytes, resumed_bytes) = interrupt.last_checkpoints(
        tmp_path / "whole", tmp_path / "stopped"
    )
    assert last == 5 and resumed_bytes == whole_bytes
    assert [row["step"] for row in resumed.metrics] == [row["step"] for row in whole.metrics]
    longer = batchrl.resume(resumed.rundir, steps=1400)  # Its budget raised: 2 phases more.
    assert [row["step"] for row in longer.metrics][-3:] == [1000, 1200, 1400]
    assert run_folder.read_config(resumed.rundir).steps == 1400
    with pytest.raises(ValueError, match=r"may raise it, not lower it to 600$"):
        batchrl.resume(resumed.rundir, steps=600)
    with pytest.raises(run_folder.RunFolderError, match=r"holds 1 run folder\(s\), not a run"):
        batchrl.resume(tmp_path / "whole")


def test_a_memory_of_short_episodes_resumes_from_the_steps_it_holds(tmp_path, monkeypatch):
    # A checkpoint keeps the steps each slot of the episode memory holds, and a resume puts
    # zeros past them where older episodes' steps lay: CartPole's episodes end short of
    # max_length, and the resumed run still trains as the uninterrupted one.
    from batchrl.testing import interrupt
    from batchrl.training import loop

    settings = dict(TINY_PENALTY, max_length=200, phase_steps=200, steps=1000, seed=4)
    batchrl.train("cartpole_jax", logdir=tmp_path / "whole", **settings)
    with (
        interrupt.ctrl_c_at_call(monkeypatch, loop, "run_phase", 3),
        pytest.raises(KeyboardInterrupt),
    ):
        batchrl.train("cartpole_jax", logdir=tmp_path / "stopped", **settings)
    folder = interrupt.only_folder(tmp_path / "stopped")
    memory = checkpoint._read(checkpoint.path_for(folder / "checkpoints", 2))[1]["agent"]
    held = memory["storage"]["steps"]["reward"]
    lengths = memory["storage"]["length"]
    assert 0 < held.size == lengths.sum() < lengths.size * 200 / 4  # Most of it padding.
    batchrl.resume(folder)
    last, (whole, resumed) = interrupt.last_checkpoints(tmp_path / "whole", tmp_path / "stopped")
    assert last == 5 and resumed == whole


def test_a_resumed_runs_rows_hold_nan_where_no_episode_ended_as_a_trained_runs(tmp_path):
    # The file's null came back as None from `resume`, where `train` gives NaN: a float.
    settings = dict(TINY_CLIPPED, objective="clipped", max_length=50, eval_every=4)
    run = batchrl.train("pendulum_jax", steps=256, logdir=tmp_path, **settings)
    longer = batchrl.resume(run.rundir, steps=320)
    # 16 steps an env a phase: Pendulum's episodes of 50 end in the fourth phase first.
    for rows in (run.metrics, longer.metrics[:4]):
        assert [math.isnan(row["train/return"]) for row in rows] == [True] * 3 + [False]


def test_a_callback_sees_each_kept_row_and_false_stops_the_run_checkpointed(tmp_path, capsys):
    # As SB3's callbacks: log elsewhere (wandb.log), or stop early by returning False.
    seen = []

    def callback(row):
        seen.append(row)
        return len(seen) < 3

    run = batchrl.train(
        "pendulum_jax", steps=1000, logdir=tmp_path, callback=callback, **TINY_PENALTY
    )
    assert [row["step"] for row in seen] == [200, 400, 600] == [r["step"] for r in run.metrics]
    assert seen == run.metrics and "train/return" in seen[0]
    assert checkpoint.steps(run.rundir / "checkpoints")[-1] == 3
    assert "stopped by the callback at env step 600" in capsys.readouterr().out
    resumed = batchrl.resume(run.rundir)  # Goes on to its budget.
    assert [row["step"] for row in resumed.metrics] == [200, 400, 600, 800, 1000]
    with pytest.raises(ValueError, match=r"^callback is called with one run's rows"):
        batchrl.train("pendulum_jax", seeds=[0, 1], callback=callback)


def test_the_learning_rate_decays_over_the_whole_phases_a_budget_rounds_up_to():
    # 100 env steps round up to one phase of 256: 8 updates of 32 env steps. The schedule's
    # horizon was the 100, so updates 5 to 8 trained at a learning rate of 0.
    settings = {**TINY_CLIPPED, "phase_steps": 256, "objective": "clipped"}
    settings["anneal_learning_rate"] = True
    run = batchrl.train("cartpole_jax", steps=100, **settings)
    assert run.metrics[-1]["step"] == 256 and run.config.shape.steps == 256
    assert int(run.state.agent.learner.updates) == 8
    learning_rate = run.config.algorithm.learning_rate
    # The last update's: 1 - 7/8 of the rate, annealed linearly over the 8.
    assert run.metrics[-1]["train/learning_rate"] == pytest.approx(learning_rate / 8, rel=0.2)
    # Two phases of 30 batch steps: 7 whole updates of 8, the last at 1/7 of the rate.
    run = batchrl.train("cartpole_jax", steps=240, **{**settings, "phase_steps": 120})
    assert int(run.state.agent.learner.updates) == 7
    assert run.metrics[-1]["train/learning_rate"] == pytest.approx(learning_rate / 7, rel=0.05)


def test_each_evaluation_runs_its_eval_episodes_in_whole_rounds_the_last_at_least_its_final():
    # eval_episodes asked one round of the envs whatever it said: blackjack's 200 were 8.
    # The last took final_episodes alone: 8 episodes, where best.bin held others' 12.
    settings = {**TINY_CLIPPED, "eval_episodes": 10, "final_episodes": 5}
    run = batchrl.train("cartpole_jax", steps=128, objective="clipped", **settings)
    assert [row["eval/count"] for row in run.metrics] == [12, 12]  # 3 rounds of 4 each.
    assert run.metrics[-1]["final/episodes"] == 12
    settings["final_episodes"] = 14  # More than eval_episodes: 4 rounds.
    run = batchrl.train("cartpole_jax", steps=128, objective="clipped", **settings)
    assert [row["eval/count"] for row in run.metrics] == [12, 16]


def test_settings_of_the_chosen_objective_may_come_before_it():
    config, _, _ = api.configure("cartpole_jax", steps_per_update=64, objective="clipped")
    assert config.algorithm.objective == "clipped" and config.algorithm.steps_per_update == 64


def test_an_env_without_a_name_needs_logdir_none(tmp_path):
    with pytest.raises(ValueError, match="has no importable module:qualname") as error:
        batchrl.train("blackjack", env=lambda: cue.Cue(), logdir=tmp_path)
    assert "\n" not in str(error.value)
    # A class the running script defines, at its top level: `__main__:Corridor` would name
    # nothing in the train command's resume and in evaluate.
    corridor = type("Corridor", (cue.Cue,), {"__module__": "__main__"})
    with pytest.raises(ValueError) as error:
        batchrl.train("blackjack", env=corridor, logdir=tmp_path)
    assert str(error.value) == (
        "env 'Corridor' is defined in this script, which the train command and evaluate "
        "never run: define it in a module and give env='module:Corridor', or logdir=None"
    )
    made = lambda: cue.Cue()  # noqa: E731  A lambda of the script's: no name to give.
    made.__module__ = "__main__"
    with pytest.raises(ValueError) as error:
        batchrl.train("blackjack", env=made, logdir=tmp_path)
    assert str(error.value).endswith("give env='module:name', or logdir=None")
    # An env object of a module's class: its class by name records it, if built alike.
    with pytest.raises(ValueError) as error:
        batchrl.train("pendulum_jax", env=classic.Pendulum(), logdir=tmp_path)
    assert str(error.value) == (
        "env 'Pendulum' is an object, whose settings a run folder cannot record: give its "
        "class by name, env='batchrl.envs.jax.classic.pendulum:Pendulum', with its "
        "constructor's keywords in env_kwargs, or logdir=None"
    )
    with pytest.raises(ValueError, match=r"^a gymnax env object's parameters cannot be rec"):
        batchrl.train("acrobot_gymnax", env=gymnax_env.make("Acrobot-v1"), logdir=tmp_path)
    with pytest.raises(ValueError, match="unknown config key 'update_evry'"):
        batchrl.train("pendulum", update_evry=3, logdir=tmp_path)
    with pytest.raises(ValueError, match=r"num_envs=2\.5: expected int"):
        batchrl.train("pendulum", num_envs=2.5, logdir=tmp_path)
    for seeds in (None, [0, 1]):  # Refused once begun: the folders go too.
        with pytest.raises(MemoryError, match="storage takes"):
            batchrl.train("pendulum_jax", num_envs=10**8, seeds=seeds, logdir=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_an_id_registered_by_the_script_trains_in_memory_only(tmp_path):
    # `python -c` (or a notebook): workers cannot import the script to find the id, and
    # the train command's resume and `evaluate`, which never run it, could not either.
    script = textwrap.dedent(f"""
        import gymnasium as gym
        import batchrl
        from batchrl.testing import cue

        class ScriptCue(cue.Cue):
            pass

        gym.register(id="ScriptCue-v0", entry_point=ScriptCue, max_episode_steps=5)
        settings = {TINY_CLIPPED!r}
        try:
            batchrl.train("blackjack", env="ScriptCue-v0", logdir={str(tmp_path)!r})
        except ValueError as error:
            print(error)
        run = batchrl.train("blackjack", env="ScriptCue-v0", steps=64, **settings)
        print(run.rundir, run.config.env, run.metrics[-1]["eval/length"])
    """)
    result = subprocess.run([sys.executable, "-c", script], timeout=300, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()  # The run's progress lines between.
    assert [lines[0], lines[-1]] == [
        "env 'ScriptCue-v0' is registered by this script, which the train command and "
        "evaluate never run: register it in a module and give env='module:ScriptCue-v0', "
        "or logdir=None",
        "None ScriptCue-v0 5.0",  # Within the registered time limit.
    ]
    assert not any(tmp_path.iterdir())


def test_an_id_a_module_registered_is_refused_with_a_folder_before_training(tmp_path):
    # gym.make of an id that a module of the user's registers: the folder recorded the id,
    # which the train command's resume and `evaluate` then called unknown.
    gym.register(id="ModuleCue-v0", entry_point="batchrl.testing.cue:Cue", max_episode_steps=5)
    try:
        with pytest.raises(ValueError) as refused:
            batchrl.train("blackjack", env=gym.make("ModuleCue-v0"), logdir=tmp_path)
    finally:
        gym.registry.pop("ModuleCue-v0")
    assert str(refused.value) == (
        "env 'ModuleCue-v0' is registered in this process only, which the train command and "
        "evaluate never run: register it in a module and give env='module:ModuleCue-v0', or "
        "logdir=None"
    )
    assert not any(tmp_path.iterdir())


def test_an_id_a_module_registers_is_recorded_as_module_colon_id_and_trains(tmp_path, monkeypatch):
    # gym.make("cues:FolderCue-v0") keeps no "cues:" in the env's spec: the id was refused
    # with a folder, and in memory the workers, which never imported cues, knew no such id.
    (tmp_path / "cues.py").write_text(
        "import gymnasium as gym\n"
        "from batchrl.testing.cue import Cue\n"
        "gym.register(id='FolderCue-v0', entry_point='cues:Cue', max_episode_steps=5)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # For the fresh interpreter.
    logdir = tmp_path / "runs"
    settings = {**TINY_CLIPPED, "steps": 64, "backend": "processes", "max_length": 5}
    try:
        made = batchrl.train(
            "blackjack", env=gym.make("cues:FolderCue-v0"), logdir=logdir, **settings
        )
        by_id = batchrl.train("blackjack", env="FolderCue-v0", logdir=logdir, seed=1, **settings)
        in_memory = batchrl.train("blackjack", env=gym.make("FolderCue-v0"), **settings)
    finally:
        gym.registry.pop("FolderCue-v0", None)
        sys.modules.pop("cues", None)
    for run in (made, by_id):
        assert run_folder.read_config(run.rundir).env == "cues:FolderCue-v0"
    assert in_memory.config.env == "FolderCue-v0"
    assert made.metrics[-1]["train/return"] == in_memory.metrics[-1]["train/return"]


@pytest.mark.parametrize(
    ("name", "entry_point"),
    [
        ("SplitCue-v0", "batchrl.testing.cue:Cue"),
        # A variant of Gymnasium's env under an id of the user's: recorded as the bare id,
        # which `evaluate` then called unknown.
        ("SplitCart-v0", "gymnasium.envs.classic_control.cartpole:CartPoleEnv"),
    ],
)
def test_an_id_registered_beside_its_envs_module_is_recorded_by_the_registering_one(
    tmp_path, monkeypatch, name, entry_point
):
    # `regs` registers an id whose class lives in another module: the run was refused,
    # told to register the id in a module, which it was.
    (tmp_path / "regs.py").write_text(
        "import gymnasium as gym\n"
        f"gym.register({name!r}, entry_point={entry_point!r}, max_episode_steps=5)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))  # For the fresh interpreter.
    settings = {**TINY_CLIPPED, "steps": 64, "max_length": 5}
    try:
        importlib.import_module("regs")
        run = batchrl.train("blackjack", env=name, logdir=tmp_path / "runs", **settings)
    finally:
        gym.registry.pop(name, None)
        sys.modules.pop("regs", None)
    assert run_folder.read_config(run.rundir).env == f"regs:{name}"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"policy_layers": (64, 0)}, r"^policy_layers=\(64, 0\): every layer needs 1 unit"),
        ({"value_layers": [-8]}, r"^value_layers=\(-8,\): every layer needs 1 unit or more$"),
        ({"seeds": 5}, r"^seeds is a list of seeds such as \[0, 1, 2\], got 5$"),
    ],
)
def test_a_bad_value_is_one_line_before_any_folder(settings, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        batchrl.train("pendulum_jax", steps=200, logdir=tmp_path, **settings)
    assert not any(tmp_path.iterdir())


def test_a_config_objects_values_are_checked_as_a_config_files_are(pendulum):
    # The fixture's run, given as its config object, trains alike (its programs cached).
    again = batchrl.train(pendulum.config, logdir=None)
    assert again.config == pendulum.config
    assert again.metrics[-1]["train/return"] == pendulum.metrics[-1]["train/return"]
    # A string where a bool goes was taken as True: the run evaluated sampled actions.
    with pytest.raises(ValueError, match=r"^eval_sample='no': expected bool$"):
        batchrl.train(dataclasses.replace(configs.get("pendulum_jax"), eval_sample="no"))


def test_a_logdir_or_timestamp_no_folder_can_be_named_by_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # logdir="" put the run's folder here.
    with pytest.raises(ValueError, match=r"^logdir '' names no folder: give one, or None to"):
        batchrl.train("pendulum_jax", steps=200, logdir="")
    for stamp in ("a\nb", "x" * 250):  # A newline split lines; a long name was an OSError.
        with pytest.raises(ValueError, match=r"^a run's timestamp is a non-empty name without"):
            run_folder.create(tmp_path, configs.get("pendulum_jax"), "pendulum_jax", stamp)
    assert not any(tmp_path.iterdir())


def test_arguments_no_run_takes_are_one_line_before_any_folder_is_made(pendulum):
    # A run's own folder as logdir held the new run inside it, out of sight of the scripts
    # that read that folder; a callback, logdir or rundir of another type failed in
    # Python's words, the callback after a whole phase had trained.
    rundir, logdir = pendulum.rundir, pendulum.rundir.parent
    with pytest.raises(ValueError) as error:
        batchrl.train("pendulum_jax", steps=200, logdir=rundir)
    assert str(error.value) == (
        f"logdir {str(rundir)!r} is a run's folder (it holds config.yaml): give the folder "
        f"that holds runs, such as {str(logdir.resolve())!r}"
    )
    with pytest.raises(ValueError, match=r"^logdir is a folder's path, or None .*; got 5$"):
        batchrl.train("pendulum_jax", steps=200, logdir=5)
    with pytest.raises(ValueError, match=r"^callback is a function of each phase's .*; got 5$"):
        batchrl.train("pendulum_jax", steps=200, logdir=logdir, callback=5)
    assert run_folder.runs_in(logdir) == [rundir] and not run_folder.runs_in(rundir)
    resumed = r"^rundir is a run folder's path, or a list of a together-run's; got "
    for given, got in [([], r"\[\]"), (5, "5"), (pendulum, "a Run: give its rundir")]:
        with pytest.raises(ValueError, match=resumed + got + "$"):
            batchrl.resume(given)
    with pytest.raises(ValueError, match=r"^rundir is None: a run trained with logdir=None has"):
        batchrl.resume(None)
    with pytest.raises(ValueError, match=r"^rundir is a run folder's or a checkpoint's .*; got 5$"):
        batchrl.load(5)


def test_a_jax_native_env_on_a_host_backend_is_told_the_backend_it_needs():
    # It was told "a Gymnasium env is given as a constructor", which it never was.
    said = r"^backend='processes' needs a Gymnasium env's constructor, got TimeLimit \(a JAX"
    with pytest.raises(ValueError, match=said + r"-native env: set backend='jax'\)$"):
        batchrl.train("pendulum_jax", env=classic.make("Pendulum-v1"), backend="processes")


def test_a_script_that_trains_outside_its_main_guard_trains_nothing_in_its_workers(tmp_path):
    # Each worker runs the script again as it starts: its `train` made a run folder there
    # before its envs refused to start (and a JAX-native preset trained whole, in every
    # worker). The worker now stops at `train` itself, and the parent's refused run
    # leaves no folder either.
    script = tmp_path / "script.py"
    script.write_text('import batchrl\n\nbatchrl.train("pendulum", steps=200, logdir="runs")\n')
    run = [sys.executable, str(script)]
    done = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"RuntimeError: {lifecycle.MAIN_GUARD}" in done.stderr.splitlines()
    assert done.stderr.splitlines()[-1].endswith(lifecycle.MAIN_GUARD)
    assert not list((tmp_path / "runs").glob("*"))


@pytest.mark.slow
def test_a_recurrent_policy_keeps_its_carry_until_reset():
    run = batchrl.train("pendulum_jax", steps=200, recurrent=True, **TINY_PENALTY)
    obs = np.array([1.0, 0.0, 0.0], np.float32)
    first, second = run.policy.act(obs), run.policy.act(obs)
    assert not np.array_equal(first, second)  # The carry moved on.
    run.policy.reset()
    np.testing.assert_array_equal(run.policy.act(obs), first)


def test_worker_envs_run_on_across_phases_that_evaluate_nothing():
    # Phases of 20 batch steps, episodes of 50, evaluation only after the last phase: on
    # the envs evaluation shares, episodes end at steps 50 and 100, in phases 3 and 5.
    # Every phase restarted the envs before, so no episode ever ended and none trained.
    settings = {**TINY_PENALTY, "phase_steps": 80, "eval_every": 10}
    run = batchrl.train("pendulum", steps=400, **settings)
    assert run.config.backend == "processes" and run.evaluations == run.metrics[-1:]
    ended = [row["train/count"] for row in run.metrics]
    assert ended == [0, 0, 4, 0, 4], ended
    assert run.metrics[2]["train/length"] == run.metrics[4]["train/length"] == 50
    assert int(run.state.agent.learner.updates) == 2  # update_every=4 episodes each.


@pytest.mark.slow
def test_a_worker_env_preset_trains_loads_and_acts_on_tuple_observations(tmp_path):
    run = batchrl.train("blackjack", steps=128, logdir=tmp_path, **TINY_CLIPPED)
    assert run.config.backend == "processes" and [row["step"] for row in run.metrics] == [64, 128]
    policy = batchrl.load(run.rundir)
    env = gym.make("Blackjack-v1")
    obs, _ = env.reset(seed=0)  # A tuple of three ints.
    action = policy.act(obs)
    assert isinstance(action, np.int64) and env.action_space.contains(action)
    assert action == run.policy.act(obs)
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("Blackjack-v1")] * 3)
    batch, _ = vector.reset(seed=0)  # A tuple of three [3] arrays.
    actions = policy.act(batch)
    assert actions.shape == (3,) and all(env.action_space.contains(a) for a in actions)
    vector.close()
    # Three observations in a list, read as one, were a batch of three of its first item.
    with pytest.raises(ValueError, match=r"^obs is a list of 3 items of tuples: one observat"):
        policy.act([obs, obs, obs])


@pytest.mark.slow
def test_a_dict_observation_env_given_by_its_class(tmp_path):
    run = batchrl.train("blackjack", env=cue.Cue, steps=128, logdir=tmp_path, **TINY_CLIPPED)
    assert run.config.env == "batchrl.testing.cue:Cue"
    policy = batchrl.load(run.rundir)
    env = cue.Cue()
    obs, _ = env.reset(seed=0)
    action = policy.act(obs)
    assert env.action_space.contains(action) and action == run.policy.act(obs)
    batch = {key: np.stack([value] * 5) for key, value in obs.items()}
    actions = policy.act(batch)
    assert actions.shape == (5,) and np.all(actions == action)
    bad = [
        ({"cue": 1}, "obs lacks key 'left': the space's keys are ['cue', 'left', 'noise']"),
        ({**batch, "left": obs["left"]}, 'obs["left"] has shape (1,), but the leaves before'),
        ({**obs, "cue": 7}, 'obs["cue"] holds 7: this leaf takes whole numbers from 0 to '),
        ({**obs, "cue": 0.5}, 'obs["cue"] holds 0.5: this leaf takes whole numbers from 0 to '),
        ({**obs, "left": [-1]}, 'obs["left"] holds -1: this leaf takes whole numbers from 0 to '),
        (
            [obs, obs],
            "obs is a dict of keys ['cue', 'left', 'noise'], got a list of 2 items; a "
            "batch is one dict of [N, ...] arrays",
        ),
    ]
    for observation, message in bad:
        with pytest.raises(ValueError) as error:
            policy.act(observation)
        assert str(error.value).startswith(message)
    policy.reset(np.ones(5, bool))  # The envs of its last batch.
    with pytest.raises(ValueError, match=r"^reset's mask has shape \(2,\): the policy acts on 5"):
        policy.reset(np.ones(2, bool))


@pytest.mark.slow
def test_a_frame_not_as_the_env_gives_it_is_refused_not_cast(tmp_path):
    # Cast unchecked to the frame's uint8, a frame scaled to [0, 1] acted as a black one.
    run = batchrl.train("blackjack", env=cue.FrameCue, steps=64, logdir=tmp_path, **TINY_CLIPPED)
    policy = batchrl.load(run.rundir)
    obs, _ = cue.FrameCue().reset(seed=0)
    frame = obs["frame"]
    assert policy.act(obs) == policy.act({**obs, "frame": frame.astype(np.int64)})
    bad = [
        (frame / 255.0, 'obs["frame"] is float64'),
        (frame.astype(np.int64) + 1, 'obs["frame"] holds 256'),
    ]
    for scaled, start in bad:
        with pytest.raises(ValueError) as error:
            policy.act({**obs, "frame": scaled})
        assert str(error.value).startswith(f"{start}: this leaf takes uint8 values, 0 to 255")


@pytest.mark.slow
def test_a_box_action_of_rank_two_trains_and_acts_in_its_shape():
    space = gym.spaces.Box(-1.0, 2.0, (2, 2), np.float32)
    echo = functools.partial(mock.ActionEcho, space)  # Refuses an action not in its space.
    run = batchrl.train("pendulum", env=echo, steps=200, local_envs=4, **TINY_PENALTY)
    assert np.isfinite(run.metrics[-1]["train/return"])
    for obs in (np.zeros(4), np.zeros((3, 4))):
        action = run.policy.act(obs)
        assert action.shape == (*obs.shape[:-1], 2, 2)
        assert all(space.contains(a) for a in action.reshape(-1, 2, 2))


@pytest.mark.parametrize(
    ("preset", "settings", "lines"),
    [
        (
            "pendulum_jax",
            {"local_envs": 2, "envs_per_worker": 3},
            [
                "local_envs=2 is not used by backend='jax': its envs are XLA code compiled "
                "with the agent, in no worker",
                "envs_per_worker=3 is not used by backend='jax': its envs are XLA code "
                "compiled with the agent, in no worker",
            ],
        ),
        (
            "cartpole",
            {"ray_actors": 2},
            [
                "ray_actors=2 is not used by backend='processes': only backend='ray' puts "
                "envs in Ray actors"
            ],
        ),
        (
            "cheetah_clipped",
            {"rollout_actors": 2, "ray_actors": 3},
            ["ray_actors=3 is not used with rollout_actors=2: those actors hold the envs"],
        ),
        (
            "cartpole_jax",
            {"rollout_actors": 2, "acting_device": "cpu", "objective": "clipped"},
            [
                "acting_device='cpu' is not used with rollout_actors=2: each actor acts on "
                "its own node's device"
            ],
        ),
        ("cartpole", {"local_envs": 2, "envs_per_worker": 2}, []),  # Both read by workers.
    ],
)
def test_a_setting_its_backend_never_reads_is_a_one_line_warning(preset, settings, lines, caplog):
    config, name, _ = api.configure(preset, **settings)
    caplog.set_level("WARNING", logger="batchrl")
    assert api.start(config, name, None) == (config, None)
    said = [record.getMessage() for record in caplog.records]
    assert [line for line in said if " is not used " in line] == lines


@pytest.mark.parametrize(
    ("preset", "settings", "line"),
    [
        (
            "pendulum",
            {"phase_steps": 7},  # Under num_envs=30: phases of one batch step.
            "evaluation every 10 phase(s) of 1 batch step(s) (phase_steps=7 on num_envs=30) "
            "restarts the envs it shares with training, so no training episode runs past "
            "batch step 10 of max_length=200: raise phase_steps or eval_every",
        ),
        ("pendulum", {"phase_steps": 7, "eval_every": 200}, None),
        # 150 of the policy's steps a phase, each 2 of the env's: episodes of 100 end.
        (
            "pendulum",
            {"action_repeat": 2, "num_envs": 4, "phase_steps": 600, "eval_every": 1},
            None,
        ),
        ("pendulum_jax", {"phase_steps": 7}, None),  # Evaluation has its own envs.
        # Phases of 300 batch steps: Pendulum's episodes end at its own 200, not at 400.
        ("pendulum", {"max_length": 400, "phase_steps": 9000, "eval_every": 1}, None),
        ("pendulum", {}, None),
    ],
)
def test_evaluations_that_cut_every_training_episode_short_are_a_one_line_warning(
    preset, settings, line, caplog
):
    config, name, _ = api.configure(preset, **settings)
    caplog.set_level("WARNING", logger="batchrl")
    assert api.start(config, name, None)[1] is None
    said = [record.getMessage() for record in caplog.records]
    assert [text for text in said if text.startswith("evaluation every")] == [line] * bool(line)


def test_phases_of_no_whole_number_of_rollouts_are_a_one_line_warning(caplog):
    # More envs on a preset of fixed phase_steps: some phases trained no update, unsaid.
    caplog.set_level("WARNING", logger="batchrl")
    for envs in (64, 48):  # The preset's 32 envs, doubled; then half as many again.
        config, name, _ = api.configure("acrobot_gymnax", num_envs=envs)
        api.start(config, name, None)
    assert [record.getMessage() for record in caplog.records] == [
        "phase_steps=40,960 on 48 envs is 854 batch steps a phase, no whole number of rollouts "
        "of steps_per_update=128: some phases train no update and checkpoints hold a "
        "part-filled rollout (phase_steps=36,864 is whole)"
    ]


def test_overlap_on_with_seeds_together_is_a_one_line_warning(caplog):
    # A together-run is one program with overlap off: `on` was dropped without a word.
    configs = [api.configure("pendulum_jax", seed=seed, overlap="on")[0] for seed in (0, 1)]
    caplog.set_level("WARNING", logger="batchrl")
    assert api.start_together(configs, "pendulum_jax", None) == (configs, [None, None])
    assert [record.getMessage() for record in caplog.records] == [
        "overlap='on' is not used when seeds train together: their one program acts and "
        "learns in turn (train each seed on its own to overlap)"
    ]
