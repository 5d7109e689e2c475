"""The functions another thread runs, read without touching its frames.

Walking another thread's frame objects (`sys._current_frames()`, then `f_back`) races
with that thread as it tears its frames down: on CPython 3.11, a walk that waited for
the main thread to reach a phase got a dict where a frame was due, and another crashed
the process (SIGSEGV, exit -11). faulthandler writes every thread's stack in one C call
that holds the GIL throughout and makes no frame object; its text is read back here.
"""

from __future__ import annotations

import faulthandler
import re
import tempfile

# faulthandler's lines: a thread's header, then a line a frame, innermost first.
_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^  File "(.*)", line (?:\d+|\?\?\?) in (.+)$')


def functions(thread: int) -> list[tuple[str, str]] | None:
    """(file, function) of each frame that thread `thread` (its ident) runs, innermost first.

    Empty where it runs no Python. None where it is not in the dump: it has ended, or
    more than 100 threads run Python (faulthandler writes 100, the main thread last). A
    thread's 100 innermost frames at most.
    """
    with tempfile.TemporaryFile() as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        lines = out.read().decode("utf-8", "replace").splitlines()
    found, current = None, None
    for line in lines:
        if header := _HEADER.match(line):
            current = int(header.group(1), 16)
            if current == thread:
                found = []
        elif current == thread and (frame := _FRAME.match(line)):
            found.append((frame.group(1), frame.group(2)))
    return found
