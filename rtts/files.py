"""Opening the files people drop into the models directory, which are untrusted input.

A name there may be a FIFO (``open`` waits for a writer forever), a symlink to
``/dev/zero`` (a read never ends) or a device. Discovery, SIGHUP rescans and the
inference thread must not hang on them, so such files are opened only when they
are regular files, checked on the open descriptor (no race with a file swapped
after a ``stat``), and their size is checked before anything is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["is_regular", "open_regular", "read_regular"]


def is_regular(path: Path) -> bool:
    """``path`` is, or links to, a regular file (``stat`` only: opens nothing)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def open_regular(path: Path, max_bytes: int) -> BinaryIO:
    """``path`` opened for binary reading; ValueError unless it is a regular file of at
    most ``max_bytes``, OSError when it cannot be opened."""
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; it
    # changes nothing for the regular files that pass the check below.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{st.st_size} bytes; at most {max_bytes} are read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The content of ``path``, a regular file of at most ``max_bytes`` (see ``open_regular``).

    Reads at most ``max_bytes`` even when the file grows meanwhile.
    """
    with open_regular(path, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"grew past {max_bytes} bytes while read")
    return data
