"""Host calls from compiled code: the bridge's reset and step as callbacks XLA makes.

`host_call` makes one: a `buffer_callback` on XLA's own CPU buffers where JAX has it (about
5 us a call inside `lax.scan`, against 75 us for an `io_callback`), else an `io_callback`.
Under `jax.vmap` a call is refused in words that say what to do instead.
`weakly` calls the bridge through a weak reference, as JAX's caches keep a program's
callbacks after its run.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from batchrl.bridge import surfaced, thread_state

try:  # Present in the JAX versions pyproject.toml allows; kept optional on purpose.
    from jax.experimental.buffer_callback import buffer_callback
except ImportError:  # pragma: no cover - exercised only on other JAX versions
    buffer_callback = None


class DeviceError(ValueError):
    """A program that steps host envs runs where the bridge cannot serve it."""


def _host_view(buffer: Any) -> np.ndarray:
    """`buffer`, one of XLA's, as a numpy view; a DeviceError where it is not host memory."""
    try:
        return np.asarray(buffer)
    except Exception as error:  # An accelerator's buffer: XLA refuses host access.
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DeviceError(
            f"the env bridge was called from a program on an accelerator, whose buffers host "
            f"code cannot read ({reason}): act on the CPU (--set acting_device=auto or cpu)"
        ) from None


def weakly(method: Callable[..., None]) -> Callable[..., None]:
    """`method`, bound to a bridge, called through a weak reference to that bridge."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> None:
        bound = ref()
        if bound is None:
            raise RuntimeError(
                "the InGraphBatchEnv this program steps is gone: keep it while its programs run"
            )
        bound(*args)

    return call


def host_call(
    function: Callable[..., None],
    result_types: tuple[jax.ShapeDtypeStruct, ...],
    device: jax.Device | None = None,
    in_place: bool = True,
) -> Callable[..., Any]:
    """A side-effecting call of `function(outputs, *inputs)` on numpy views, from compiled code.

    `result_types`: a flat tuple, one per output. `device`: the one device that makes the
    call in a program over several devices. `in_place`: the program runs on the CPU, and
    the call reads and writes XLA's buffers in place; else its arrays are copied across.
    """

    def keep_error(*args: Any) -> None:
        try:
            function(*args)
        except BaseException as error:
            surfaced.keep(error)
            raise

    if buffer_callback is not None and device is None and in_place:

        def on_buffers(ctx: Any, out: Any, *inputs: Any) -> None:
            del ctx
            thread_state.keep()
            try:
                outputs = tuple(_host_view(o) for o in out)
                views = tuple(_host_view(x) for x in inputs)
            except DeviceError as error:
                surfaced.keep(error)
                raise
            keep_error(outputs, *views)

        return refusing_vmap(buffer_callback(on_buffers, result_types, has_side_effect=True))

    def on_arrays(*inputs: Any) -> Any:
        thread_state.keep()
        outputs = tuple(np.empty(t.shape, t.dtype) for t in result_types)
        if device is None:
            keep_error(outputs, *inputs)
            return outputs
        # Over several devices a call that raises stops its device while the others wait
        # for it in the update's collectives, until XLA aborts the process: the error is
        # kept instead, the program runs to its end on zeros, and `surface_errors` raises it.
        if not surfaced.pending():
            try:
                function(outputs, *inputs)
            except BaseException as error:
                surfaced.keep(error)
        if surfaced.pending():
            outputs = tuple(np.zeros(t.shape, t.dtype) for t in result_types)
        return outputs

    if device is not None:  # The token orders the calls; XLA allows no ordered effect here.
        sharding = jax.sharding.SingleDeviceSharding(device)
        call = functools.partial(
            jax.experimental.io_callback, on_arrays, result_types, sharding=sharding
        )
    else:
        call = functools.partial(
            jax.experimental.io_callback, on_arrays, result_types, ordered=True
        )
    return refusing_vmap(call)


def refusing_vmap(call: Callable[..., Any]) -> Callable[..., Any]:
    """`call`, whose refusal under `jax.vmap` says why host envs cannot be mapped, and what can.

    A PureJaxRL-style `jax.vmap(train)(seeds)` over host envs met JAX's words for the
    callback's missing batching rule, which name neither the envs nor a way on.
    """
    checked = jax.custom_batching.custom_vmap(call)

    @checked.def_vmap
    def refuse(*_: Any) -> Any:
        raise NotImplementedError(
            "host envs cannot be stepped under jax.vmap: a batch of them is already one "
            "call with a row per env; to train several seeds at once, use `sweep "
            "--together` or `batchrl.train(config, seeds=[...])`"
        )

    return checked
