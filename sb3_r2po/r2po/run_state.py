"""Crash consistency of a run: the state as of the last history entry, and the run directory that holds it.

An iteration changes counters, random state and LLM statistics before its history entry is written. :class:`RunState`
keeps a copy of those values as of the last entry (a *snapshot*), so that

- a save in the middle of an iteration (a callback, another thread) writes the state of the last entry, and a model
  loaded from it repeats the running iteration instead of charging its episodes twice;
- an exception that cuts an iteration short rolls the model back to the last entry, and the next ``learn()``
  repeats that iteration in full, as a run resumed from its checkpoint would;
- with a ``checkpoint_dir``, every entry writes ``model.zip`` and ``history.json`` atomically, and the transcript of
  LLM calls (``llm_calls.jsonl``) is rewound to the last entry when a run resumes, so that it replays exactly.
"""

from __future__ import annotations

import copy
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sb3_r2po.common.files import atomic_write
from sb3_r2po.llm.base import ChatBackend
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

TRANSCRIPT = "llm_calls.jsonl"
MODEL = "model.zip"
HISTORY = "history.json"


class RunState:
    """
    The snapshot of the model's :data:`COMMITTED_STATE` at its last history entry, and its run directory.

    The run directory is the model's ``checkpoint_dir`` (``None``: no files are written), given to :meth:`open`.
    """

    def __init__(self) -> None:
        self.directory: Path | None = None
        self.transcript: RecordingBackend | None = None
        self._values: dict[str, Any] = {}
        self._history_length: int | None = None

    def snapshot(self, values: dict[str, Any], history_length: int) -> None:
        """Remember ``values`` (deep copies) as the state of the history's first ``history_length`` entries."""
        self._values = {name: copy.deepcopy(value) for name, value in values.items()}
        self._history_length = history_length

    def committed(self) -> dict[str, Any]:
        """The snapshot's values (copies: the snapshot stays intact for the next save or roll-back)."""
        return {name: copy.deepcopy(value) for name, value in self._values.items()}

    def saved_history(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The entries of ``history`` the snapshot covers (an entry appended and not yet committed is left out)."""
        return history if self._history_length is None else history[: self._history_length]

    def open(
        self, backend: ChatBackend, directory: str | os.PathLike[str] | None, history: list[dict[str, Any]]
    ) -> ChatBackend:
        """With a run directory: check that it is this run's (see :meth:`check_directory`) and record every call."""
        self.directory = None if directory is None else Path(directory)
        if self.directory is None:
            self.transcript = None
            return backend
        self.check_directory(history)
        self.transcript = RecordingBackend(backend, self.directory / TRANSCRIPT)
        return self.transcript

    def check_directory(self, history: list[dict[str, Any]]) -> None:
        """Refuse a run directory that holds another run (a history that ``history`` does not start with)."""
        assert self.directory is not None
        saved = self.directory / MODEL
        if not saved.exists():
            return
        history_file = self.directory / HISTORY
        theirs = json.loads(history_file.read_text()) if history_file.exists() else None
        ours = json.loads(json.dumps(history))
        if history and theirs is not None and ours[: len(theirs)] == theirs:
            return  # this run's own directory: resumed, or trained on
        raise ValueError(
            f"checkpoint_dir {str(self.directory)!r} already holds another run ({saved}); resume it with "
            f"R2PO.load({str(saved)!r}, env=..., llm=...).learn(..., reset_num_timesteps=False), "
            "or give this run another directory"
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
