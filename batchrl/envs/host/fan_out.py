"""A call fanned out to a batch's groups, none of them left holding it when one fails.

A batch sends each group its step, reset or request before it waits for any. A worker
left with a call in flight refuses every later call, the reset that would mend the
batch among them: a batch whose sending fails midway abandons what it sent
(`abandon`), and one whose collecting fails still collects from every other group, or
after a Ctrl-C abandons them (`collect_all`). An abandoned worker is ended, and the
batch's next reset replaces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


def collect_all(requests: Sequence[tuple[Any, Any]], collect: Callable) -> None:
    """Calls `collect(group, part)` for every request, even after one fails, then raises.

    So no answer is left in flight when a worker fails. After a KeyboardInterrupt, a
    group that can `abandon` its call does, not waited on (to its timeout, where its
    envs hang): the batch's next reset replaces it.
    """
    failure = None
    for g, part in requests:
        if isinstance(failure, KeyboardInterrupt) and hasattr(g, "abandon"):
            g.abandon()
            continue
        try:
            collect(g, part)
        except BaseException as error:
            failure = failure or error
    if failure is not None:
        raise failure


def abandon(groups: Iterable[Any], error: BaseException | None = None) -> None:
    """Leaves each group's call in flight unanswered, where the group can.

    For the groups a call reached before the sending failed with `error`: a later group
    refused it (one an earlier Ctrl-C retired, till a reset replaces it), or a Ctrl-C cut
    the loop. Groups in this process hold nothing in flight and have no `abandon`.
    """
    why = "left with its {call} unanswered as another group refused it"
    why = why if isinstance(error, Exception) else None  # None: a Ctrl-C's words.
    for g in groups:
        if hasattr(g, "abandon"):
            g.abandon(why)
