"""A run's records (``R2PO.history``'s dicts, keyed by :meth:`HistoryEntry.to_dict`), its state as of the last entry
(:class:`RunState`) and its run directory (the Usage page's "Runs that survive crashes")."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from filelock import FileLock, Timeout

from sb3_r2po.common.files import atomic_write
from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.common.rollouts import RolloutResult, finite_mean, finite_std, success_tolerance
from sb3_r2po.llm.base import ChatBackend, LLMBackendError, Message
from sb3_r2po.llm.recording import RecordingBackend
from sb3_r2po.r2po.arguments import R2POSettings
from sb3_r2po.r2po.policies import CodePolicy, CompactPolicy

COMMITTED_STATE = tuple(
    "num_timesteps _episode_num _n_evaluations _rng llm_stats iteration ep_info_buffer ep_success_buffer "
    "_transcript_calls".split()
)
"""The model's attributes an iteration changes before its history entry is written (saved as of the last entry)."""


def evaluation_seed(seed: int, evaluation: int) -> int:
    """The env seed of a run's evaluation number ``evaluation`` (from 0; sub-environment ``i`` adds ``i``): 31 bits of
    the ``evaluation``-th child of ``numpy.random.SeedSequence(seed)``."""
    return int(np.random.SeedSequence(seed, spawn_key=(evaluation,)).generate_state(1)[0] >> 1)


Record = dict[str, Any]  # a history entry, as R2PO.history stores it

TRANSCRIPT = "llm_calls.jsonl"
MODEL = "model.zip"
HISTORY = "history.json"
LOCK = ".lock"

_MAX_DATA_BYTES = 256 * 2**20  # a model zip's larger ``data`` is not read (not a history R2PO wrote)


class RunDirectoryError(ValueError):
    """A run directory, or its ``model.zip``, that cannot be used as it is: the message names the file and the way out."""


class RunDirectoryInUseError(RunDirectoryError):
    """Another run (another process, or another model in this process) holds the run directory's lock."""


def _special(path: Path) -> str | None:
    """Why ``path`` is not a file to read (a folder, a pipe, ...); ``None``: it is one."""
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists() and not path.is_file():
        return "is not a regular file (a pipe, a socket or a device)"
    return None


def _read_model(path: Path) -> tuple[list[Record] | None, str]:
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


def _is_run_directory(directory: Path) -> bool:
    return os.path.lexists(directory / HISTORY) or os.path.lexists(directory / TRANSCRIPT)


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
    """The file SB3 will read for ``R2PO.load(path)`` (``path``, or ``path + ".zip"`` when only that exists), checked to
    be a readable model zip: instead of SB3's ``BadZipFile``, the error names the file and the way to recover.

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
    """The ``checkpoint_dir`` of a model loaded from ``path`` whose zip saved ``saved``: the folder of a run directory's
    ``model.zip`` (a copied or moved run directory resumes into itself, with a warning), otherwise ``saved``."""
    if saved is None or not isinstance(path, (str, os.PathLike)):
        return saved
    target = _zip_path(path)
    here = target.parent
    if target.name != MODEL or not target.is_file() or not _is_run_directory(here) or _same_directory(here, Path(saved)):
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
    """A model's :data:`COMMITTED_STATE` at its last history entry, and its run directory (``None``: no files)."""

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
        self._values, self._history_length = copy.deepcopy(values), history_length

    def committed(self) -> dict[str, Any]:
        """Copies of the snapshot's values."""
        return copy.deepcopy(self._values)

    def saved_history(self, history: list[Record]) -> list[Record]:
        """The entries of ``history`` the snapshot covers (an entry appended and not yet committed is left out)."""
        return history if self._history_length is None else history[: self._history_length]

    def open(self, backend: ChatBackend, directory: str | os.PathLike[str] | None, history: list[Record]) -> ChatBackend:
        """With a run directory (created when missing; ``None``: no files): lock it until :meth:`close`, check it against
        ``history`` and return ``backend`` recording every call to its transcript.

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

    def acquire(self, history: list[Record]) -> None:
        """Lock, check and count the run directory of :meth:`open` again (the next ``learn()``), unless none or locked."""
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

    def _enter(self, history: list[Record], backend: ChatBackend | None) -> None:
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

    def check_directory(self, history: list[Record]) -> None:
        """Raise a :class:`RunDirectoryError` when the ``model.zip`` cannot be loaded (also missing beside a
        ``history.json``) or holds a run ``history`` does not continue, or ``history.json`` is a folder."""
        assert self.directory is not None
        model_zip = self.directory / MODEL
        if not os.path.lexists(model_zip) and not os.path.lexists(self.directory / HISTORY):
            return  # a new directory, or the transcript of a run cut before its first entry
        saved, problem = _read_model(model_zip)
        if saved is None:
            raise RunDirectoryError(_lost_run(model_zip, problem))
        if json.dumps(history[: len(saved)], sort_keys=True) != json.dumps(saved, sort_keys=True):  # as text: NaN == NaN
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

    def write(self, directory: str | os.PathLike[str], save: Callable[[io.BytesIO], None], history: list[Record]) -> None:
        """Write ``model.zip`` (by ``save``: the state and ``history``), then its export ``history.json``, atomically."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        model_zip = io.BytesIO()
        save(model_zip)
        atomic_write(target / MODEL, model_zip.getvalue())
        atomic_write(target / HISTORY, json.dumps(history, indent=1).encode())


