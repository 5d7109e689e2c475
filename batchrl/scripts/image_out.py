"""Where `plot` and `stats` write an image: checked before the work, its folder made.

Both commands read runs and draw (`stats` bootstraps first); an `--out` they cannot write
is said before that, in one line, and a folder not there yet is made as the image is
written.
"""

import io
import pathlib

from batchrl.training import file_writes


def error(out: pathlib.Path) -> str | None:
    """The one-line error for an `--out` no image can be written to, or None.

    No extension (matplotlib would write OUT.png, not the file named), one that names no
    format matplotlib writes, or a file where a folder above it should be.
    """
    from matplotlib.backends import backend_agg  # Not at import: `table` reads no image.

    formats = backend_agg.FigureCanvasAgg.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        what = f"has extension {out.suffix!r}" if out.suffix else "has no extension"
        return f"--out {str(out)!r} {what}, allowed: {', '.join(sorted(formats))}"
    file = next((folder for folder in out.parents if folder.is_file()), None)
    if file is not None:
        return f"--out {str(out)!r}: {file} is a file, not a folder"
    return None


def save(figure, out: pathlib.Path, **savefig) -> None:
    """Writes `figure` to `out` whole or not at all, making the folders it names.

    Drawn in memory, then written beside `out` and renamed onto it: a full disk leaves
    the image drawn before, not a cut one. Raises the `file_writes.WriteError` that names
    `out` (not the temporary file the OS refused) and what would let it through.
    """
    image = io.BytesIO()
    figure.savefig(image, format=out.suffix[1:].lower(), **savefig)
    try:
        file_writes.write_atomic(out, image.getvalue())
    except file_writes.WriteError as error:  # Said as the command's, not a run folder's.
        raise file_writes.write_error(out, error.cause, started=False) from None
