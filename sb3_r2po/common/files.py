"""Crash-safe file writes: a reader (or a run resumed after a crash) sees the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # the process's umask, read once at import: reading it means setting it, which is not thread-safe


@contextmanager
def atomic_file(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """
    Open a temporary file beside ``path`` for writing (binary); when the block ends without an exception it is
    flushed, synced to disk, given the permissions of a file created normally (``0o666`` less the umask) and renamed
    over ``path``; otherwise it is removed and ``path`` is untouched.

    :param path: The file to write.
    :param suffix: Suffix of the temporary file's name (``<name>.<random><suffix>``, in the same directory).
    """
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=suffix, dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as out:
        out.write(data)