Kind = Literal["warmup", "given", "search", "critic", "fallback"]
"""Where a history entry's vector came from: a random warm-up draw, the user (``set_parameters()`` before ``learn()``),
a Search or Critic reply, or the fallback."""

Role = Literal["search", "critic"]

RevisionStatus = Literal["none", "skipped", "failed", "declined", "interrupted", "kept", "rejected"]
"""What became of an iteration's second candidate: ``none`` (no second call), ``skipped`` (no budget left, or a callback
stopped training), ``failed`` (no usable reply), ``declined`` (unchanged, with ``skip_unchanged_revisions``),
``interrupted`` (a callback stopped its evaluation), ``kept`` / ``rejected`` (the selection's verdict)."""


class Clock(NamedTuple):
    """Where a run is: completed iterations, episodes run, and episodes its budget still pays for (``inf``: none)."""

    iteration: int
    episodes_used: int
    episodes_left: float


def floats(values: Any) -> list[float]:
    """A vector as a list of Python floats (what the history stores)."""
    return [float(v) for v in values]


@dataclass
class Candidate:
    """A vector to evaluate (its kind, why earlier replies were unusable, what the parser adjusted, the accepted reply)
    and its evaluation once it has one (``None``: not yet, or a callback cut it)."""

    kind: Kind
    params: np.ndarray
    failures: list[str] = field(default_factory=list)
    adjusted: list[str] = field(default_factory=list)
    reply: str | None = None
    result: RolloutResult | None = None

    @classmethod
    def answered(cls, kind: Kind, params: np.ndarray, answer: Answer) -> Candidate:
        """The candidate an LLM answer gave (``params``: its vector, or the fallback's when it gave none)."""
        reply = answer.calls[-1].reply if answer.params is not None and answer.calls else None
        return cls(kind, params, answer.failures, list(answer.notes), reply)

    @property
    def mean_return(self) -> float:
        assert self.result is not None, "a candidate's mean return is known once it is evaluated"
        return finite_mean(self.result.returns)

    def to_dict(self) -> dict[str, Any]:
        """The history's ``search`` field: the iteration's first candidate."""
        params, mean = floats(self.params), self.mean_return
        return {"kind": self.kind, "params": params, "mean_return": mean, "failures": self.failures, "adjusted": self.adjusted}


