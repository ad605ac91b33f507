"""Crash consistency of a run: the state as of the last history entry, and the run directory that holds it.

:class:`RunState` keeps a *snapshot* of the values an iteration changes, as of the last history entry: a save in the
middle of an iteration writes that state, and an exception that cuts an iteration short rolls the model back to it.

The run directory (``checkpoint_dir``): every entry writes ``model.zip`` (the state and the history: the one file a run
resumes from), then ``history.json`` (an export, never read back), each atomically; the LLM transcript
``llm_calls.jsonl`` is rewound to the last entry when a run resumes, so it replays exactly. A run holds the directory's
``.lock`` (a :class:`filelock.FileLock`, dying with its process) from :meth:`RunState.open` or :meth:`RunState.acquire`
to :meth:`RunState.close`. A damaged, missing or foreign ``model.zip`` is refused with a :class:`RunDirectoryError`
naming the file and the way out; a damaged ``history.json`` is written anew at the next entry. A run resumed from a
copied or moved run directory writes into the copy (:func:`loaded_checkpoint_dir`).
"""

from __future__ import annotations

import copy
import io
import json
import os
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from sb3_r2po.common.files import atomic_write
from sb3_r2po.llm.base import ChatBackend, LLMBackendError
from sb3_r2po.llm.recording import RecordingBackend

COMMITTED_STATE = tuple(
    "num_timesteps _episode_num _n_evaluations _rng llm_stats iteration ep_info_buffer ep_success_buffer "
    "_transcript_calls".split()
)
"""The model's attributes an iteration changes before its history entry is written (saved as of the last entry)."""


def evaluation_seed(seed: int, evaluation: int) -> int:
    """The env seed of a run's evaluation number ``evaluation`` (from 0; sub-environment ``i`` adds ``i``): 31 bits of
    the ``evaluation``-th child of ``numpy.random.SeedSequence(seed)``."""
    child = np.random.SeedSequence(seed, spawn_key=(evaluation,))  # == SeedSequence(seed).spawn(evaluation + 1)[-1]
    return int(child.generate_state(1)[0] >> 1)


TRANSCRIPT = "llm_calls.jsonl"
MODEL = "model.zip"
HISTORY = "history.json"
LOCK = ".lock"

_MAX_DATA_BYTES = 256 * 2**20
"""A model zip's ``data`` larger than this is not read (a history of that size is not one R2PO wrote)."""


class RunDirectoryError(ValueError):
    """A run directory, or its ``model.zip``, that cannot be used as it is: the message names the file and the way out."""


class RunDirectoryInUseError(RunDirectoryError):
    """Another run (another process, or another model in this process) holds the run directory's lock."""


