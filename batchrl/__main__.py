"""`python -m batchrl` is the train command, as `batchrl`, the command pip installs, is."""

from batchrl.scripts import exiting, train


def main() -> None:
    """The train command's process (`python -m batchrl.scripts.train`)."""
    exiting.command(train.main)


if __name__ == "__main__":
    main()
