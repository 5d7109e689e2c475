"""TrainConfig: the algorithm's config beside the run's, --set, typed YAML."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from batchrl.configs import backends, overrides, presets, train_config
from batchrl.ppo import config as ppo_config
from batchrl.testing import loop_runs
from batchrl.training import environments


def test_the_algorithms_type_picks_the_objective():
    seed, clipped = presets.get("cheetah"), presets.get("cheetah_clipped")
    assert type(seed.algorithm) is ppo_config.PenaltyConfig
    assert seed.algorithm.objective == "kl_penalty"
    assert type(clipped.algorithm) is ppo_config.ClippedConfig
    assert not hasattr(clipped.algorithm, "kl_target")
    assert not hasattr(seed.algorithm, "clip_ratio")


def test_a_budget_rounds_up_to_whole_phases_and_the_schedules_follow_it():
    config = dataclasses.replace(presets.get("cheetah_clipped"), steps=30_000)
    assert (config.batch_steps_per_phase, config.phases) == (1280, 2)  # 20,480 env steps each.
    assert config.shape.steps == 40_960  # The learning rate anneals over what it trains.
    # More envs than the penalty objective's memory holds episodes: phases of one episode's
    # steps, not of none (a ZeroDivisionError of the budget once).
    config = dataclasses.replace(presets.get("pendulum_jax"), num_envs=300, max_length=2)
    config = dataclasses.replace(
        config, algorithm=dataclasses.replace(config.algorithm, update_every=1)
    )
    assert (config.batch_steps_per_phase, config.phases, config.shape.steps) == (2, 1667, 1_000_200)


@pytest.mark.parametrize("num_envs", [16, 30, 64])
def test_a_phase_of_the_penalty_objective_trains_one_update_whatever_the_env_count(num_envs):
    # 16 envs took phases of 375 batch steps, in which they ended 16 of the 30 episodes an
    # update waits for: a short run ended before its first update, its policy untrained.
    config = dataclasses.replace(presets.get("pendulum_jax"), num_envs=num_envs, steps=6000)
    env, _ = environments.build(config)
    steps = (config.batch_steps_per_phase, config.eval_batch_steps)
    _, state = loop_runs.train(config.algorithm, env, *steps, 1, max_length=config.max_length)
    assert int(state.agent.learner.updates) == 1


def test_set_reaches_the_algorithm_by_its_key_or_a_dotted_one():
    config = presets.get("pendulum")
    for assignment in ("kl_target=0.02", "algorithm.kl_target=0.02"):
        changed = overrides.parse_override(config, assignment)
        assert changed.algorithm.kl_target == 0.02
        assert changed.algorithm.discount == config.algorithm.discount == 0.95
    assert overrides.parse_override(config, "eval_every=3").eval_every == 3


@pytest.mark.parametrize("text", ["256,256", "(256, 256)", "[256, 256]"])
def test_set_reads_layer_sizes_as_a_tuple_in_any_bracket_style(text):
    changed = overrides.parse_override(presets.get("reacher_clipped"), f"value_layers={text}")
    assert changed.algorithm.value_layers == (256, 256)


@pytest.mark.parametrize(("text", "layers"), [("", ()), ("()", ()), ("64,", (64,)), ("64", (64,))])
def test_set_reads_no_layers_and_a_trailing_comma(text, layers):
    changed = overrides.parse_override(presets.get("reacher_clipped"), f"policy_layers={text}")
    assert changed.algorithm.policy_layers == layers


def test_set_reads_a_flag_as_the_overlap_setting_spells_it():
    config = presets.get("pendulum")
    assert not overrides.parse_override(config, "normalize_rewards=off").algorithm.normalize_rewards
    assert overrides.parse_override(config, "restart_workers=On").restart_workers


@pytest.mark.parametrize("text", ["[64, 64", "[[64]]", "64]]]", "(64, 64]", "64)"])
def test_set_refuses_brackets_that_do_not_pair(text):
    with pytest.raises(ValueError, match=r"^policy_layers=.*: expected items such as 64,64"):
        overrides.parse_override(presets.get("reacher_clipped"), f"policy_layers={text}")


@pytest.mark.parametrize("text", ["64,,64", ",64", "(64, ,64)"])
def test_set_refuses_an_empty_item_between_commas(text):
    with pytest.raises(ValueError, match=r"^policy_layers=.*: an empty item; expected items"):
        overrides.parse_override(presets.get("reacher_clipped"), f"policy_layers={text}")


@pytest.mark.parametrize("order", [("recurrent=true", "policy_layers="), ("policy_layers=",)])
def test_a_recurrent_policy_without_layers_names_the_setting(order):
    # The GRU's error named neither setting: "RecurrentGaussianPolicy needs at least one
    # layer for the GRU."
    config = presets.get("pendulum_jax")
    if len(order) == 1:
        config = overrides.parse_override(config, "recurrent=true")
    with pytest.raises(ValueError) as error:
        overrides.parse_overrides(config, list(order))
    assert str(error.value) == (
        "recurrent=True needs at least one policy layer (the last is the GRU's size), got "
        "policy_layers=()"
    )


def test_set_objective_changes_the_algorithm_keeping_what_both_share():
    config = overrides.parse_override(presets.get("pendulum"), "objective=clipped")
    assert type(config.algorithm) is ppo_config.ClippedConfig
    assert config.algorithm.discount == 0.95 and config.num_envs == 30
    assert config.algorithm.clip_ratio == 0.2  # The clipped objective's own default.
    assert config.env == "Pendulum-v1"
    # Quoted, as every other string setting may be: it was "unknown objective '\"clipped\"'".
    quoted = overrides.parse_override(presets.get("pendulum"), 'objective="clipped"')
    assert quoted == config


def test_switching_the_objective_says_which_of_its_own_settings_it_drops(caplog):
    # `cheetah_clipped` as kl_penalty lost its annealed learning rate without a word.
    caplog.set_level("WARNING", logger="batchrl")
    config = overrides.parse_override(presets.get("hopper_clipped"), "objective=kl_penalty")
    assert type(config.algorithm) is ppo_config.PenaltyConfig
    overrides.parse_override(presets.get("pendulum"), "objective=clipped")  # Defaults only.
    assert [record.getMessage() for record in caplog.records] == [
        "objective=kl_penalty drops settings only objective 'clipped' has: final_discount=0.995"
    ]


def test_a_recurrent_policy_is_not_dropped_by_setting_the_clipped_objective_after_it():
    recurrent = overrides.parse_override(presets.get("pendulum"), "recurrent=true")
    with pytest.raises(ValueError, match=r"^recurrent=True is a setting of objective 'kl_pen"):
        overrides.parse_override(recurrent, "objective=clipped")
    with pytest.raises(ValueError, match=r"^recurrent.* is a setting of objective 'kl_penalty'"):
        train_config.replace(presets.get("pendulum"), recurrent=True, objective="clipped")
    kept = overrides.parse_override(recurrent, "objective=kl_penalty")
    assert kept.algorithm.recurrent


SETTINGS = ["num_envs=4", "steps_per_update=25", "num_minibatches=2"]  # 4 x 25 in 2 halves.


@pytest.mark.parametrize("order", [SETTINGS, SETTINGS[::-1]], ids=["as-given", "reversed"])
def test_settings_that_constrain_each_other_hold_in_any_order(order):
    # One by one, num_envs=4 x steps_per_update=25 met the default 32 minibatches first.
    pendulum = presets.get("pendulum")
    config = overrides.parse_overrides(pendulum, ["objective=clipped", *order])
    settings = dict(setting.split("=") for setting in order)
    typed = {name: int(value) for name, value in settings.items()}
    assert config == train_config.replace(pendulum, objective="clipped", **typed)
    assert (config.num_envs, config.algorithm.num_minibatches) == (4, 2)
    assert config.algorithm.steps_per_update == 25
    three = [setting.replace("num_minibatches=2", "num_minibatches=3") for setting in order]
    with pytest.raises(ValueError, match=r"^num_minibatches = 3 must divide num_envs \* "):
        overrides.parse_overrides(pendulum, ["objective=clipped", *three])


def test_clipped_minibatches_of_one_row_are_refused_where_advantages_are_standardised():
    # One advantage standardised is 0: with minibatches of one row the policy never moved.
    pendulum = presets.get("pendulum")
    one_row = ["objective=clipped", "num_envs=2", "steps_per_update=4", "num_minibatches=8"]
    with pytest.raises(ValueError, match="= 1 row standardise each advantage to 0"):
        overrides.parse_overrides(pendulum, one_row)
    raw = overrides.parse_overrides(pendulum, [*one_row, "normalize_advantages=false"])
    assert raw.algorithm.num_minibatches == 8


def test_set_reads_integers_exactly_and_in_scientific_notation():
    config = presets.get("pendulum")
    assert overrides.parse_override(config, "steps=2_147_483_647").steps == 2**31 - 1
    assert overrides.parse_override(config, "seed=123456789").seed == 123456789
    with pytest.raises(ValueError, match=r"eval_episodes .*, got 9,007,199,254,740,993$"):
        overrides.parse_override(config, "eval_episodes=9_007_199_254_740_993")  # 2**53 + 1
    assert overrides.parse_override(config, "steps=1e6").steps == 1_000_000
    assert overrides.parse_override(config, "steps=2.5e5").steps == 250_000


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("clip_ratio=0.1", "clip_ratio is a setting of objective 'clipped', but this config's"),
        ("kl_targt=0.1", "unknown config key 'kl_targt'; did you mean 'kl_target'"),
        ("objective=a2c", "unknown objective 'a2c': use one of"),
        ("num_envs=many", "num_envs='many': expected an integer"),
        ("policy_layers=None", "policy_layers='None': expected items such as 64,64; none is "),
        ("policy_layers=64x64", "'64x64': expected integers between commas, such as 64,64; "),
        ("value_layers=64,6.5", "value_layers='64,6.5': expected integers .*; '6.5' is not one$"),
        ("normalize_rewards=F", r"'F': expected true or false \(yes or no, 1 or 0, on or off\)"),
        ("image_channels=middle", "unknown image_channels 'middle': use one of"),
        ("seed=2147483648", r"seed must be in \[0, 2\*\*31\), got 2147483648"),
        ("seed=-1", r"seed must be in \[0, 2\*\*31\), got -1"),
        ("steps=3e9", r"steps must be below 2\*\*31 \(2,147,483,648\), got 3,000,000,000"),
        ("max_length=3e9", r"max_length must be below 2\*\*31 \(2,147,483,648\), got 3,000"),
        ("phase_steps=2147483648", r"phase_steps must be below 2\*\*31 \(2,147,483,648\)"),
        ("update_epochs=3e9", r"^update_epochs must be below 2\*\*31 \(2,147,483,648\), got 3,0"),
        ("eval_episodes=3e9", r"^eval_episodes must be below 2\*\*31 \(2,147,483,648\), got 3,0"),
        ("env_kwargs={g: 2.0, g: 3}", r"^env_kwargs='\{g: 2.0, g: 3\}': 'g' given twice$"),
        ("entropy_coef=nan", r"^entropy_coef must be a number, got nan$"),
        ("kl_cutoff_coef=NaN", r"^kl_cutoff_coef must be a number, got nan$"),
        ("learning_rate=inf", r"^learning_rate must be a positive, finite number, got inf$"),
        ("init_std=inf", r"^init_std must be a positive, finite number, got inf$"),
        ("kl_init_penalty=inf", r"^kl_init_penalty must be a positive, finite number, got inf$"),
        ("entropy_coef=-inf", r"^entropy_coef must be a finite number, got -inf$"),
        ("init_output_factor=inf", r"^init_output_factor must be a finite number, got inf$"),
        ("kl_cutoff_coef=inf", r"^kl_cutoff_coef must be a finite number, got inf$"),
        ("ray_actors=31", r"^ray_actors must be at most num_envs=30, got 31$"),
        ("final_discount=0.5", r"^final_discount is a setting of objective 'clipped'"),
        ("max_grad_norm=abc", r"^max_grad_norm='abc': expected a number, or none$"),
    ],
)
def test_bad_settings_are_one_line_errors(assignment, message):
    with pytest.raises(ValueError, match=message):
        overrides.parse_override(presets.get("pendulum"), assignment)


def test_a_final_discount_below_the_discount_is_refused_in_one_line():
    config = presets.get("cheetah_clipped")  # discount 0.99
    with pytest.raises(ValueError, match=r"^final_discount=0.5 is below discount=0.99: the "):
        overrides.parse_override(config, "final_discount=0.5")
    assert overrides.parse_overrides(config, ["final_discount=0.999"]).algorithm.final_discount


@pytest.mark.parametrize(
    ("assignment", "ours"),
    [
        ("clip_range=0.1", "clip_ratio"),  # Was "did you mean 'clip_value'?": the value loss's.
        ("clip_coef=0.1", "clip_ratio"),  # Was 'value_coef'.
        ("clip_range_vf=0.2", "clip_value"),  # Was 'clip_ratio'.
        ("n_steps=2048", r"steps_per_update \(steps per env"),  # Was 'steps', the budget.
        ("num_steps=128", r"steps_per_update \(steps per env"),
        ("batch_size=64", r"num_minibatches, a count \(num_envs x steps_per_update / "),
        ("gamma=0.9", "discount"),  # No hint at all before.
        ("total_timesteps=100", "steps"),
        ("clip_eps=0.2", "clip_ratio"),  # PureJaxRL's: "did you mean 'clip_value'?"
        ("LR=3e-4", "learning_rate"),  # PureJaxRL's, in its capitals.
    ],
)
def test_stable_baselines3_and_cleanrl_names_are_given_batchrls(assignment, ours):
    # batch_size said "a setting of objective 'kl_penalty' (set objective=kl_penalty
    # first)", which made a clipped preset the penalty objective.
    name = assignment.partition("=")[0]
    said = rf"^unknown config key '{name}', another library's name: batchrl's is "
    with pytest.raises(ValueError, match=said + ours):
        overrides.parse_override(presets.get("cheetah_clipped"), assignment)


@pytest.mark.parametrize("name", ["pendulum", "cheetah_clipped", "acrobot_gymnax", "ant_clipped"])
def test_yaml_round_trips_typed(name):
    config = presets.get(name)
    text = yaml.safe_dump(train_config.to_dict(config), sort_keys=False)
    assert "algorithm:" in text and "!!python" not in text
    assert train_config.from_dict(yaml.safe_load(text)) == config


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"update_epochs": "8"}, "update_epochs='8': expected int"),
        ({"policy_layers": [64, "x"]}, "policy_layers='x': expected int"),
        ({"squash_mean": 1}, "squash_mean=1: expected bool"),
        # YAML has no tuples, and its None is null: "None" there is a string.
        ({"policy_layers": 64}, r"^policy_layers=64: expected a list such as \[64, 64\]$"),
        ({"max_grad_norm": "None"}, r"^max_grad_norm='None': expected float, or null$"),
        ({"kl_target": 0.1}, "kl_target is a setting of objective 'kl_penalty'"),
    ],
)
def test_badly_typed_yaml_is_a_one_line_error(change, message):
    data = train_config.to_dict(presets.get("cheetah_clipped"))
    data["algorithm"].update(change)
    with pytest.raises(ValueError, match=message):
        train_config.from_dict(data)
    data = train_config.to_dict(presets.get("cheetah_clipped"))
    data["num_envs"] = "8"
    with pytest.raises(ValueError, match="num_envs='8': expected int"):
        train_config.from_dict(data)


def test_the_last_value_given_wins_and_a_quoted_text_is_its_text():
    # Each objective was applied in turn: switched and switched back, a preset lost the
    # settings only its own objective has (reacher's update_every=60 became 30).
    reacher = presets.get("reacher")
    back = ["objective=clipped", "objective=kl_penalty"]
    assert overrides.parse_overrides(reacher, back) == reacher
    # A list of settings, then those that override it: as flags, the last value is taken.
    later = overrides.parse_overrides(reacher, ["kl_target=0.1", "algorithm.kl_target=0.2"])
    assert later.algorithm.kl_target == 0.2
    # `--list-keys` shows texts quoted; copied into --set, the quotes were kept.
    for text in ("activation='tanh'", 'activation="tanh"'):
        assert overrides.parse_override(reacher, text).algorithm.activation == "tanh"


@pytest.mark.parametrize(("written", "quoted"), [("on", "'on'"), ("no", "'off'")])
def test_an_unquoted_yaml_word_read_as_a_bool_says_to_quote_it(written, quoted):
    # YAML 1.1 reads `overlap: on` as True: "expected str" alone did not say why.
    text = yaml.safe_dump(train_config.to_dict(presets.get("pendulum_jax")), sort_keys=False)
    text = text.replace("overlap: auto", f"overlap: {written}")
    with pytest.raises(ValueError) as refused:
        train_config.from_dict(yaml.safe_load(text))
    value = written == "on"
    assert str(refused.value) == (
        f"overlap={value}: expected str; in a YAML file quote it: {quoted}"
    )


def test_numpy_and_jax_integers_and_whole_floats_are_ints_and_other_values_are_refused():
    config = presets.get("pendulum_jax")
    for value in (np.int64(3), np.uint8(3), jnp.int32(3), np.arange(5)[3], 3.0, np.float64(3)):
        seed = train_config.set_field(config, "seed", value, train_config.typed).seed
        assert seed == 3 and type(seed) is int  # YAML writes it as a plain int.
    # `steps=1e6`, as `--set steps=1e6` and a config file's `steps: 1e6` read it.
    assert train_config.set_field(config, "steps", 1e6, train_config.typed).steps == 10**6
    for value in (3.5, np.float64(3.5), float("nan"), float("inf"), np.True_, True, "3"):
        with pytest.raises(ValueError, match=r"^num_envs=\S+: expected int$"):
            train_config.set_field(config, "num_envs", value, train_config.typed)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: train_config.TrainConfig(num_envs="8"), "num_envs='8': expected int"),
        (lambda: train_config.TrainConfig(overlap=1), "overlap=1: expected str"),
        (lambda: train_config.TrainConfig(env_kwargs=[1]), r"env_kwargs=\[1\]: expected a mapping"),
        (lambda: ppo_config.ClippedConfig(learning_rate="3e-4"), "learning_rate='3e-4': expected"),
        (lambda: ppo_config.PenaltyConfig(policy_layers=(64, "x")), "policy_layers='x': expected"),
    ],
)
def test_a_config_made_in_python_names_a_value_of_the_wrong_type(make, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        make()
    # numpy's numbers are read as Python's, as in a config file: uint8 envs overflowed.
    config = train_config.TrainConfig(seed=np.int64(3), num_envs=np.uint8(2))
    assert type(config.num_envs) is int and config.shape.steps > 255


def test_numpy_and_jax_numbers_are_floats_and_bools_strings_and_arrays_are_refused():
    config = presets.get("pendulum_jax")
    for value in (np.float32(0.25), jnp.float32(0.25), np.float64(0.25), np.int64(2), 2):
        rate = train_config.set_field(config, "learning_rate", value, train_config.typed)
        assert type(rate.algorithm.learning_rate) is float
        assert rate.algorithm.learning_rate == float(value)
    for value in (np.True_, True, "0.25", np.zeros(2), jnp.zeros(1)):
        with pytest.raises(ValueError, match=r"^learning_rate=.+: expected float$"):
            train_config.set_field(config, "learning_rate", value, train_config.typed)


def test_a_flat_config_is_refused_in_one_line_naming_the_misplaced_key():
    data = train_config.flat(presets.get("acrobot_gymnax"))
    with pytest.raises(ValueError) as error:
        train_config.from_dict(data)
    assert str(error.value) == "objective is a setting of the algorithm: put it under 'algorithm:'"
    del data["objective"]
    with pytest.raises(ValueError, match=r"^discount is a setting of the algorithm: put it under"):
        train_config.from_dict(data)


def test_run_folders_that_kept_seed_and_budget_under_the_algorithm_read_back_the_same():
    # Before the run owned seed, steps, num_envs and max_length, they sat under
    # `algorithm:` (num_envs as num_agents), and the clipped objective carried
    # `recurrent: false`.
    for name in ("cheetah_clipped", "hopper"):
        config = overrides.parse_override(presets.get(name), "seed=3")
        data = train_config.to_dict(config)
        data["num_agents"] = data.pop("num_envs")
        for key in ("seed", "steps", "num_agents", "max_length"):
            data["algorithm"][key] = data.pop(key)
        data["algorithm"]["recurrent"] = False
        assert train_config.from_dict(data) == config
    data["seed"] = 4
    with pytest.raises(ValueError, match=r"^seed is given twice, as 4 and 3$"):
        train_config.from_dict(data)


def test_run_folders_that_named_num_envs_num_agents_read_back_the_same():
    config = overrides.parse_override(presets.get("cheetah_clipped"), "num_envs=16")
    data = train_config.to_dict(config)
    data = {("num_agents" if key == "num_envs" else key): value for key, value in data.items()}
    assert train_config.from_dict(data) == config


def test_num_agents_is_no_setting_and_the_error_names_num_envs():
    with pytest.raises(ValueError) as error:
        overrides.parse_override(presets.get("pendulum"), "num_agents=8")
    assert str(error.value) == (
        "unknown config key 'num_agents'; did you mean 'num_envs'? (python -m "
        "batchrl.scripts.train --list-keys lists them)"
    )


def test_flat_keys_of_the_run_and_the_algorithm_compare_configs():
    config = presets.get("hopper")
    changed = overrides.parse_override(config, "update_every=10")
    flat, other = train_config.flat(config), train_config.flat(changed)
    assert {k for k in flat if flat[k] != other[k]} == {"update_every"}


def test_env_kwargs_are_a_mapping_kept_in_the_run_folder():
    config = overrides.parse_override(presets.get("pendulum"), "env_kwargs={g: 2.0}")
    assert config.env_kwargs == {"g": 2.0}
    text = yaml.safe_dump(train_config.to_dict(config), sort_keys=False)
    assert train_config.from_dict(yaml.safe_load(text)) == config
    for text in ("3", "[g, 2]", "{g: 2"):
        with pytest.raises(ValueError, match="expected a mapping such as"):
            overrides.parse_override(config, f"env_kwargs={text}")
    # A JAX-native env's settings too (`classic.make`'s, gymnax's parameters).
    jax_native = overrides.parse_override(presets.get("pendulum_jax"), "env_kwargs={g: 2.0}")
    assert jax_native.env_kwargs == {"g": 2.0}


@pytest.mark.parametrize("text", ['{"g": 1e1, "dt": 5E-2}', "{g: 1e1, dt: 5e-2}"])
def test_env_kwargs_read_numbers_in_exponent_form_as_json_writes_them(text):
    config = overrides.parse_override(presets.get("pendulum"), f"env_kwargs={text}")
    assert config.env_kwargs == {"g": 10.0, "dt": 0.05}  # Not the strings "1e1", "5E-2".
    assert overrides.parse_override(config, "env_kwargs={id: e5}").env_kwargs == {"id": "e5"}


def test_eval_sample_is_kept_in_the_run_folder_and_older_folders_read_as_the_mean_action():
    config = overrides.parse_override(presets.get("pendulum_jax"), "eval_sample=true")
    assert config.eval_sample is True and presets.get("pendulum_jax").eval_sample is False
    text = yaml.safe_dump(train_config.to_dict(config), sort_keys=False)
    assert "\neval_sample: true\n" in text
    assert train_config.from_dict(yaml.safe_load(text)) == config
    # A folder written before the setting existed evaluated the mean action.
    data = yaml.safe_load(text)
    del data["eval_sample"]
    assert train_config.from_dict(data).eval_sample is False
    with pytest.raises(ValueError, match=r"^eval_sample=1: expected bool$"):
        train_config.from_dict({**yaml.safe_load(text), "eval_sample": 1})


def test_restart_workers_is_a_setting_of_worker_envs():
    config = overrides.parse_override(presets.get("pendulum"), "restart_workers=true")
    assert config.restart_workers is True
    with pytest.raises(
        ValueError, match=r"restart_workers=True needs backend='processes' or 'ray', got 'jax'"
    ):
        overrides.parse_override(presets.get("pendulum_jax"), "restart_workers=true")


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_worker_timeout_is_a_positive_finite_number_of_seconds(value):
    config = overrides.parse_override(presets.get("pendulum"), "worker_timeout=2.5")
    assert config.worker_timeout == 2.5
    assert train_config.from_dict(train_config.to_dict(config)) == config
    with pytest.raises(
        ValueError,
        match=rf"^worker_timeout must be a positive, finite number of seconds, got {float(value)}$",
    ):
        overrides.parse_override(presets.get("pendulum"), f"worker_timeout={value}")


def test_worker_timeout_on_envs_in_no_worker_is_said_unused():
    config = overrides.parse_override(presets.get("pendulum_jax"), "worker_timeout=5")
    assert any(
        line.startswith("worker_timeout=5.0 is not used") for line in backends.unused(config)
    )
    assert not backends.unused(
        overrides.parse_override(presets.get("pendulum"), "worker_timeout=5")
    )


def test_the_mujoco_backend_is_one_override_and_refuses_what_it_cannot_do():
    config = overrides.parse_override(presets.get("cheetah_clipped"), "backend=mujoco")
    assert config.backend == "mujoco" and config.env == "HalfCheetah-v5"
    with pytest.raises(ValueError, match=r"backend='mujoco' needs restart_workers=False"):
        overrides.parse_override(config, "restart_workers=true")
    with pytest.raises(ValueError, match=r"backend='mujoco' needs action_repeat=1, got 2"):
        overrides.parse_override(config, "action_repeat=2")
    # 0 is no count on any backend: it was refused as needing the processes or Ray.
    with pytest.raises(ValueError, match=r"^action_repeat must be at least 1, got 0$"):
        overrides.parse_override(config, "action_repeat=0")
    assert overrides.parse_override(config, "env_threads=1").env_threads == 1
    on_ray = overrides.parse_override(presets.get("cheetah_clipped"), "backend=ray")
    with pytest.raises(
        ValueError, match=r"^env_threads=2 needs backend='mujoco' or 'ale', got 'ray'$"
    ):
        overrides.parse_override(on_ray, "env_threads=2")
    with pytest.raises(ValueError, match=r"^unknown backend 'workers': use one of \('processes'"):
        overrides.parse_override(config, "backend=workers")


def test_the_ale_backend_takes_ale_ids_and_refuses_what_it_cannot_do():
    config = overrides.parse_override(presets.get("cartpole"), "env=ALE/Seaquest-v5")
    config = overrides.parse_override(config, "backend=ale")
    assert config.backend == "ale" and config.env == "ALE/Seaquest-v5"
    assert overrides.parse_override(config, "env_threads=2").env_threads == 2
    with pytest.raises(ValueError, match=r"^backend='ale' needs local_envs=0, got 2$"):
        overrides.parse_override(config, "local_envs=2")
    with pytest.raises(ValueError, match=r"^backend='ale' needs action_repeat=1, got 4$"):
        overrides.parse_override(config, "action_repeat=4")
    with pytest.raises(
        ValueError, match=r"^backend='ale' needs an ALE/<Game>-v5 id, got env='CartPole-v1'$"
    ):
        overrides.parse_override(presets.get("cartpole_jax"), "backend=ale")
    with pytest.raises(
        ValueError, match=r"^backend='ale' steps its games .* learner_devices must be 1, got 2$"
    ):
        overrides.parse_override(config, "learner_devices=2")


@pytest.mark.parametrize(
    ("preset", "setting", "backend"),
    [
        ("cheetah_clipped", "env_backend=mujoco", "mujoco"),
        ("cheetah_clipped", "env_backend=ray", "ray"),
        ("cheetah_clipped", "env_kind=jax", "jax"),
        ("pendulum_jax", "env_kind=workers", "processes"),
        ("pendulum_jax", "env_backend=processes", "jax"),  # env_backend left these alone.
        ("breakout", "env_kind=workers", "ale"),
    ],
)
def test_the_old_env_kind_and_env_backend_set_backend_with_a_one_line_warning(
    preset, setting, backend, caplog
):
    config = overrides.parse_override(presets.get(preset), setting)
    assert config.backend == backend
    name, value = setting.split("=")
    (record,) = caplog.records
    assert record.getMessage() == f"{name}={value} is deprecated: set backend={backend} instead"
    with pytest.raises(ValueError, match=r"^unknown env_kind 'cuda': use one of \('jax'"):
        overrides.parse_override(presets.get(preset), "env_kind=cuda")


@pytest.mark.parametrize(
    ("kind", "where", "backend"),
    [
        ("workers", "processes", "processes"),
        ("workers", "mujoco", "mujoco"),
        ("workers", "ale", "ale"),
        ("jax", "processes", "jax"),
        ("gymnax", "processes", "gymnax"),
    ],
)
def test_a_run_folder_written_with_env_kind_and_env_backend_reads_as_its_backend(
    kind, where, backend, caplog
):
    data = train_config.to_dict(presets.get("breakout" if where == "ale" else "cartpole"))
    del data["backend"]
    data.update(env_kind=kind, env_backend=where)
    assert train_config.from_dict(data).backend == backend
    assert not caplog.records  # The user set nothing: resuming an old folder is quiet.


@pytest.mark.parametrize("name", [name for name in presets.PRESETS if name.endswith("_clipped")])
def test_clipped_presets_score_the_final_policy_on_exactly_32_episodes(name):
    # Evaluation keeps each env's first episode in whole rounds of the envs
    # (`loop.evaluate`): 32 is a whole number of rounds, so exactly 32 episodes.
    config = presets.get(name)
    assert config.final_episodes == 32 and 32 % config.num_envs == 0


@pytest.mark.parametrize("name", [name for name in presets.PRESETS if name.endswith("_clipped")])
def test_clipped_presets_average_the_last_three_phases_into_the_final_policy(name):
    config = presets.get(name)
    assert config.average_last == 3 and config.keep_checkpoints >= 3


def test_env_kwargs_that_leave_out_the_configs_own_are_said_to_drop_them(caplog):
    # An Atari preset's ale-py options went without a word: sticky actions came back.
    breakout = presets.get("breakout")
    changed = overrides.parse_override(breakout, "env_kwargs={frameskip: 2}")
    assert changed.env_kwargs == {"frameskip": 2}
    (record,) = caplog.records
    assert record.getMessage() == (
        "env_kwargs replaces the config's whole mapping, dropping {repeat_action_probability: "
        "0.0, life_loss_info: True, reward_clipping: True}: give them too to keep them"
    )
    caplog.clear()
    kept = {**breakout.env_kwargs, "frameskip": 2}
    overrides.parse_override(breakout, f"env_kwargs={kept}")
    overrides.parse_override(presets.get("pendulum"), "env_kwargs={g: 5.0}")
    assert not caplog.records


def test_learner_cores_counts_cores():
    config = presets.get("cartpole")
    assert overrides.parse_override(config, "learner_cores=1").learner_cores == 1
    with pytest.raises(ValueError, match=r"^learner_cores must be 0 or more, got -1$"):
        overrides.parse_override(config, "learner_cores=-1")
