"""One training run in its folder: build or restore, alternate phases, log, checkpoint, stop.

The whole training state (agent, train and eval simulation states, counters) is one
pytree, checkpointed atomically after every `checkpoint_every` phases and on Ctrl-C or
SIGTERM. Resuming loads the newest good checkpoint into a freshly built state.
"""

from __future__ import annotations

import logging as std_logging
import pathlib
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from batchrl.configs import TrainConfig
from batchrl.training import checkpoint, environments, loop
from batchrl.training import logging as logs

CHECKPOINTS = "checkpoints"
logger = std_logging.getLogger("batchrl.training")


@flax.struct.dataclass
class Snapshot:
    """Everything a resumed run needs, as one pytree."""

    agent: Any
    train: Any
    eval: Any
    env_steps: jax.Array  # [] int32
    phases: jax.Array  # [] int32 train phases done


def snapshot(phase: loop.Phase, phases_done: int) -> Snapshot:
    """The run's state after `phases_done` phases, ready to checkpoint."""
    return Snapshot(
        agent=phase.agent_state,
        train=phase.train_state,
        eval=phase.eval_state,
        env_steps=jnp.asarray(phase.env_steps, jnp.int32),
        phases=jnp.asarray(phases_done, jnp.int32),
    )


def restore(phase: loop.Phase, saved: Snapshot) -> int:
    """Puts a checkpoint's state into `phase`; returns the number of phases done."""
    phase.agent_state, phase.train_state, phase.eval_state = saved.agent, saved.train, saved.eval
    phase.env_steps = int(saved.env_steps)
    return int(saved.phases)


def train(rundir: pathlib.Path, config: TrainConfig) -> int:
    """Trains until the budget is spent or the user interrupts; returns the exit status."""
    env, batch_env = environments.build(config)
    try:
        return _train(rundir, config, env)
    finally:
        if batch_env is not None:
            batch_env.close()


def _train(rundir: pathlib.Path, config: TrainConfig, env: Any) -> int:
    steps_per_phase = config.batch_steps_per_phase
    phase = loop.build(config, env, steps_per_phase, config.eval_batch_steps)
    directory = rundir / CHECKPOINTS
    done = 0
    restored = checkpoint.load_latest(directory, snapshot(phase, 0))
    if restored is not None:
        done = restore(phase, restored[1])
        logger.warning("resumed %s at env step %d (phase %d)", rundir.name, phase.env_steps, done)
    total_phases = config.phases
    total_steps = total_phases * steps_per_phase * env.num_envs
    progress = logs.Progress(total_steps=total_steps, initial_steps=phase.env_steps)
    print(f"run folder {rundir}; compiling the first phase", flush=True)
    writer = logs.Writer(rundir)
    try:
        phases = loop.run(
            phase,
            env.num_envs,
            steps_per_phase,
            total_phases - done,
            eval_every=config.eval_every,
            final_episodes=config.final_episodes,
            done=done,
            total=total_phases,
        )
        for metrics in phases:
            done += 1
            writer.write(phase.env_steps, metrics)
            progress.update(phase.env_steps, metrics)
            if done % config.checkpoint_every == 0 or done == total_phases:
                checkpoint.save(directory, done, snapshot(phase, done), config.keep_checkpoints)
            progress.close()
            print(logs.summary_line(done, phase.env_steps, metrics), flush=True)
    except KeyboardInterrupt:
        progress.close()
        checkpoint.save(directory, done, snapshot(phase, done), config.keep_checkpoints)
        print(f"interrupted: saved a checkpoint at env step {phase.env_steps}", flush=True)
        return 130
    finally:
        writer.close()
    return 0
