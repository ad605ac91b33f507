"""Crash-safe file writes (a reader sees the old file or the new one, never a torn one), and the user cache directory."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def default_cache_dir() -> Path:
    """``$SB3_R2PO_CACHE``, else ``$XDG_CACHE_HOME/sb3_r2po``, else ``~/.cache/sb3_r2po``."""
    if override := os.environ.get("SB3_R2PO_CACHE"):
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "sb3_r2po"


_UMASK = os.umask(0o022)
os.umask(_UMASK)  # the process's umask, read once at import: reading it means setting it, which is not thread-safe


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """A temporary binary file beside ``path`` (named ``<name>.<random><suffix>``), synced, given the permissions of a
    file created normally and renamed over ``path`` when the block ends without an exception, else removed."""
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=suffix, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp_name, 0o666 & ~_UMASK)  # mkstemp makes 0600
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # make the rename durable (best effort)
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_file`."""
    with atomic_file(path) as out:
        out.write(data)


def cut_partial_line(path: str | os.PathLike[str]) -> bytes:
    """Cut off the last line of ``path`` (if it exists) when it lacks its newline, and return the bytes cut off."""
    try:
        fh = open(path, "rb+")
    except FileNotFoundError:
        return b""
    with fh:
        if fh.seek(0, os.SEEK_END) == 0:
            return b""
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":  # the usual case: only the last byte is read
            return b""
        fh.seek(0)
        data = fh.read()
        keep = data.rfind(b"\n") + 1
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    return data[keep:]


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a write may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_line(path: str | os.PathLike[str], line: bytes) -> bytes:
    """Append ``line`` (ending with a newline) to ``path`` (created when missing) and sync it, after cutting off a
    half-written last line (returned, usually empty); a write that fails is cut back before its error is raised."""
    if not line.endswith(b"\n"):
        raise ValueError("append_line needs a line that ends with a newline")
    cut = cut_partial_line(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):  # the next append cuts what this could not
                os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)
    return cut
