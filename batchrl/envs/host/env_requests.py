"""Requests to each env of a batch (`call`, `get_attr`, `render`): every host asked at once.

A worker process or a Ray actor answers one request at a time, so its envs are asked in
rounds, one env a host a round, and every host is asked before any answer is awaited:
the hosts' envs compute at once, as `AsyncVectorEnv`'s workers do. Envs in this process
answer while the hosts work. An error is raised once every host asked has answered, so
that none is left with a request in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchrl.envs.host import remote


class EnvRequests:
    """`method(index, *args)` of each (group, index) of `located`; the first round asked."""

    def __init__(self, located: Sequence[tuple[Any, int]], method: str, args: tuple) -> None:
        self._located, self._method, self._args = located, method, args
        self._results: list[Any] = [None] * len(located)
        self._rounds: dict[int, list[int]] = {}  # Per host, its envs' places in `located`.
        self._here: list[int] = []  # Places of envs in this process.
        for k, (group, _) in enumerate(located):
            if isinstance(group, remote.RemoteGroup):
                self._rounds.setdefault(id(group), []).append(k)
            else:
                self._here.append(k)
        self._asked: list[int] = []
        self._error: Exception | None = None
        self._ask()

    def results(self) -> tuple[Any, ...]:
        """Every env's result, in order, once the rounds left are asked and answered."""
        while True:
            for k in self._here if self._error is None else ():
                group, index = self._located[k]
                try:
                    self._results[k] = getattr(group, self._method)(index, *self._args)
                except Exception as raised:
                    self._error = raised
                    break
            self._here = []
            for k in self._asked:
                try:
                    self._results[k] = self._located[k][0].answer()
                except Exception as raised:
                    self._error = self._error or raised
            self._asked = []
            if self._error is not None:
                raise self._error
            if not self._rounds:
                return tuple(self._results)
            self._ask()

    def _ask(self) -> None:
        """Asks each host for its next env's answer; stops at a host that cannot be asked."""
        for places in self._rounds.values():
            group, index = self._located[places[0]]
            try:
                group.ask(self._method, index, *self._args)
            except Exception as raised:  # The hosts asked so far still answer first.
                self._error = raised
                self._rounds = {}
                return
            self._asked.append(places.pop(0))
        self._rounds = {key: places for key, places in self._rounds.items() if places}
