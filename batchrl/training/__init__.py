"""The imperative shell: a run's phases, evaluation, logging, checkpoints and resume."""
