"""A Ray actor of batchrl's ends when the raylet that started it dies.

Ray's workers are the raylet's children. An idle actor whose raylet was killed ran on
for good, reparented, with its forkserver and env workers: Ray could no longer end it,
and `close`'s `ray.kill` went to a node marked dead.
"""

from __future__ import annotations

import os
import threading
import time

# How often the actor checks that the raylet which started it lives.
RAYLET_CHECK_SECONDS = 1.0


def end_with_raylet() -> None:
    """Ends this process, and so its workers, once its parent (the raylet) has died."""
    raylet = os.getppid()

    def watch() -> None:
        while os.getppid() == raylet:
            time.sleep(RAYLET_CHECK_SECONDS)
        os._exit(1)  # Workers and forkserver die with their parent (PR_SET_PDEATHSIG).

    threading.Thread(target=watch, name="batchrl-raylet-watch", daemon=True).start()
