"""Crash consistency of a run: the state as of the last history entry, and the run directory that holds it.

An iteration changes counters, random state and LLM statistics before its history entry is written. :class:`RunState`
keeps a copy of those values as of the last entry (a *snapshot*), so that

- a save in the middle of an iteration (a callback, another thread) writes the state of the last entry, and a model
  loaded from it repeats the running iteration instead of charging its episodes twice;
- an exception that cuts an iteration short rolls the model back to the last entry, and the next ``learn()``
  repeats that iteration in full, as a run resumed from its checkpoint would;
- with a ``checkpoint_dir``, every entry writes ``model.zip`` and ``history.json`` atomically, and the transcript of
  LLM calls (``llm_calls.jsonl``) is rewound to the last entry when a run resumes, so that it replays exactly.

The run directory is guarded against a careless or hostile world:

- **One writer.** A run holds an inter-process lock on its directory (``.lock`` in it, a :class:`filelock.FileLock`)
  from :meth:`RunState.open` (or :meth:`RunState.acquire`) to :meth:`RunState.close`: a second process, or a second
  model in this one, that opens the directory meanwhile gets :class:`RunDirectoryInUseError` instead of writing
  over the first run's checkpoint and into its transcript. The lock dies with its process (a crash leaves none).
- **Damaged files.** ``model.zip`` is written before ``history.json``, so ``model.zip`` is the authority: a
  ``history.json`` that is missing, empty, cut short, not JSON or not a history, next to a readable ``model.zip``
  that this run continues, is rewritten from it (the old file kept as ``history.json.damaged``, with a warning);
  anything that cannot be recovered safely is a :class:`RunDirectoryError` naming the file and the way out.
  :func:`check_model_file` says the same of a damaged ``model.zip`` given to ``R2PO.load``.
- **Copies.** :func:`loaded_checkpoint_dir` makes a run resumed from a copied or moved run directory write into the
  copy, not into the directory it was started in.
"""

from __future__ import annotations

import copy
import io
import json
import os
import warnings
import zipfile
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from filelock import FileLock, Timeout

from sb3_r2po.common.files import atomic_write, set_aside
from sb3_r2po.llm.base import ChatBackend, LLMBackendError
from sb3_r2po.llm.recording import RecordingBackend

COMMITTED_STATE = (
    "num_timesteps",
    "_episode_num",
    "_n_evaluations",
    "_rng",
    "llm_stats",
    "iteration",
    "ep_info_buffer",
    "ep_success_buffer",
    "_transcript_calls",
)
"""The model's attributes an iteration changes before its history entry is written (saved as of the last entry)."""


def evaluation_seed(seed: int, evaluation: int) -> int:
    """
    The env seed of a run's evaluation number ``evaluation`` (sub-environment ``i`` resets with it plus ``i``, as
    ``VecEnv.seed`` does): a 31-bit number drawn from the ``evaluation``-th child of ``numpy.random.SeedSequence(seed)``
    (plus ``i`` it stays below 2**32, the range of ``numpy.random.seed`` that some envs call). Runs of different seeds
    draw from independent streams (two runs share a start state only by a chance coincidence: about 1e-3 for a grid
    of 10 seeds x 200 evaluations), the same seed draws the same numbers, and the stream's position is the
    evaluation count (``_n_evaluations``, committed with every history entry), so a resumed run continues the stream.

    :param seed: The run's seed.
    :param evaluation: The evaluation's index in the run (0 for the first warm-up episode).
    """
    child = np.random.SeedSequence(seed, spawn_key=(evaluation,))  # == SeedSequence(seed).spawn(evaluation + 1)[-1]
    return int(child.generate_state(1)[0] >> 1)


_ATOMS = frozenset({int, float, str, bool, type(None)})
"""Types whose values are immutable: a copy may share them."""


