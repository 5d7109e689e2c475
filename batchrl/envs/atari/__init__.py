"""Atari games through ale-py's AtariVectorEnv, the group `BatchEnv.atari` holds.

Needs the `atari` extra (`pip install -e '.[atari]'`).
"""