@dataclass
class Revision:
    """An iteration's second step: the role asked (``None``: none), its status, its candidate (``None``: no usable reply),
    whether it equals the first, and whether its record lists its own episodes (not critic_only's: the entry's)."""

    role: Role | None = None
    status: RevisionStatus = "none"
    candidate: Candidate | None = None
    unchanged: bool | None = None
    failures: list[str] = field(default_factory=list)
    own_episodes: bool = True

    def decide(self, incumbent: float, keep_best: bool) -> bool:
        """Set ``status`` from the evaluation: kept when it scores at least ``incumbent`` (or without keep-best)."""
        assert self.candidate is not None
        if self.candidate.result is None:
            self.status = "interrupted"
        elif self.candidate.mean_return >= incumbent or not keep_best:  # ties go to the revision
            self.status = "kept"
        else:
            self.status = "rejected"
        return self.status == "kept"

    def to_dict(self) -> dict[str, Any]:
        """The history's ``revision`` field."""
        candidate = self.candidate
        result = None if candidate is None else candidate.result
        record: dict[str, Any] = {
            "role": self.role,
            "status": self.status,
            "params": None if candidate is None else floats(candidate.params),
            "mean_return": None if result is None else finite_mean(result.returns),
            "failures": self.failures if candidate is None else candidate.failures,
            "adjusted": [] if candidate is None else candidate.adjusted,
        }
        if self.unchanged is not None:
            record["unchanged"] = self.unchanged
        if result is not None and self.own_episodes:
            record.update(n_episodes=len(result.episodes), returns=floats(result.returns))
        return record


@dataclass(frozen=True)
class DiscardedAttempt:
    """An attempt of an iteration that an unusable reply discarded (``on_unusable_reply="rerun"``)."""

    role: Role
    reason: str
    episodes: int


