"""The imperative shell: training phases, evaluation, and (later) logging and checkpoints."""
