"""Requests to each env of a batch (`call`, `get_attr`, `render`): every host asked at once.

`EnvCalls` is the batch's side: Gymnasium's `call`, `get_attr`, `set_attr` and `render`,
and `is_wrapped`; `EnvRequests` asks the envs.

A worker process or a Ray actor answers one request at a time, so its envs are asked in
rounds, one env a host a round, and every host is asked before any answer is awaited:
the hosts' envs compute at once, as `AsyncVectorEnv`'s workers do. Envs in this process
answer while the hosts work. An error is raised once every host asked has answered, so
that none is left with a request in flight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchrl.envs.host import arguments, fan_out, remote


class EnvCalls:
    """What a batch asks of its envs one by one, through each env's wrappers."""

    num_envs: int

    def call(
        self, name: str, /, *args: Any, indices: Sequence[int] | None = None, **kwargs: Any
    ) -> tuple[Any, ...]:
        """Calls method `name` of every env (or those at `indices`); a value is read as is.

        `name` is positional only: the method may take a keyword `name` of its own.
        """
        return self._ask(indices, "call", name, args, kwargs).results()

    def get_attr(
        self, name: str, indices: Sequence[int] | None = None, *, call_methods: bool = True
    ) -> tuple[Any, ...]:
        """The attribute `name` of every env (or of those at `indices`), through its wrappers.

        A method is called, as Gymnasium's vector envs call it (`get_attr("render")` gives
        frames); with `call_methods=False` it comes back uncalled, as SB3's `get_attr` reads it.
        """
        if call_methods:
            return self._ask(indices, "call", name, (), {}).results()
        return self._ask(indices, "attribute", name).results()

    def set_attr(self, name: str, values: Any, indices: Sequence[int] | None = None) -> None:
        """Sets the attribute `name` of every env (or of those at `indices`).

        `values` is one value for all, or a list or tuple of one per env.
        """
        targets = arguments.check_indices(indices, self.num_envs)
        if not isinstance(values, list | tuple):
            values = [values] * len(targets)
        if len(values) != len(targets):
            raise ValueError(
                f"set_attr needs one value or {len(targets)} (one per env), got {len(values)}"
            )
        self._expect_no_call("set_attr")
        self._expect_open()
        for i, value in zip(targets, values, strict=True):
            group, index = self._locate(i)
            group.set_attr(index, name, value)

    def is_wrapped(
        self, wrapper_class: type, indices: Sequence[int] | None = None
    ) -> tuple[bool, ...]:
        """Whether each env (or those at `indices`) is wrapped by a `wrapper_class` at any depth."""
        return self._ask(indices, "is_wrapped", wrapper_class).results()

    def render(self) -> tuple[Any, ...]:
        """Every env's rendering, in env order."""
        return self.call("render")

    def _ask(self, indices: Any, method: str, *args: Any) -> EnvRequests:
        """`method(i, *args)` of each env at `indices` (all when None), its first round sent."""
        self._expect_no_call("call_async")  # `AsyncVectorEnv.call` and `get_attr` are one.
        self._expect_open()
        located = [self._locate(i) for i in arguments.check_indices(indices, self.num_envs)]
        return EnvRequests(located, method, args)


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
        """Every env's result, in order, once the rounds left are asked and answered.

        After a Ctrl-C, the hosts asked and not yet answered are not waited on: each is
        retired, and the batch's next reset replaces it (`fan_out`).
        """
        while True:
            try:
                self._answer_here()
            except BaseException:
                fan_out.abandon(self._located[k][0] for k in self._asked)
                raise
            asked, self._asked = [(self._located[k][0], k) for k in self._asked], []
            try:
                fan_out.collect_all(asked, self._take_answer)
            except Exception as raised:
                self._error = self._error or raised
            if self._error is not None:
                raise self._error
            if not self._rounds:
                return tuple(self._results)
            self._ask()

    def _answer_here(self) -> None:
        """The envs in this process answer, while the hosts asked compute, till one raises."""
        for k in self._here if self._error is None else ():
            group, index = self._located[k]
            try:
                self._results[k] = getattr(group, self._method)(index, *self._args)
            except Exception as raised:
                self._error = raised
                break
        self._here = []

    def _take_answer(self, group: Any, k: int) -> None:
        self._results[k] = group.answer()

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
            except BaseException:  # A Ctrl-C: the hosts asked so far are not waited on.
                fan_out.abandon(self._located[k][0] for k in self._asked)
                raise
            self._asked.append(places.pop(0))
        self._rounds = {key: places for key, places in self._rounds.items() if places}
