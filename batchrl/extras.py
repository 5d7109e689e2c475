"""The pip command that installs one of batchrl's extras, for this copy of batchrl.

An error for a missing optional package names the command. The README's editable install
from a source checkout takes `pip install -e 'CHECKOUT[extra]'` (CHECKOUT `.` where the
command runs in it: a path that works from any folder, where `.` would install the
folder the user stands in); a copy installed from a wheel takes `pip install
'batchrl[extra]'`.
"""

import os
import pathlib

# The folder above the package: a source checkout holds the project's pyproject.toml there.
CHECKOUT = pathlib.Path(__file__).resolve().parent.parent


def pip_install(extra: str) -> str:
    """The pip command that installs batchrl's `extra` for this copy of batchrl."""
    if not (CHECKOUT / "pyproject.toml").is_file():
        return f"pip install 'batchrl[{extra}]'"
    try:
        here = pathlib.Path(os.getcwd()).resolve() == CHECKOUT
    except OSError:  # The folder the command runs in was removed.
        here = False
    return f"pip install -e '{'.' if here else CHECKOUT}[{extra}]'"