def _present(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _special(path: Path) -> str | None:
    """Why ``path`` is not a file to read (a folder, a pipe, ...); ``None``: it is one."""
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists() and not path.is_file():
        return "is not a regular file (a pipe, a socket or a device)"
    return None


def _read_model(path: Path) -> tuple[list[dict[str, Any]] | None, str]:
    """The history in a model zip (checksums checked, ``data`` read as JSON, nothing unpickled), or ``None`` and why not."""
    if not path.exists():
        return None, "is a link to a file that does not exist" if path.is_symlink() else "is missing"
    if (special := _special(path)) is not None:
        return None, special
    try:
        with zipfile.ZipFile(path) as archive:
            if (bad := archive.testzip()) is not None:  # reads every member, checking its CRC
                return None, f"is damaged (its member {bad!r} fails its checksum)"
            if "data" not in archive.namelist():
                return None, "holds no 'data' (it is not a model saved by Stable-Baselines3)"
            if (size := archive.getinfo("data").file_size) > _MAX_DATA_BYTES:
                return None, f"holds a 'data' of {size} bytes (not one R2PO writes)"
            raw = archive.read("data")
    except Exception as error:  # a damaged zip raises many kinds (BadZipFile, zlib.error, EOFError, OSError, ...)
        return None, f"is not a readable zip ({type(error).__name__}: {error}; damaged or cut short)"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, "holds a 'data' that is not JSON (damaged)"
    if not isinstance(data, dict) or "history" not in data:
        return None, "holds no history (it is not a model saved by R2PO)"
    history = data["history"]
    if not (isinstance(history, list) and all(isinstance(entry, dict) for entry in history)):
        return None, "holds a history that is not a list of history entries (damaged)"
    return history, ""


def _continues(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether the history ``ours`` starts with ``theirs`` (compared as JSON text, so a NaN equals a NaN)."""
    return [json.dumps(e, sort_keys=True) for e in ours[: len(theirs)]] == [json.dumps(e, sort_keys=True) for e in theirs]


def _is_run_directory(directory: Path) -> bool:
    return _present(directory / HISTORY) or _present(directory / TRANSCRIPT)


def _zip_path(path: str | os.PathLike[str]) -> Path:
    """The file ``R2PO.load(path)`` reads: ``path``, or ``path + ".zip"`` when only that exists (as SB3 does)."""
    given = Path(path)
    with_suffix = Path(f"{given}.zip")
    return with_suffix if not given.exists() and with_suffix.is_file() else given


def _lost_run(model_zip: Path, problem: str) -> str:
    directory = model_zip.parent
    return (
        f"{str(model_zip)!r} {problem}: the run in {str(directory)!r} cannot be resumed, as it resumes only from its "
        f"{MODEL}. Restore it from a copy to resume the run ({str(directory / HISTORY)!r} is only an export of its "
        f"history). To start a new run instead, give it another checkpoint_dir (or move {str(directory)!r} away first "
        "to use that name again)."
    )


def check_model_file(path: str | os.PathLike[str]) -> Path:
    """
    Check that ``path`` (given to ``R2PO.load``; ``".zip"`` appended when only that exists) is a readable model zip,
    instead of SB3's ``BadZipFile``: the error names the file and the way to recover.

    :return: The file that SB3 will read.
    :raises FileNotFoundError: when the file does not exist.
    :raises RunDirectoryError: when it is not a readable model zip.
    """
    target = _zip_path(path)
    history, problem = _read_model(target)
    if history is not None:
        return target
    if target.name == MODEL and _is_run_directory(target.parent):
        message = _lost_run(target, problem)
    else:
        message = f"{str(target)!r} {problem}" + (". Restore it from a copy." if target.exists() else "")
    raise FileNotFoundError(message) if not target.exists() else RunDirectoryError(message)


def loaded_checkpoint_dir(path: Any, saved: str | None) -> str | None:
    """
    The ``checkpoint_dir`` of a model loaded from ``path`` (a path or a file object) whose zip saved ``saved``: the
    directory of a run directory's ``model.zip``, so that a copied or moved run directory resumes into itself (with a
    warning); otherwise ``saved``.
    """
    if saved is None or not isinstance(path, (str, os.PathLike)):
        return saved
    target = _zip_path(path)
    here = target.parent
    if target.name != MODEL or not target.is_file() or not _is_run_directory(here):
        return saved
    if _same_directory(here, Path(saved)):
        return saved
    warnings.warn(
        f"{str(target)!r} was loaded from a run directory that is not the one its run was started in "
        f"({saved!r}; copied, moved or renamed since): the run writes into {str(here)!r}",
        RuntimeWarning,
        stacklevel=2,
    )
    return str(here)


def _same_directory(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (moved away)
        return a.resolve() == b.resolve()


class RunState:
    """The snapshot of a model's :data:`COMMITTED_STATE` at its last history entry, and its run directory (``None``:
    no files), locked by :meth:`open`, unlocked by :meth:`close`, locked again by :meth:`acquire`."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.transcript: RecordingBackend | None = None
        self._values: dict[str, Any] = {}
        self._history_length: int | None = None
        self._lock: FileLock | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None  # a copy does not hold the original's lock
        return state

    def snapshot(self, values: dict[str, Any], history_length: int) -> None:
        """Remember copies of ``values`` as the state of the history's first ``history_length`` entries."""
        self._values = copy.deepcopy(values)
        self._history_length = history_length

    def committed(self) -> dict[str, Any]:
        """Copies of the snapshot's values."""
        return copy.deepcopy(self._values)

    def saved_history(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entries of ``history`` the snapshot covers (an entry appended and not yet committed is left out)."""
        return history if self._history_length is None else history[: self._history_length]

    def open(
        self, backend: ChatBackend, directory: str | os.PathLike[str] | None, history: list[dict[str, Any]]
    ) -> ChatBackend:
        """
        With a run directory (created when missing; ``None``: no files): lock it until :meth:`close`, check it
        (:meth:`check_directory`) against ``history`` and return ``backend`` recording every call to its transcript.

        :raises RunDirectoryInUseError: when another run holds the directory.
        :raises RunDirectoryError: when it holds another run, or files that cannot be used.
        """
        self.directory = None if directory is None else Path(directory)
        if self.directory is None:
            self.close()
            self.transcript = None
            return backend
        self._enter(history, backend)
        assert self.transcript is not None
        return self.transcript

    def acquire(self, history: list[dict[str, Any]]) -> None:
        """Lock the run directory of :meth:`open` again (the next ``learn()``), check it and count its transcript's calls
        again; nothing happens without a directory or while locked (errors as :meth:`open`)."""
        if self.directory is not None and not self.locked:
            self._enter(history, None)

    def close(self) -> None:
        """Unlock the run directory, if locked."""
        lock, self._lock = self._lock, None
        if lock is not None and lock.is_locked:
            lock.release(force=True)

    @property
    def locked(self) -> bool:
        """Whether this run holds its directory's lock."""
        return self._lock is not None and self._lock.is_locked

    def _lock_directory(self) -> None:
        assert self.directory is not None
        lock_path = self.directory / LOCK
        if self.locked and self._lock is not None and self._lock.lock_file == str(lock_path):
            return
        self.close()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(lock_path), thread_local=False)
            lock.acquire(timeout=0)
        except Timeout:
            raise RunDirectoryInUseError(
                f"checkpoint_dir {str(self.directory)!r} is in use by another run (another process, or another model "
                f"in this one, holds {str(lock_path)!r} until its learn() ends, also by a crash; deleting it does not "
                "unlock it). Wait for that run, or give this run another checkpoint_dir"
            ) from None
        except OSError as error:
            raise RunDirectoryError(
                f"checkpoint_dir {str(self.directory)!r} cannot be used as a run directory ({error}): it must be a "
                f"folder this process can create and write to, whose {LOCK} (when there is one) is a plain file; "
                "fix that, or give this run another checkpoint_dir"
            ) from error
        self._lock = lock

    def _enter(self, history: list[dict[str, Any]], backend: ChatBackend | None) -> None:
        self._lock_directory()
        assert self.directory is not None
        path = self.directory / TRANSCRIPT
        try:
            self.check_directory(history)
            try:
                if (special := _special(path)) is not None:
                    raise OSError(f"it {special}")
                if backend is not None:
                    self.transcript = RecordingBackend(backend, path)
                elif self.transcript is not None:
                    self.transcript.refresh()
            except (LLMBackendError, OSError) as error:
                raise RunDirectoryError(
                    f"{str(path)!r}, the run's transcript of LLM calls, cannot be used ({error}). The run itself is in "
                    f"{MODEL}: restore the transcript from a copy, or move it aside to record the rest of the run in a "
                    "new one (a replay of the whole run then needs the calls of both)"
                ) from error
        except BaseException:
            self.close()
            raise

    def check_directory(self, history: list[dict[str, Any]]) -> None:
        """Raise a :class:`RunDirectoryError` when the ``model.zip`` cannot be loaded (also missing beside a
        ``history.json``) or holds a run ``history`` does not continue, or ``history.json`` is a folder."""
        assert self.directory is not None
        model_zip = self.directory / MODEL
        if not _present(model_zip) and not _present(self.directory / HISTORY):
            return  # a new directory, or the transcript of a run cut before its first entry
        saved, problem = _read_model(model_zip)
        if saved is None:
            raise RunDirectoryError(_lost_run(model_zip, problem))
        if not _continues(history, saved):
            raise RunDirectoryError(
                f"checkpoint_dir {str(self.directory)!r} already holds another run ({model_zip}: a history of "
                f"{len(saved)} entries); resume it with R2PO.load({str(model_zip)!r}, env=..., llm=...).learn(..., "
                "reset_num_timesteps=False), or give this run another directory"
            )
        if (self.directory / HISTORY).is_dir():
            raise RunDirectoryError(
                f"{str(self.directory / HISTORY)!r} is a folder, where this run writes the export of its history: move "
                "it away, or give this run another checkpoint_dir"
            )

    @property
    def transcript_calls(self) -> int | None:
        """Calls in the run directory's transcript (``None``: no transcript)."""
        return None if self.transcript is None else self.transcript.recorded

    def rewind(self, calls: int) -> None:
        """Set aside the transcript's calls after the first ``calls`` (a resumed run asks them again)."""
        if self.transcript is not None:
            self.transcript.rewind(calls)

    def write(
        self, directory: str | os.PathLike[str], save: Callable[[io.BytesIO], None], history: list[dict[str, Any]]
    ) -> None:
        """Write ``model.zip`` (by ``save``: the state and ``history``), then its export ``history.json``, atomically."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        model_zip = io.BytesIO()
        save(model_zip)
        atomic_write(target / MODEL, model_zip.getvalue())
        atomic_write(target / HISTORY, json.dumps(history, indent=1).encode())
