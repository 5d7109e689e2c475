"""An MP4 written as its frames come, whole or not at all, through imageio's ffmpeg.

`visualize` films an episode a file: the frames are not held (a 1,000-step MuJoCo
episode's 480 x 480 frames took 1.2 GB), and a failed episode, a full disk or a Ctrl-C
leaves an earlier recording's video, never a part.
"""

from __future__ import annotations

import contextlib
import pathlib
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from batchrl.training import file_writes


@contextlib.contextmanager
def writing(path: pathlib.Path, fps: float) -> Iterator[Callable[[Any], None]]:
    """Writes the frames given to the MP4 `path` as they come; `path` appears once whole.

    The file is written beside `path` and renamed onto it once the block ends.
    """
    import imageio

    partial = path.with_name(f".{path.stem}.partial{path.suffix}")

    def guarded(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except OSError as error:  # The writer's alone: an env's own OSError stays its own.
            if error.errno is None and "\n" in str(error):  # ffmpeg ended: imageio's text
                # holds its command line; what ffmpeg said (a full disk) it printed above.
                error = OSError(f"ffmpeg ended ({str(error).splitlines()[0]}, its lines above)")
            raise file_writes.write_error(path, error, started=False) from None

    try:
        with warnings.catch_warnings():
            # imageio starts ffmpeg with fork+exec; exec follows at once, so JAX's
            # threads cannot deadlock the child.
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
            writer = guarded(imageio.get_writer, partial, fps=fps, macro_block_size=1)
            started = []

            def film(frame: Any) -> None:
                if started:
                    return guarded(writer.append_data, frame)
                with ctrl_c_held():  # The first frame starts ffmpeg.
                    guarded(writer.append_data, frame)
                started.append(True)

            try:
                yield film
            finally:
                guarded(writer.close)
        guarded(partial.replace, path)
    finally:
        partial.unlink(missing_ok=True)  # Gone once renamed; a failed one's part.


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """A Ctrl-C in the block raised as it ends, not in it.

    Starting a process (fork, exec) runs Python's at-fork callbacks, in which a
    KeyboardInterrupt is printed as ignored and lost: one Ctrl-C in ten, sent as an
    episode's video began, left visualize filming on.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    before = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if caught and callable(before):
        before(signal.SIGINT, None)  # Python's own handler raises KeyboardInterrupt.
