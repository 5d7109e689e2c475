"""JAX-native envs, stepped inside compiled programs.

The pure reset/step protocol and batching by vmap, Pendulum and CartPole (`classic/`),
gymnax's envs, and a counting batch for tests.
"""
