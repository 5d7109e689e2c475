"""Stable-Baselines3's, CleanRL's and PureJaxRL's names for batchrl's settings, for hints.

A hint by spelling alone sent users to another setting: `clip_range` (the ratio's clip)
to `clip_value` (the value loss's), `n_steps` (steps per env per update) to `steps` (the
whole budget), `batch_size` (a minibatch's rows) to the penalty objective's. Each name
here says batchrl's setting of the same meaning, and how its units differ where they do.
Looked up in lower case: PureJaxRL's config spells them in capitals (`CLIP_EPS`, `LR`).
"""

from __future__ import annotations

PEER_NAMES = {
    "gamma": "discount",
    "total_timesteps": "steps",
    "n_envs": "num_envs",
    "env_id": "env",
    "n_steps": "steps_per_update (steps per env between updates, as n_steps)",
    "num_steps": "steps_per_update (steps per env between updates, as num_steps)",
    "n_epochs": "update_epochs",
    "batch_size": (
        "num_minibatches, a count (num_envs x steps_per_update / batch_size); the penalty "
        "objective's batch_size is episodes a minibatch"
    ),
    "minibatch_size": "num_minibatches, a count (num_envs x steps_per_update / minibatch_size)",
    "clip_range": "clip_ratio",
    "clip_coef": "clip_ratio",
    "clip_eps": "clip_ratio",
    "lr": "learning_rate",
    "env_name": "env",
    "clip_range_vf": "clip_value",
    "clip_vloss": "clip_value (a number, the clip; unset, none)",
    "ent_coef": "entropy_coef",
    "vf_coef": "value_coef",
    "norm_adv": "normalize_advantages",
    "normalize_advantage": "normalize_advantages",
    "anneal_lr": "anneal_learning_rate",
    "ortho_init": "orthogonal_init",
    "activation_fn": "activation",
    "log_std_init": "init_std (the std itself, not its log)",
    "net_arch": "policy_layers and value_layers",
    "normalize": "normalize_observations and normalize_rewards",
}


def hint(name: str) -> str | None:
    """An unknown key's hint where `name` is Stable-Baselines3's, CleanRL's or PureJaxRL's."""
    said = PEER_NAMES.get(name.lower())
    return None if said is None else f", another library's name: batchrl's is {said}"


def setting(name: str) -> str | None:
    """The key of batchrl for another library's `name` (`PEER_NAMES`), its values as given.

    None where `name` is not theirs, or where its value means otherwise (`batch_size`, a
    minibatch's rows, is a count of minibatches here).
    """
    said = PEER_NAMES.get(name.lower())
    return said if said is not None and said.isidentifier() else None
