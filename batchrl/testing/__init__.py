"""What batchrl's tests stand on: test envs, mocks and probes of compiled programs.

Host envs of fixed episode lengths (`mock`), JAX-native batches of them (`jax_mock`),
small tasks a policy learns only by reading one leaf of its observation (`cue`,
`grid_cue`), the buffers a compiled phase copies per step (`step_copies`), and a
Ctrl-C at a chosen phase (`interrupt`). No product module imports this package
(`batchrl/testing/layering_test.py`).
"""