@dataclass
class HistoryEntry:
    """One history entry: the kept candidate (a warm-up draw, a given vector or an iteration's), what later prompts show
    of its episodes, the iteration's two steps (``None``: warm-up), diagnostics, discarded attempts, episodes and steps."""

    iteration: int
    kept: Candidate
    shown: dict[str, Any] = field(default_factory=dict)
    search: Candidate | None = None
    revision: Revision | None = None
    diagnostics: dict[str, Any] | None = None
    discarded: tuple[DiscardedAttempt, ...] = ()
    episodes: int = 0
    timesteps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The entry as ``R2PO.history`` stores it (see the Usage page of the documentation)."""
        result = self.kept.result
        assert result is not None, "only evaluated candidates enter the history"
        returns = result.returns
        record: dict[str, Any] = {
            "iteration": self.iteration,
            "kind": self.kept.kind,
            "params": floats(self.kept.params),
            "mean_return": finite_mean(returns),
            "std_return": finite_std(returns),
            "min_return": float(returns.min()),
            "max_return": float(returns.max()),
            "mean_length": float(np.mean([ep.length for ep in result.episodes])),
            "n_episodes": len(result.episodes),
            "returns": floats(returns),
            "non_finite_episodes": sum(ep.end == "non-finite" for ep in result.episodes),
            **self.shown,
        }
        if self.revision is not None:  # an iteration, not the warm-up
            record["search"] = None if self.search is None else self.search.to_dict()
            record["revision"] = self.revision.to_dict()
            if self.diagnostics is not None:
                record["diagnostics"] = self.diagnostics
        if self.discarded:
            record["discarded_attempts"] = [dataclasses.asdict(attempt) for attempt in self.discarded]
        record.update(episodes=self.episodes, timesteps=self.timesteps)
        return record


def best_record(history: list[Record]) -> Record | None:
    """The record of the highest mean among non-warm-up records (before any: among the warm-up's); ``None`` if empty."""
    evaluated = [r for r in history if r["kind"] != "warmup"] or history
    return max(evaluated, key=lambda r: r["mean_return"]) if evaluated else None


def place_kept(history: list[Record], settings: R2POSettings, policy: CompactPolicy | CodePolicy) -> np.ndarray | None:
    """Put the kept record's candidate in ``policy`` (promptpo's: the last record, unless ``code_keep_best``; else
    :func:`best_record`; none for an empty history) and return the policy's vector (``None``: code)."""
    last = settings.variant_spec.search == "code" and not settings.code_keep_best
    if (record := history[-1] if last and history else best_record(history)) is not None:
        policy.place(record)
    return policy.get_flat() if isinstance(policy, CompactPolicy) else None


def find(history: list[Record], params: np.ndarray) -> Record | None:
    """The record holding ``params``, if any."""
    return next((r for r in history if np.array_equal(np.asarray(r["params"]), params)), None)


def shown_history(history: list[Record], best_k: int | None, recent: int | None, slack: int = 0) -> list[Record]:
    """The history as prompts show it: all of it, or the best ``best_k`` plus the ``recent`` latest (in history order).
    With ``slack`` > 0 the shown entries grow by appending (a prefix cache reuses them) until there would be more than
    ``best_k + recent + slack``; then they are cut back to the best ``best_k`` plus the ``recent`` latest."""
    if best_k is None and recent is None:
        return history
    n, best_k, recent = len(history), best_k or 0, recent or 0
    ranked = sorted(range(n), key=lambda i: (-history[i]["mean_return"], i))

    def window(end: int) -> list[int]:  # the best best_k and the recent latest of history[:end], in history order
        best = [i for i in ranked if i < end][:best_k]
        return sorted(set(range(max(0, end - recent), end)).union(best))

    if slack == 0:
        return [history[i] for i in window(n)]
    limit, cut = best_k + recent + slack, 0
    kept: list[int] = []
    while len(kept) + n - cut > limit:  # the window is cut back at the entry that would exceed the limit
        cut += limit - len(kept) + 1
        kept = window(cut)
    return [history[i] for i in kept] + history[cut:]


def duplicate_error(history: list[Record], params: np.ndarray) -> str | None:
    """Why a reply repeating a history vector is unusable (with ``reject_duplicates``); ``None`` for a new vector."""
    if (record := find(history, params)) is None:
        return None
    return (
        f"this vector was already evaluated (iteration {record['iteration']}, mean return "
        f"{record['mean_return']:.4g}); propose a vector that is not in the history"
    )


def perturb_best(history: list[Record], space: ParameterSpace, step_size: float, rng: np.random.Generator) -> np.ndarray:
    """A Gaussian perturbation of the best candidate at ``step_size`` that is not in the history (the fallback)."""
    best = best_record(history)
    for _ in range(100):
        params = space.sample(rng) if best is None else space.perturb(np.asarray(best["params"]), step_size, rng)
        if find(history, params) is None:
            return params
    return space.sample(rng)


def reached(history: list[Record], target: float, n_episodes: int) -> bool:
    """Whether a record of at least ``n_episodes`` episodes reached ``target`` in each (to the success tolerance)."""
    floor = target - success_tolerance(target)
    return any(r["n_episodes"] >= n_episodes and r["min_return"] >= floor for r in history)


@dataclass
class LLMCall:
    """One call to the LLM, as logged: its role, the messages sent, the reply, why it is unusable (``None``: usable), its
    latency and the token counts the backend reported (:class:`~sb3_r2po.llm.base.ChatReply`)."""

    role: str
    messages: list[Message]
    reply: str
    error: str | None
    seconds: float
    prompt_tokens: int | None
    completion_tokens: int | None
    prompt_tokens_cached: int | None = None


@dataclass
class Answer:
    """The outcome of :func:`ask_for_params`: the legal vector (``None``: every attempt failed), every call in order and
    the values clipped or rounded in the accepted reply."""

    params: np.ndarray | None
    calls: list[LLMCall] = field(default_factory=list)
    notes: tuple[str, ...] = ()

    @property
    def failures(self) -> list[str]:
        """The reasons of the unusable replies."""
        return [call.error for call in self.calls if call.error is not None]