def _deep_copy(value: Any) -> Any:
    """What ``copy.deepcopy(value)`` gives, for the values of :data:`COMMITTED_STATE` (copied at every history entry):
    numbers, strings and ``None`` as they are, a dict or deque item by item (SB3's episode buffers are deques of small
    dicts), a numpy ``Generator`` as a new one whose bit generator has the same type, state and seed sequence (the seed
    sequence is shared: R2PO never spawns from it), anything else by ``copy.deepcopy``, which costs far more per item."""
    if value is None or isinstance(value, (int, float, str)):
        return value
    if type(value) is dict:
        if all(type(item) in _ATOMS for item in value.values()):
            return value.copy()  # a flat dict (an episode buffer's item): nothing inside to copy
        return {key: _deep_copy(item) for key, item in value.items()}
    if type(value) is deque:
        return deque((_deep_copy(item) for item in value), maxlen=value.maxlen)
    bits = value.bit_generator if type(value) is np.random.Generator else None
    if bits is not None and type(bits.seed_seq) is np.random.SeedSequence:
        fresh = type(bits)(bits.seed_seq)
        fresh.state = bits.state
        return np.random.Generator(fresh)
    return copy.deepcopy(value)


TRANSCRIPT = "llm_calls.jsonl"
MODEL = "model.zip"
HISTORY = "history.json"
LOCK = ".lock"
"""The lock file in a run directory: held (``flock``) while a run writes there; its presence alone means nothing."""

MISSING = "is missing"
"""Why a file could not be read, when it does not exist."""

_MAX_DATA_BYTES = 256 * 2**20
"""A model zip's ``data`` larger than this is not read (a history of that size is not one R2PO wrote)."""


class RunDirectoryError(ValueError):
    """A run directory, or its ``model.zip``, that cannot be used as it is: the message names the file and the way out."""


class RunDirectoryInUseError(RunDirectoryError):
    """Another run (another process, or another model in this process) holds the run directory's lock."""


class _Read(NamedTuple):
    """The history entries read from a file, or ``None`` and why not (``problem``: ``"is empty"``, ...)."""

    entries: list[dict[str, Any]] | None
    problem: str | None = None


def _history_from_json(data: bytes) -> _Read:
    """The history entries of a JSON document (``history.json``, or a model zip's ``data["history"]``)."""
    if not data.strip():
        return _Read(None, "is empty")
    try:
        value = json.loads(data)
    except UnicodeDecodeError:
        return _Read(None, "is not UTF-8 text")
    except (ValueError, RecursionError) as error:  # JSONDecodeError is a ValueError
        where = f": {error.msg} at line {error.lineno} column {error.colno}" if isinstance(error, json.JSONDecodeError) else ""
        return _Read(None, f"is not valid JSON (cut short or damaged{where})")
    return _history_entries(value)


def _history_entries(value: Any) -> _Read:
    if isinstance(value, list) and all(isinstance(entry, dict) for entry in value):
        return _Read(value)
    return _Read(None, f"is not a list of history entries (it holds {_kind(value)})")


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list of " + ", ".join(sorted({type(item).__name__ for item in value}))
    return f"a JSON {type(value).__name__}" if value is not None else "null"


def _special(path: Path) -> str | None:
    """Why ``path`` is not a file to read (a folder, a pipe that would block the reader, ...); ``None``: it is one."""
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists() and not path.is_file():
        return "is not a regular file (a pipe, a socket or a device)"
    return None


def _read_history_file(path: Path) -> _Read:
    """The entries of a ``history.json``, or why it has none."""
    if (special := _special(path)) is not None:
        return _Read(None, special)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return _Read(None, "is a link to a file that does not exist" if path.is_symlink() else MISSING)
    except OSError as error:
        return _Read(None, f"cannot be read ({error.strerror or error})")
    return _history_from_json(data)


