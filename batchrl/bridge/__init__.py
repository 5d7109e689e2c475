"""The one door from compiled code to the host.

`InGraphBatchEnv` (a BatchEnv callable from a jitted program), the thread state its
host calls keep, XLA's thread pool, and env errors raised as themselves out of
compiled code.
"""

from batchrl.bridge.in_graph import BridgeState, InGraphBatchEnv, StaleStateError
from batchrl.bridge.surfaced import surface_errors, take_error

__all__ = ["BridgeState", "InGraphBatchEnv", "StaleStateError", "surface_errors", "take_error"]
