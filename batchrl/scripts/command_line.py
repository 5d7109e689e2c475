"""The commands' argument parser: a bad argument is one line, as their other errors are.

argparse prints its usage block before the error, and names the command by its whole
`prog` (`python -m batchrl.scripts.sweep: error:`), where the command's own errors say
`sweep: error:`; here the error is that one line, and `--help` still prints the usage.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line: `NAME: error: MESSAGE`, exit status 2."""

    def error(self, message: str) -> NoReturn:
        name = self.prog.rsplit(".", 1)[-1]  # `python -m batchrl.scripts.sweep`: sweep.
        self.exit(2, f"{name}: error: {message}\n")
