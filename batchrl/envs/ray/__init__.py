"""Env workers on a Ray cluster (`BatchEnv.ray`, the `ray` extra).

Built on the host side's `RemoteGroup`: an actor per node holds a node-local
`BatchEnv.external` of its share. This package imports the host side, never the other
way round, except `BatchEnv.ray`'s one deferred import of `cluster.build`, so batchrl
runs without Ray installed.
"""
