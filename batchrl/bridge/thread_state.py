"""Keep Python's state of an XLA thread alive between host calls from compiled code.

A host call from a compiled program runs on one of XLA's threads, which Python does not
know. For every call, JAX's binding creates a Python thread state for that thread and
deletes it on return, and with it the thread's frame stack: a 16 KiB mapping made and
unmapped, and a page fault, on every env step. Keeping the state after the first call
ends that churn and most of the compiled program's time between two host calls (with a
no-op env, 17-23 us to 6 us).

A trick (`batchrl.tricks`, "thread_state"): turned off, the binding's churn runs as JAX has it.
"""

from __future__ import annotations

import ctypes
import threading

from batchrl import tricks

_kept: set[int] = set()


def keep() -> None:
    """Keeps the calling thread's Python state until the interpreter exits.

    Call it with the GIL held, from the host call. The first call on a thread takes one
    more hold on its state, which is never given back, so the binding's release no
    longer deletes it; later calls on the same thread only look the thread up.
    """
    ident = threading.get_ident()
    if ident not in _kept and tricks.on("thread_state"):
        ctypes.pythonapi.PyGILState_Ensure()
        _kept.add(ident)