def _zip_data(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The ``data`` document of an SB3 model zip (read as JSON, nothing unpickled), or why it cannot be read."""
    if (special := _special(path)) is not None:
        return None, special
    try:
        with zipfile.ZipFile(path) as archive:
            if "data" not in archive.namelist():
                return None, "holds no 'data' (it is not a model saved by Stable-Baselines3)"
            if archive.getinfo("data").file_size > _MAX_DATA_BYTES:
                return None, f"holds a 'data' of {archive.getinfo('data').file_size} bytes (not one R2PO writes)"
            raw = archive.read("data")
    except FileNotFoundError:
        return None, "is a link to a file that does not exist" if path.is_symlink() else MISSING
    except Exception as error:  # a damaged zip raises many kinds (BadZipFile, zlib.error, EOFError, OSError, ...)
        return None, f"cannot be read as a zip ({type(error).__name__}: {error}; damaged or cut short)"
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, "holds a 'data' that is not JSON (damaged)"
    if not isinstance(data, dict):
        return None, "holds a 'data' that is not a JSON object (damaged)"
    return data, None


def _read_zip_history(path: Path) -> _Read:
    """The history saved in a model zip (its ``data``, read as JSON: nothing is unpickled), or why it has none."""
    data, problem = _zip_data(path)
    if data is None:
        return _Read(None, problem)
    if "history" not in data:
        return _Read(None, "holds no history (it is not a model saved by R2PO)")
    read = _history_entries(data["history"])
    return read if read.entries is not None else _Read(None, f"holds a history that {read.problem}")


def _continues(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether the history ``ours`` starts with ``theirs`` (compared as JSON text, so a NaN equals a NaN); an empty
    ``ours`` continues only an empty ``theirs``."""
    if not ours:
        return not theirs
    if len(ours) < len(theirs):
        return False
    return [json.dumps(e, sort_keys=True) for e in ours[: len(theirs)]] == [json.dumps(e, sort_keys=True) for e in theirs]


def _entries(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"


def _is_run_directory(directory: Path) -> bool:
    """Whether ``directory`` holds a run's files besides its model (a ``history.json`` or an LLM transcript)."""
    return any((directory / name).exists() or (directory / name).is_symlink() for name in (HISTORY, TRANSCRIPT))


def _zip_path(path: str | os.PathLike[str]) -> Path:
    """The file ``R2PO.load(path)`` reads: ``path``, or ``path + ".zip"`` when only that exists (as SB3 does)."""
    given = Path(path)
    with_suffix = Path(f"{given}.zip")
    return with_suffix if not given.exists() and with_suffix.is_file() else given


def check_model_file(path: str | os.PathLike[str]) -> Path:
    """
    Check that ``path`` (given to ``R2PO.load``) is a readable model zip, before SB3 reads it: a missing or damaged
    file gets an error naming it and saying how to recover, instead of SB3's ``BadZipFile`` or ``FileNotFoundError``
    of ``model.zip.zip``. Every member's checksum is checked; nothing is unpickled.

    :param path: The path given to ``load`` (``".zip"`` is appended when only that file exists, as SB3 does).
    :return: The file that SB3 will read.
    :raises FileNotFoundError: when the file does not exist.
    :raises RunDirectoryError: when it is not a readable model zip.
    """
    target = _zip_path(path)
    directory = target.parent
    in_run = target.name == MODEL and _is_run_directory(directory)
    if not target.exists():
        detail = ""
        if in_run:
            detail = (
                f": the run in {str(directory)!r} has lost its {MODEL}, and a run resumes only from it. Restore it from "
                f"a copy to resume that run; {_history_note(directory)}"
            )
        raise FileNotFoundError(f"{str(target)!r} does not exist{detail}")
    problem = _read_model(target).problem
    if problem is None:
        return target
    if in_run:
        raise RunDirectoryError(
            f"{str(target)!r} cannot be loaded: it {problem}. It is the model of the run in {str(directory)!r}, which "
            f"resumes only from it: restore it from a copy to resume the run; {_history_note(directory)}"
        )
    raise RunDirectoryError(f"{str(target)!r} cannot be loaded: it {problem}. Restore it from a copy.")


def _read_model(target: Path) -> _Read:
    """The history of a model zip whose every member passes its checksum, or why it cannot be loaded."""
    problem = _zip_problem(target)
    return _Read(None, problem) if problem is not None else _read_zip_history(target)


def _zip_problem(target: Path) -> str | None:
    """Why ``target`` is not a readable model zip (``None``: it is one)."""
    if not target.exists():
        return "is a link to a file that does not exist" if target.is_symlink() else MISSING
    if (special := _special(target)) is not None:
        return special
    try:
        with zipfile.ZipFile(target) as archive:
            bad = archive.testzip()  # reads every member, checking its CRC
    except Exception as error:  # a damaged zip raises many kinds (BadZipFile, zlib.error, EOFError, OSError, ...)
        return f"is not a readable zip ({type(error).__name__}: {error}; damaged or cut short)"
    return None if bad is None else f"is damaged (its member {bad!r} fails its checksum)"


def _history_note(directory: Path) -> str:
    """What the run's ``history.json`` still offers, and how to start a new run instead."""
    history = _read_history_file(directory / HISTORY)
    kept = (
        f"{str(directory / HISTORY)!r} keeps its {_entries(len(history.entries))} for the record. " if history.entries else ""
    )
    return (
        f"{kept}To start a new run instead, give it another checkpoint_dir (or move {str(directory)!r} away first to "
        "use that name again)."
    )


def loaded_checkpoint_dir(path: Any, saved: str | None) -> str | None:
    """
    The ``checkpoint_dir`` of a model loaded from ``path`` whose zip saved ``saved``: the directory the zip lies in
    when it is a run directory's ``model.zip`` (next to the run's ``history.json`` or ``llm_calls.jsonl``), so that a
    run directory copied, moved or renamed, and resumed from there, writes into itself and not into the directory the
    run was started in; otherwise (a zip saved elsewhere, a file object, no ``checkpoint_dir``) ``saved``.

    :param path: What was given to ``R2PO.load``: a path (``".zip"`` appended when only that exists, as SB3 does) or a
        file object.
    :param saved: The ``checkpoint_dir`` saved in the zip.
    :return: The directory the loaded model's run writes into (``saved`` itself, as spelled, when it is that one).
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
    """
    The snapshot of the model's :data:`COMMITTED_STATE` at its last history entry, and its run directory.

    The run directory is the model's ``checkpoint_dir`` (``None``: no files are written), given to :meth:`open`, which
    locks it; :meth:`close` unlocks it, :meth:`acquire` locks it again.
    """

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
        """Remember ``values`` (deep copies) as the state of the history's first ``history_length`` entries."""
        self._values = {name: _deep_copy(value) for name, value in values.items()}
        self._history_length = history_length

    def committed(self) -> dict[str, Any]:
        """The snapshot's values (copies: the snapshot stays intact for the next save or roll-back)."""
        return {name: _deep_copy(value) for name, value in self._values.items()}

    def saved_history(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entries of ``history`` the snapshot covers (an entry appended and not yet committed is left out)."""
        return history if self._history_length is None else history[: self._history_length]

    def open(
        self, backend: ChatBackend, directory: str | os.PathLike[str] | None, history: list[dict[str, Any]]
    ) -> ChatBackend:
        """
        With a run directory: lock it (see :meth:`acquire`), check that it is this run's (see :meth:`check_directory`)
        and record every call to its transcript. The lock is held until :meth:`close`.

        :param backend: The run's LLM backend.
        :param directory: The run directory (created when missing); ``None``: no files, no lock.
        :param history: The model's history (its own entries, or those of the checkpoint it was loaded from).
        :return: The backend to ask: ``backend`` recorded to the transcript, or ``backend`` itself without a directory.
        :raises RunDirectoryInUseError: when another run holds the directory.
        :raises RunDirectoryError: when it holds another run, or files that cannot be used (the message says why).
        """
        self.directory = None if directory is None else Path(directory)
        if self.directory is None:
            self.close()
            self.transcript = None
            return backend
        self._lock_directory()
        try:
            self.check_directory(history)
            self.transcript = self._open_transcript(backend)
        except BaseException:
            self.close()
            raise
        return self.transcript

    def acquire(self, history: list[dict[str, Any]]) -> None:
        """
        Lock the run directory of :meth:`open` again (after :meth:`close`: the next ``learn()``), check it again and
        count its transcript's calls again (another process may have used the directory meanwhile). Nothing happens
        without a directory, or while the lock is held.

        :param history: The model's history.
        :raises RunDirectoryInUseError: when another run holds the directory.
        :raises RunDirectoryError: when it holds another run now, or damaged files.
        """
        if self.directory is None or self.locked:
            return
        self._lock_directory()
        try:
            self.check_directory(history)
            if self.transcript is not None:
                self._refresh_transcript()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Unlock the run directory (another run may use it from now on); nothing happens when it is not locked."""
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
                f"in this one, holds {str(lock_path)!r}): two runs writing one directory would overwrite each other's "
                f"{MODEL} and mix their LLM calls in {TRANSCRIPT}. Wait for that run's learn() to end (or stop it) and "
                "try again, or give this run another checkpoint_dir. (The lock ends with its run, also by a crash: "
                "deleting the file does not unlock it.)"
            ) from None
        except OSError as error:
            raise RunDirectoryError(
                f"checkpoint_dir {str(self.directory)!r} cannot be used as a run directory ({error}): it must be a "
                f"folder this process can create and write to, whose {LOCK} (when there is one) is a plain file; "
                "fix that, or give this run another checkpoint_dir"
            ) from error
        self._lock = lock

    def _open_transcript(self, backend: ChatBackend) -> RecordingBackend:
        assert self.directory is not None
        path = self.directory / TRANSCRIPT
        if (special := _special(path)) is not None:
            raise self._transcript_error(f"it {special}")
        try:
            return RecordingBackend(backend, path)
        except (LLMBackendError, OSError) as error:
            raise self._transcript_error(str(error)) from error

    def _refresh_transcript(self) -> None:
        assert self.transcript is not None
        if (special := _special(self.transcript.path)) is not None:
            raise self._transcript_error(f"it {special}")
        try:
            self.transcript.refresh()
        except (LLMBackendError, OSError) as error:
            raise self._transcript_error(str(error)) from error

    def _transcript_error(self, why: str) -> RunDirectoryError:
        assert self.directory is not None
        path = self.directory / TRANSCRIPT
        return RunDirectoryError(
            f"{str(path)!r}, the run's transcript of LLM calls, cannot be used ({why}). The run itself is in {MODEL}: "
            "restore the transcript from a copy, or move it aside to record the rest of the run in a new one "
            "(a replay of the whole run then needs the calls of both)"
        )

    def check_directory(self, history: list[dict[str, Any]]) -> None:
        """
        Refuse a run directory that holds another run (a history that ``history`` does not start with) or files that
        cannot be used; rewrite a damaged ``history.json`` from a ``model.zip`` that ``history`` continues (the old
        file is kept as ``history.json.damaged``, with a warning).

        :param history: The model's history.
        :raises RunDirectoryError: naming the file, and saying how to go on.
        """
        assert self.directory is not None
        model_zip = self.directory / MODEL
        ours = json.loads(json.dumps(history))
        theirs = _read_history_file(self.directory / HISTORY)
        if not (model_zip.exists() or model_zip.is_symlink()):
            self._check_without_model(ours, theirs)
            return
        saved = _read_model(model_zip)  # the authority: written before history.json
        if saved.entries is not None:
            if not _continues(ours, saved.entries):
                raise RunDirectoryError(self._another_run(saved, theirs))
            if not (theirs.entries and _continues(saved.entries, theirs.entries)):
                self._restore_history(saved.entries, theirs)  # damaged, or not model.zip's
            return  # this run's own directory (its history.json may be an entry behind, cut between the two writes)
        if theirs.entries and _continues(ours, theirs.entries):
            self._set_aside_model(saved)  # this run's directory, its model.zip damaged: the next entry writes one
            return
        raise RunDirectoryError(self._another_run(saved, theirs))

    def _set_aside_model(self, saved: _Read) -> None:
        assert self.directory is not None
        model_zip = self.directory / MODEL
        aside = set_aside(model_zip, "damaged")
        warnings.warn(
            f"{str(model_zip)!r} {saved.problem}; its {HISTORY} shows the directory is this run's: the damaged file is "
            f"kept as {str(aside)!r}, and this run's next entry writes a new {MODEL}",
            RuntimeWarning,
            stacklevel=4,
        )

    def _check_without_model(self, ours: list[dict[str, Any]], theirs: _Read) -> None:
        """A directory without ``model.zip``: usable unless its ``history.json`` holds another run or is damaged."""
        assert self.directory is not None
        if theirs.problem == MISSING or (theirs.entries is not None and _continues(ours, theirs.entries)):
            return  # a new directory, a transcript of a run cut before its first entry, or this run's own history
        if theirs.entries == []:
            return  # an empty history: nothing to lose
        history_file, model_zip = str(self.directory / HISTORY), str(self.directory / MODEL)
        held = (
            f"holds {history_file!r} ({_entries(len(theirs.entries))} of another run)"
            if theirs.entries is not None
            else f"holds {history_file!r}, which {theirs.problem},"
        )
        raise RunDirectoryError(
            f"checkpoint_dir {str(self.directory)!r} {held} but no {model_zip!r}: a run resumes only from its "
            f"{MODEL}, and this run would overwrite that history. Move {history_file!r} away to use this directory "
            "(or restore model.zip from a copy to resume that run), or give this run another checkpoint_dir"
        )

    def _restore_history(self, saved: list[dict[str, Any]], theirs: _Read) -> None:
        """Rewrite ``history.json`` from ``model.zip`` (which this run continues), keeping a damaged one aside."""
        assert self.directory is not None
        history_file, model_zip = self.directory / HISTORY, self.directory / MODEL
        if theirs.problem == MISSING:
            why, kept = MISSING, ""
        else:
            if theirs.problem is not None:
                why = theirs.problem
            elif theirs.entries:
                why = f"holds {_entries(len(theirs.entries))} that do not match {MODEL}'s"
            else:
                why = "holds an empty history"
            kept = f"; the old file is kept as {str(set_aside(history_file, 'damaged'))!r}"
        atomic_write(history_file, json.dumps(saved, indent=1).encode())
        warnings.warn(
            f"{str(history_file)!r} {why}: rewritten from {str(model_zip)!r}, which holds this run's "
            f"{_entries(len(saved))}{kept}",
            RuntimeWarning,
            stacklevel=4,
        )

    def _another_run(self, saved: _Read, theirs: _Read) -> str:
        """Why the directory's ``model.zip`` cannot be used by this run, and what to do instead."""
        assert self.directory is not None
        model_zip, history_file = str(self.directory / MODEL), str(self.directory / HISTORY)
        if saved.entries is not None:  # a loadable model of another run: this run did not come from it
            damaged = f"; its {history_file!r} {theirs.problem}" if theirs.problem not in (None, MISSING) else ""
            return (
                f"checkpoint_dir {str(self.directory)!r} already holds another run ({model_zip}: "
                f"{_entries(len(saved.entries))}{damaged}); resume it with R2PO.load({model_zip!r}, env=..., llm=...)"
                ".learn(..., reset_num_timesteps=False), or give this run another directory"
            )
        if theirs.entries:
            kept = f"; {history_file!r} keeps its {_entries(len(theirs.entries))} for the record"
        else:
            kept = f"; its {history_file!r} {theirs.problem} too" if theirs.problem else ""
        return (
            f"checkpoint_dir {str(self.directory)!r} holds a run whose {model_zip!r} {saved.problem}: that run cannot be "
            f"resumed (restore model.zip from a copy to resume it){kept}. To start this run there, move that directory "
            "away first; or give this run another checkpoint_dir"
        )

    @property
    def transcript_calls(self) -> int | None:
        """Calls in the run directory's transcript (``None``: no transcript)."""
        return None if self.transcript is None else self.transcript.recorded

    def rewind(self, calls: int) -> None:
        """Set aside the transcript's calls after the first ``calls``: a run resumed here asks them again."""
        if self.transcript is not None:
            self.transcript.rewind(calls)

    def write(
        self, directory: str | os.PathLike[str], save: Callable[[io.BytesIO], None], history: list[dict[str, Any]]
    ) -> None:
        """Write ``model.zip`` (by ``save``, the model's) and ``history.json`` to ``directory`` atomically."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        model_zip = io.BytesIO()
        save(model_zip)
        atomic_write(target / MODEL, model_zip.getvalue())
        atomic_write(target / HISTORY, json.dumps(history, indent=1).encode())
