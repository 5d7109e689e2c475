import threading
import time

from batchrl.training import thread_stack


def _waits_here(started: threading.Event, release: threading.Event) -> None:
    started.set()
    release.wait(30)


def test_another_thread_reads_what_a_thread_runs_innermost_first():
    started, release = threading.Event(), threading.Event()
    waiter = threading.Thread(target=_waits_here, args=(started, release))
    waiter.start()
    try:
        assert started.wait(30)
        deadline = time.monotonic() + 30
        functions = thread_stack.functions(waiter.ident)
        while functions[0][1] != "wait" and time.monotonic() < deadline:  # Into release.wait.
            functions = thread_stack.functions(waiter.ident)
    finally:
        release.set()
        waiter.join()
    names = [name for _, name in functions]
    assert names[:2] == ["wait", "wait"], functions  # Event.wait, then Condition.wait.
    assert names.index("_waits_here") < names.index("run") < names.index("_bootstrap"), names
    assert all(
        file.endswith("thread_stack_test.py") for file, name in functions if name == "_waits_here"
    )
    here = thread_stack.functions(threading.get_ident())
    assert ("thread_stack_test.py", "_waits_here") not in [
        (file.rsplit("/", 1)[-1], name) for file, name in here
    ]
    assert here[0][1] == "functions" and here[1][1] == (
        "test_another_thread_reads_what_a_thread_runs_innermost_first"
    ), here


def test_a_thread_that_ended_is_not_read():
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    assert thread_stack.functions(ended.ident) is None
