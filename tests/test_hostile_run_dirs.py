"""Hostile run directories (issue 21, class 3): damaged, copied, shared and half-written ``checkpoint_dir``s.

Each corpus below is built here and counted (the figures in docs/reliability.md are :data:`CORPUS`'s sizes):

- ``history.json`` and ``model.zip`` damaged in many ways, alone and together, for a run resuming the directory, a
  new run, and another run's model: no raw ``JSONDecodeError`` or ``BadZipFile``, but a :class:`RunDirectoryError`
  naming the file and the way out (never the step the user just took) that changes nothing; ``model.zip`` is the
  one authority, ``history.json`` an export that is never read back (a damaged one is written anew at the next entry);
- two processes started on one ``checkpoint_dir`` at the same moment, and two models in one process: exactly one runs,
  the other is refused, and the transcript holds one run's calls;
- transcripts cut at every byte of their last record (inside multi-byte characters too), NUL bytes, CRLF line ends,
  damaged middle lines, writes that failed half-way (simulated, and real: a file size limit, as a full disk does);
- run directories copied, moved and renamed, and zips loaded from elsewhere: the resumed run writes into the
  directory it was loaded from, when that is a run directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from filelock import FileLock
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO
from sb3_r2po.common import files
from sb3_r2po.llm.base import LLMBackendError
from sb3_r2po.llm.recording import RecordingBackend, ReplayBackend, read_records
from sb3_r2po.r2po.run_state import (
    HISTORY,
    LOCK,
    MODEL,
    TRANSCRIPT,
    RunDirectoryError,
    RunDirectoryInUseError,
    RunState,
    check_model_file,
    loaded_checkpoint_dir,
)

RUN = dict(n_eval_episodes=2, warmup_episodes=2, seed=3, max_episodes=2 + 2 * 2 * 3)
"""The runs damaged here, on CartPole: 2 warm-up episodes, then three iterations of K = 2."""

CORPUS: dict[str, int] = {}
"""Cases tried per fault kind (filled as the corpora are defined; printed by ``test_corpus_sizes``)."""


class FailsAt:
    """Answers from a recording, and fails at call ``k`` (an LLM outage that cuts the run short)."""

    def __init__(self, transcript: Path, k: int) -> None:
        self.replay, self.k, self.calls = ReplayBackend(transcript), k, 0

    def chat(self, messages, *, temperature: float = 0.0):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == self.k:
            raise LLMBackendError("server down")
        return self.replay.chat(messages, temperature=temperature)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, make_r2po) -> dict[str, Path]:
    """Run directories to copy and damage: ``reference`` (a whole run), ``other`` (another seed's), and ``cut`` (the
    reference run cut short by an LLM outage at its 5th call: the files of its last entry, and an orphan call)."""
    base = tmp_path_factory.mktemp("runs")
    make_r2po(llm="example", checkpoint_dir=str(base / "reference"), **RUN).learn(UNTIL_BUDGET)
    make_r2po(llm="example", checkpoint_dir=str(base / "other"), **{**RUN, "seed": 4}).learn(UNTIL_BUDGET)
    cut = make_r2po(llm=FailsAt(base / "reference" / TRANSCRIPT, 5), checkpoint_dir=str(base / "cut"), **RUN)
    with pytest.raises(LLMBackendError, match="server down"):
        cut.learn(UNTIL_BUDGET)
    assert 0 < len(cut.history) < len(json.loads((base / "reference" / HISTORY).read_bytes()))
    return {name: base / name for name in ("reference", "other", "cut")}


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(LOCK))
    return target


def zip_history(path: Path) -> list[dict[str, Any]]:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("data"))["history"]


def contents(directory: Path) -> dict[str, bytes]:
    """Every file of a directory (the lock file aside), by name; a link by its target; a folder as such."""
    found: dict[str, bytes] = {}
    for path in sorted(directory.iterdir()):
        if path.name == LOCK:
            continue
        if path.is_symlink():
            found[path.name] = b"link to " + os.readlink(path).encode()
        elif path.is_dir():
            found[path.name] = b"a folder"
        elif not path.is_file():
            found[path.name] = b"a special file"
        else:
            found[path.name] = path.read_bytes()
    return found


def assert_nothing_lost(before: dict[str, bytes], directory: Path) -> None:
    """Every file the directory held is still there, under its name or set aside (``<name>.damaged*``)."""
    after = contents(directory)
    for name, data in before.items():
        kept = [other for other, value in after.items() if other.split(".damaged")[0] == name and value == data]
        assert kept, f"{name} lost: {sorted(after)}"


def backend(messages: list[dict[str, str]]) -> str:
    return "params: [0]"


def assert_unlocked(directory: Path) -> None:
    """Nothing holds the directory's lock (a refused open leaves none behind)."""
    lock = FileLock(str(directory / LOCK), thread_local=False)
    lock.acquire(timeout=0)
    lock.release()


@contextlib.contextmanager
def no_warning():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def warnings_matching(match: str | None):  # type: ignore[no-untyped-def]
    """``pytest.warns(RuntimeWarning, match=...)``, or (``None``) no warning at all."""
    return no_warning() if match is None else pytest.warns(RuntimeWarning, match=match)


# ---------------------------------------------------------------------------------------------------------------------
# history.json and model.zip


def _write(data: bytes) -> Callable[[Path, Path], None]:
    return lambda path, other: path.write_bytes(data)


def _transform(change: Callable[[bytes], bytes]) -> Callable[[Path, Path], None]:
    return lambda path, other: path.write_bytes(change(path.read_bytes()))


def _replace(make: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    def fault(path: Path, other: Path) -> None:
        path.unlink()
        make(path)

    return fault


def _common_faults() -> dict[str, Callable[[Path, Path], None]]:
    """Damage that befalls any file: deleted, emptied, cut short, zeroed, overwritten, replaced by a folder or a link."""
    garbage = random.Random(0).randbytes(3000)
    return {
        "deleted": lambda path, other: path.unlink(),
        "empty": _write(b""),
        "blank": _write(b" \n\t\r\n"),
        **{f"cut at {k}/16": _transform(lambda data, k=k: data[: len(data) * k // 16]) for k in range(1, 16)},
        "cut to its first byte": _transform(lambda data: data[:1]),
        "last byte cut": _transform(lambda data: data[:-1]),
        "NUL bytes": _transform(lambda data: bytes(len(data))),
        "a NUL tail": _transform(lambda data: data[: len(data) // 2] + bytes(len(data) - len(data) // 2)),
        "random bytes": _write(garbage),
        "a text": _write("not a run file — ça alors\n".encode()),
        "a folder": _replace(lambda path: path.mkdir()),
        "a dangling link": _replace(lambda path: path.symlink_to(path.parent / "nowhere")),
        "a link to a folder": _replace(lambda path: path.symlink_to(path.parent.parent, target_is_directory=True)),
        "a named pipe": _replace(lambda path: os.mkfifo(path)),  # a reader would wait for a writer forever
    }


def _rewrite_json(change: Callable[[list[Any]], Any]) -> Callable[[Path, Path], None]:
    return _transform(lambda data: json.dumps(change(json.loads(data)), indent=1).encode())


HISTORY_FAULTS: dict[str, Callable[[Path, Path], None]] = {
    **_common_faults(),
    "invalid UTF-8": _transform(lambda data: data[:40] + b"\xff\xfe\xc3" + data[40:]),
    "UTF-8 cut inside a character": _write('[{"note": "é'.encode()[:-1]),
    "JSON null": _write(b"null"),
    "a number": _write(b"42"),
    "a string": _write(b'"history"'),
    "an object": _transform(lambda data: b'{"history": ' + data + b"}"),
    "a list of numbers": _write(b"[1, 2, 3]"),
    "a list with a non-entry": _rewrite_json(lambda entries: [*entries, 5]),
    "nested 100000 deep": _write(b"[" * 100_000),
    "an empty history": _write(b"[]"),
    "another run's history": lambda path, other: shutil.copyfile(other / HISTORY, path),
    "an entry more": _rewrite_json(lambda entries: [*entries, entries[-1]]),
    "an entry changed": _rewrite_json(lambda entries: [*entries[:-1], {**entries[-1], "mean_return": -1.0}]),
}
"""Ways ``history.json`` is damaged (besides ``an entry short``: the state a crash between the two writes leaves)."""
CORPUS["history.json faults x 3 runs (resuming, new, another run's model)"] = 3 * (len(HISTORY_FAULTS) + 1)


def _zip_with(members: dict[str, bytes]) -> Callable[[Path, Path], None]:
    def fault(path: Path, other: Path) -> None:
        with zipfile.ZipFile(path) as archive:
            kept = {name: archive.read(name) for name in archive.namelist()}
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in {**kept, **members}.items():
                if data:
                    archive.writestr(name, data)

    return fault


def _data_with(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path, Path], None]:
    def fault(path: Path, other: Path) -> None:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
        _zip_with({"data": json.dumps(change(data)).encode()})(path, other)

    return fault


def _flip_in(member: str) -> Callable[[Path, Path], None]:
    """Flip a byte inside a member's stored bytes (its checksum no longer matches)."""

    def fault(path: Path, other: Path) -> None:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(member)
        data = bytearray(path.read_bytes())
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        data[start + info.compress_size // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    return fault


MODEL_FAULTS: dict[str, Callable[[Path, Path], None]] = {
    **_common_faults(),
    "a flipped byte in its data": _flip_in("data"),
    "a flipped byte in its policy": _flip_in("policy.pth"),
    "no data": _zip_with({"data": b""}),
    "data not JSON": _zip_with({"data": b"{not json"}),
    "data a list": _zip_with({"data": b"[]"}),
    "data without a history": _data_with(lambda data: {k: v for k, v in data.items() if k != "history"}),
    "a pickled history": _data_with(lambda data: {**data, "history": {":type:": "<class 'list'>", ":serialized:": "gAR="}}),
    "a history of numbers": _data_with(lambda data: {**data, "history": [1, 2]}),
}
"""Ways ``model.zip`` is damaged."""
CORPUS["model.zip faults x 3 checks (new run, resuming run, R2PO.load's check)"] = 3 * len(MODEL_FAULTS)

BOTH = ["deleted", "empty", "cut at 8/16", "random bytes", "a folder"]
"""The faults of both files together (every pair)."""
CORPUS["history.json and model.zip damaged together x 2 runs"] = 2 * len(BOTH) ** 2


def damaged(runs: dict[str, Path], tmp_path: Path, name: str, fault: Callable[[Path, Path], None]) -> Path:
    directory = copy_run(runs["cut"], tmp_path / "run")
    fault(directory / name, runs["other"])
    return directory


def open_run(directory: Path, history: list[dict[str, Any]]) -> RunState:
    state = RunState()
    state.open(backend, directory, history)
    return state


def refused(directory: Path, history: list[dict[str, Any]]) -> str:
    """The message of the error that opening ``directory`` for a run with ``history`` raises (a RunDirectoryError)."""
    before = contents(directory)
    with pytest.raises(RunDirectoryError) as info:
        open_run(directory, history)
    assert contents(directory) == before  # a refusal changes nothing
    assert_unlocked(directory)  # and leaves no lock behind
    return str(info.value)


@pytest.mark.parametrize("fault", [*HISTORY_FAULTS, "an entry short"])
def test_a_damaged_history_json_does_not_stop_the_run_its_model_zip_holds(runs, tmp_path, fault: str) -> None:
    """history.json is an export of model.zip, never read back: the run opens its directory silently, changing
    nothing (the next entry writes history.json anew; an entry short is what a crash between the two writes leaves)."""
    directory = damaged(runs, tmp_path, HISTORY, HISTORY_FAULTS.get(fault, _rewrite_json(lambda entries: entries[:-1])))
    before = contents(directory)
    ours = zip_history(directory / MODEL)  # what R2PO.load(directory / "model.zip") gives
    if fault in ("a folder", "a link to a folder"):  # the export cannot be written over it: refused, naming it
        message = refused(directory, ours)
        assert f"{str(directory / HISTORY)!r} is a folder" in message and "move it away" in message
        return
    with no_warning():
        state = open_run(directory, ours)
    assert state.locked
    state.close()
    assert contents(directory) == before


@pytest.mark.parametrize("fault", [*HISTORY_FAULTS, "an entry short"])
@pytest.mark.parametrize("whose", ["a new run", "another run's model"])
def test_a_damaged_history_json_still_keeps_out_a_run_that_is_not_its_own(runs, tmp_path, fault: str, whose: str) -> None:
    directory = damaged(runs, tmp_path, HISTORY, HISTORY_FAULTS.get(fault, _rewrite_json(lambda entries: entries[:-1])))
    ours = [] if whose == "a new run" else zip_history(runs["other"] / MODEL)
    message = refused(directory, ours)
    assert "already holds another run" in message and str(directory / MODEL) in message
    assert f"R2PO.load({str(directory / MODEL)!r}" in message  # the model is readable: the recipe to resume it


@pytest.mark.parametrize("fault", MODEL_FAULTS)
def test_a_damaged_model_zip_is_named_and_never_offered_for_resuming(runs, tmp_path, fault: str) -> None:
    """Refused for a new run and for the run itself (resumed from a copy of its model): history.json is no evidence
    of whose directory it is, and the way out is to restore model.zip."""
    directory = damaged(runs, tmp_path, MODEL, MODEL_FAULTS[fault])
    for ours in ([], zip_history(runs["cut"] / MODEL)):
        message = refused(directory, ours)  # deleted: history.json without a model, nothing to resume either
        assert str(directory / MODEL) in message and "R2PO.load" not in message and "cannot be resumed" in message
        assert "restore it from a copy" in message.lower() and f"{str(directory / HISTORY)!r} is only an export" in message
        assert f"move {str(directory)!r} away" in message and "another checkpoint_dir" in message


@pytest.mark.parametrize("fault", MODEL_FAULTS)
def test_loading_a_damaged_model_zip_names_it_and_how_to_recover(runs, tmp_path, fault: str) -> None:
    directory = damaged(runs, tmp_path, MODEL, MODEL_FAULTS[fault])
    error: type[Exception] = FileNotFoundError if fault in ("deleted", "a dangling link") else RunDirectoryError
    with pytest.raises(error) as info:
        check_model_file(directory / MODEL)
    message = str(info.value)
    assert str(directory / MODEL) in message and "R2PO.load" not in message and "restore it from a copy" in message.lower()
    assert f"{str(directory / HISTORY)!r} is only an export" in message and "another checkpoint_dir" in message
    assert check_model_file(runs["cut"] / MODEL) == runs["cut"] / MODEL  # the undamaged one passes
    assert check_model_file(runs["cut"] / "model") == runs["cut"] / MODEL  # ".zip" appended, as SB3 does


@pytest.mark.parametrize("history_fault", BOTH)
@pytest.mark.parametrize("model_fault", BOTH)
def test_both_files_damaged(runs, tmp_path, history_fault: str, model_fault: str) -> None:
    directory = damaged(runs, tmp_path, HISTORY, HISTORY_FAULTS[history_fault])
    MODEL_FAULTS[model_fault](directory / MODEL, runs["other"])
    before = contents(directory)
    for ours in ([], zip_history(runs["cut"] / MODEL)):
        if history_fault == model_fault == "deleted":  # only a transcript left: a directory a run may start in
            open_run(directory, ours).close()
            continue
        message = refused(directory, ours)
        assert str(directory / HISTORY) in message and "R2PO.load" not in message
    assert_nothing_lost(before, directory)


TRANSCRIPT_FAULTS: dict[str, Callable[[Path], None]] = {
    "a folder": lambda path: path.mkdir(),
    "a named pipe": lambda path: os.mkfifo(path),
    "a link to a folder": lambda path: path.symlink_to(path.parent, target_is_directory=True),
    "a damaged line": lambda path: path.write_bytes(b"not json\n" + b'{"version": 1, "rewind": 0}\n'),
}
CORPUS["llm_calls.jsonl that is no transcript, in a run directory"] = len(TRANSCRIPT_FAULTS)


@pytest.mark.parametrize("fault", TRANSCRIPT_FAULTS)
def test_a_transcript_that_cannot_be_used_is_named(tmp_path, fault: str) -> None:
    directory = tmp_path / "run"
    directory.mkdir()
    TRANSCRIPT_FAULTS[fault](directory / TRANSCRIPT)
    message = refused(directory, [])
    assert str(directory / TRANSCRIPT) in message and "move it aside" in message


def test_a_checkpoint_dir_that_is_a_file_is_named(tmp_path) -> None:
    (tmp_path / "run").write_text("a file")
    with pytest.raises(RunDirectoryError, match=r"'.*run' cannot be used as a run directory"):
        open_run(tmp_path / "run", [])


RESUMED_OVER = ["deleted", "empty", "cut at 8/16", "NUL bytes", "a named pipe", "an entry more"]
LOADED_DAMAGED = ["empty", "cut at 8/16", "random bytes", "a flipped byte in its data", "deleted"]
CORPUS["end to end: R2PO.load and learn() over a damaged history.json, or of a damaged model.zip"] = len(RESUMED_OVER) + len(
    LOADED_DAMAGED
)


@pytest.mark.slow
@pytest.mark.parametrize("fault", RESUMED_OVER)
def test_a_run_resumed_over_a_damaged_history_json_ends_as_the_uninterrupted_run(runs, tmp_path, fault: str) -> None:
    directory = damaged(runs, tmp_path, HISTORY, HISTORY_FAULTS[fault])
    replay = f"replay:{runs['reference'] / TRANSCRIPT}"
    model = R2PO.load(directory / MODEL, env=gym.make("CartPole-v1"), llm=replay)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)  # history.json is not read: the next entry writes it anew
    assert (directory / HISTORY).read_bytes() == (runs["reference"] / HISTORY).read_bytes()
    hashes = [r["hash"] for r in read_records(directory / TRANSCRIPT)]
    assert hashes == [r["hash"] for r in read_records(runs["reference"] / TRANSCRIPT)]


@pytest.mark.parametrize("fault", LOADED_DAMAGED)
def test_r2po_load_of_a_damaged_model_zip_is_a_clear_error(runs, tmp_path, fault: str) -> None:
    directory = damaged(runs, tmp_path, MODEL, MODEL_FAULTS[fault])
    with pytest.raises((RunDirectoryError, FileNotFoundError), match=r"(?i)restore it from a copy"):
        R2PO.load(directory / MODEL, env=gym.make("CartPole-v1"), llm="example")


# ---------------------------------------------------------------------------------------------------------------------
# one writer per run directory


SPELLINGS: dict[str, Callable[[Path], Path]] = {
    "the same path": lambda d: d,
    "a trailing slash": lambda d: Path(str(d) + "/"),
    "with /./": lambda d: d.parent / "." / d.name,
    "with ../": lambda d: d.parent / "x" / ".." / d.name,
    "relative": lambda d: Path(os.path.relpath(d)),
    "through a link": lambda d: d.parent / "link",
}
CORPUS["second writers in one process (6 spellings of the directory; a second model during learn())"] = len(SPELLINGS) + 1


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_second_run_state_on_a_locked_directory_is_refused(tmp_path, spelling: str) -> None:
    directory = tmp_path / "run"
    (tmp_path / "x").mkdir()
    (tmp_path / "link").symlink_to(directory, target_is_directory=True)
    first = open_run(directory, [])
    with pytest.raises(RunDirectoryInUseError) as info:
        open_run(SPELLINGS[spelling](directory), [])
    message = str(info.value)
    assert "in use by another run" in message and LOCK in message and "another checkpoint_dir" in message
    first.close()
    first.close()  # idempotent
    second = open_run(SPELLINGS[spelling](directory), [])  # free again
    assert second.locked
    second.close()


def test_the_lock_is_held_from_open_to_close_and_taken_again_by_acquire(tmp_path) -> None:
    directory = tmp_path / "run"
    state = open_run(directory, [])
    state.open(backend, directory, [])  # a new backend, the same run: its own lock is no obstacle
    state.acquire([])  # held: nothing to do
    assert state.locked and (directory / LOCK).exists()
    state.close()
    other = open_run(directory, [])  # another run may use it now
    with pytest.raises(RunDirectoryInUseError):
        state.acquire([])
    assert not state.locked
    other.close()
    state.acquire([])
    assert state.locked
    state.close()
    RunState().close()  # never opened: nothing to close
    assert not RunState().locked


def test_acquire_checks_the_directory_again(tmp_path, runs) -> None:
    """Between two learn() calls another process resumed the run and went on: this model's history is behind."""
    directory = copy_run(runs["cut"], tmp_path / "run")
    ours = zip_history(directory / MODEL)
    state = open_run(directory, ours)
    state.close()
    shutil.copyfile(runs["reference"] / MODEL, directory / MODEL)
    shutil.copyfile(runs["reference"] / HISTORY, directory / HISTORY)
    with pytest.raises(RunDirectoryError, match="already holds another run"):
        state.acquire(ours)
    assert not state.locked


def test_a_copy_of_a_run_state_does_not_hold_its_lock(tmp_path) -> None:
    import copy

    state = open_run(tmp_path / "run", [])
    clone = copy.deepcopy(state)
    assert state.locked and not clone.locked
    state.close()


RACE = textwrap.dedent(
    """
    import os, sys, time
    import gymnasium as gym
    from sb3_r2po import R2PO
    from sb3_r2po.llm.recording import ReplayBackend
    from sb3_r2po.r2po.run_state import RunDirectoryInUseError

    run_dir, go, kind, reference = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    replay = ReplayBackend(reference)

    class Slow:  # a slow server: the winner still runs when the other process starts
        def chat(self, messages, *, temperature=0.0):
            time.sleep(0.05)
            return replay.chat(messages, temperature=temperature)

    settings = dict(n_eval_episodes=2, warmup_episodes=2, seed=3, max_episodes=2 + 2 * 2 * 3)
    if kind == "resume":
        model = R2PO.load(os.path.join(run_dir, "model.zip"), env=gym.make("CartPole-v1"), llm=Slow())
    else:
        model = R2PO("MlpLinear", "CartPole-v1", llm=Slow(), checkpoint_dir=run_dir, **settings)
    open(go + "." + str(os.getpid()), "w").close()
    while not os.path.exists(go):  # both processes start learning at the same moment
        time.sleep(0.001)
    try:
        model.learn(10**9, reset_num_timesteps=kind != "resume")
    except RunDirectoryInUseError as error:
        print(error, file=sys.stderr)
        sys.exit(3)
    """
)

RACES = [("new", 0), ("new", 1), ("new", 2), ("resume", 0), ("resume", 1)]
CORPUS["two processes started on one directory at the same moment"] = len(RACES)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "trial"), RACES)
def test_two_processes_on_one_directory_one_runs_the_other_is_refused(tmp_path, runs, kind: str, trial: int) -> None:
    directory = tmp_path / "run"
    if kind == "resume":
        copy_run(runs["cut"], directory)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(directory), str(go), kind, str(runs["reference"] / TRANSCRIPT)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("go.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    codes = [racer.wait(timeout=120) for racer in racers]
    errors = [racer.stderr.read().decode() for racer in racers if racer.stderr is not None]
    assert sorted(codes) == [0, 3], errors
    loser = errors[codes.index(3)]
    assert "in use by another run" in loser and str(directory) in loser and "another checkpoint_dir" in loser
    # the winner's run is the whole run, alone in its transcript
    assert json.loads((directory / HISTORY).read_bytes()) == json.loads((runs["reference"] / HISTORY).read_bytes())
    hashes = [r["hash"] for r in read_records(directory / TRANSCRIPT)]
    assert hashes == [r["hash"] for r in read_records(runs["reference"] / TRANSCRIPT)]
    lines = (directory / TRANSCRIPT).read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])  # no interleaved or torn line


def test_a_second_model_in_the_same_process_is_refused_while_the_first_learns(tmp_path, make_r2po) -> None:
    from stable_baselines3.common.callbacks import BaseCallback

    directory = tmp_path / "run"
    seen: list[BaseException] = []

    class Intruder(BaseCallback):
        def _on_step(self) -> bool:
            if not seen:
                try:
                    make_r2po(llm="example", checkpoint_dir=str(directory), **RUN).learn(UNTIL_BUDGET)
                except BaseException as error:
                    seen.append(error)
            return True

    first = make_r2po(llm="example", checkpoint_dir=str(directory), **RUN)
    first.learn(UNTIL_BUDGET, callback=Intruder())
    assert len(seen) == 1 and isinstance(seen[0], RunDirectoryInUseError), seen
    # after learn() the directory is free again: a model loaded from it goes on (here: nothing left to do)
    resumed = R2PO.load(directory / MODEL, env=gym.make("CartPole-v1"), llm="example")
    resumed.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert resumed.history == first.history
    # a second learn() of the same model (two iterations more) holds the lock again
    seen.clear()
    first.settings = dataclasses.replace(first.settings, max_episodes=first.settings.max_episodes + 2 * 2 * 2)
    first.learn(UNTIL_BUDGET, callback=Intruder(), reset_num_timesteps=False)
    assert len(seen) == 1 and isinstance(seen[0], RunDirectoryInUseError), seen


# ---------------------------------------------------------------------------------------------------------------------
# transcripts


PROMPTS = ["plain ascii", "accents: é è à ç", "euro € and CJK 学习", "emoji 😀🚀 and 𝔘", "mixed é€😀学 end"]
"""Prompts (and, in the replies, their echoes) with 1- to 4-byte UTF-8 characters."""


def echo(messages: list[dict[str, str]]) -> str:
    return f"réponse « {messages[-1]['content']} » 😀"


def recorded(path: Path, prompts: list[str] = PROMPTS) -> list[str]:
    rec = RecordingBackend(echo, path)
    for prompt in prompts:
        rec.chat([{"role": "user", "content": prompt}])
    return [r["hash"] for r in read_records(path)]


def _multibyte_offsets(line: bytes) -> set[int]:
    """The cut positions of ``line`` that fall inside a multi-byte UTF-8 character."""
    return {i for i in range(1, len(line)) if 0x80 <= line[i] < 0xC0}


def test_a_last_record_cut_at_every_byte_is_read_with_a_warning(tmp_path) -> None:
    path = tmp_path / TRANSCRIPT
    hashes = recorded(path)
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    last = data[start:]
    inside = _multibyte_offsets(last)
    assert len(inside) >= 10  # the corpus cuts inside characters of 2, 3 and 4 bytes
    CORPUS.setdefault("transcript cut at every byte of its last record", 0)
    for cut in range(1, len(last)):  # from its first byte to its newline (cut: the newline alone is missing)
        CORPUS["transcript cut at every byte of its last record"] += 1
        path.write_bytes(data[: start + cut])
        whole = cut == len(last) - 1
        expected = hashes if whole else hashes[:-1]
        if whole:
            assert [r["hash"] for r in read_records(path)] == expected
        else:
            with pytest.warns(RuntimeWarning, match="half-written last line"):
                assert [r["hash"] for r in read_records(path)] == expected, cut
            with pytest.warns(RuntimeWarning, match="half-written last line"):
                replay = ReplayBackend(path)
                assert [replay.chat([{"role": "user", "content": p}]).text for p in PROMPTS[:-1]]
        with pytest.warns(RuntimeWarning, match="cut off a half-written last line"):
            rec = RecordingBackend(echo, path)  # a run resumed here
        assert rec.recorded == len(hashes) - 1 and path.read_bytes() == data[:start]
        rec.chat([{"role": "user", "content": "after the cut é"}])
        assert len(read_records(path)) == len(hashes)
        assert rec.rewind(1) == len(hashes) - 1 and [r["hash"] for r in read_records(path)] == hashes[:1]


def _nul_tail(size: int) -> Callable[[bytes], bytes]:
    return lambda data: data + bytes(size)


def _last_line(change: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    def apply(data: bytes) -> bytes:
        start = data.rstrip(b"\n").rfind(b"\n") + 1
        return data[:start] + change(data[start:])

    return apply


def _line(number: int, change: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    def apply(data: bytes) -> bytes:
        lines = data.split(b"\n")
        lines[number - 1] = change(lines[number - 1])
        return b"\n".join(lines)

    return apply


N = len(PROMPTS)
READABLE: dict[str, tuple[Callable[[bytes], bytes], int, str | None]] = {
    # name: (damage, records read, warning)
    "empty file": (lambda data: b"", 0, None),
    "only a partial line (1 byte)": (lambda data: data[:1], 0, "half-written"),
    "only a partial line (100 bytes)": (lambda data: data[:100], 0, "half-written"),
    "only a partial line, cut inside a character": (
        lambda data: data.split(b"\n")[1][: min(_multibyte_offsets(data.split(b"\n")[1]))],
        0,
        "half-written",
    ),
    "one record and a partial line cut inside a character": (
        lambda data: data[: min(_multibyte_offsets(data.split(b"\n")[1])) + len(data.split(b"\n")[0]) + 1],
        1,
        "half-written",
    ),
    "a NUL byte appended": (_nul_tail(1), N, "half-written"),
    "512 NUL bytes appended": (_nul_tail(512), N, "half-written"),
    "8192 NUL bytes appended": (_nul_tail(8192), N, "half-written"),
    "the last record zeroed": (_last_line(lambda line: bytes(len(line))), N - 1, "half-written"),
    "the last record zeroed, newline too": (_last_line(lambda line: bytes(len(line) + 1)), N - 1, "half-written"),
    "all zeroed": (lambda data: bytes(len(data)), 0, "half-written"),
    "CRLF line ends": (lambda data: data.replace(b"\n", b"\r\n"), N, None),
    "CRLF, last record cut": (lambda data: data.replace(b"\n", b"\r\n")[:-40], N - 1, "half-written"),
    "CRLF and LF mixed": (lambda data: data.replace(b"\n", b"\r\n", 2), N, None),
    "a byte order mark": (lambda data: b"\xef\xbb\xbf" + data, N, None),
    "blank lines between and after": (lambda data: data.replace(b"\n", b"\n\n \n") + b"\n\n", N, None),
    "no newline after the last record": (lambda data: data[:-1], N, None),
    "the last record cut inside a character": (
        _last_line(lambda line: line[: max(_multibyte_offsets(line))]),
        N - 1,
        "half-written",
    ),
}
"""Damage a transcript is read through (with a warning where named): the records it then holds."""


def _join(data: bytes, number: int, inside: bool = False, torn: bytes | None = None) -> bytes:
    """Put a half-written record before line ``number`` on the same line (what a failed write of a version before the
    redesign of issue 38 followed by the next record left; not a crash's doing, so refused, naming the line)."""
    lines = data.split(b"\n")
    source = lines[(number % (len(lines) - 1))]
    if torn is None:
        cut = min(_multibyte_offsets(source)) if inside else len(source) // 2
        torn = source[:cut]
    lines[number - 1] = torn + lines[number - 1]
    return b"\n".join(lines)


DAMAGED: dict[str, tuple[Callable[[bytes], bytes], int]] = {
    # name: (damage, the line named)
    "a middle record cut short": (_line(3, lambda line: line[:40]), 3),
    "a middle record cut inside a character": (_line(2, lambda line: line[: max(_multibyte_offsets(line))]), 2),
    "a middle record zeroed": (_line(2, lambda line: bytes(len(line))), 2),
    "NUL bytes inside a middle record": (_line(4, lambda line: line[:30] + bytes(20) + line[50:]), 4),
    "an invalid byte in a middle record": (_line(3, lambda line: line[:-5] + b"\xff" + line[-5:]), 3),
    "a middle line of text": (_line(1, lambda line: b"hello"), 1),
    "a JSON array": (_line(2, lambda line: b"[1, 2]"), 2),
    "a record without its hash": (_line(2, lambda line: json.dumps({"reply": {"text": "x"}}).encode()), 2),
    "a reply that is not an object": (_line(2, lambda line: json.dumps({"hash": "h", "reply": "x"}).encode()), 2),
    "a rewind marker below zero": (_line(3, lambda line: b'{"version": 1, "rewind": -2}'), 3),
    "a rewind marker beyond its calls": (_line(3, lambda line: b'{"version": 1, "rewind": 7}'), 3),
    "a rewind marker of true": (_line(3, lambda line: b'{"version": 1, "rewind": true}'), 3),
    "a whole last line that is no record": (lambda data: data + b'{"version": 1}\n', N + 1),
    "two torn lines in a row": (lambda data: _line(2, lambda line: line[:50])(_line(3, lambda line: line[:50])(data)), 2),
    "a torn record joined to the next (middle)": (lambda data: _join(data, 3), 3),
    "a torn record joined to the next (last)": (lambda data: _join(data, N), N),
    "a torn record cut inside a character, joined": (lambda data: _join(data, 2, inside=True), 2),
    "a torn rewind marker joined to the next": (lambda data: _join(data, 2, torn=b'{"version": 1, "rewind": 1, "set'), 2),
}
"""Damage inside a transcript: refused, naming the line (leaving a record out would change a replay)."""
CORPUS["transcript damage read through (NUL, CRLF, BOM, torn last lines, ...)"] = len(READABLE)
CORPUS["transcript damage refused, naming the line"] = len(DAMAGED)


@pytest.mark.parametrize("fault", READABLE)
def test_a_damaged_transcript_is_read_through(tmp_path, fault: str) -> None:
    path = tmp_path / TRANSCRIPT
    hashes = recorded(path)
    change, count, warning = READABLE[fault]
    damaged_bytes = change(path.read_bytes())
    path.write_bytes(damaged_bytes)
    with warnings_matching(warning):
        assert [r["hash"] for r in read_records(path)] == hashes[:count]
    with warnings_matching(warning):
        replay = ReplayBackend(path)
        assert len(replay) == count
        assert all(replay.chat([{"role": "user", "content": p}]) for p in PROMPTS[:count])
    # a run resumed here: a torn last line is cut off (a whole record without its newline too: never committed)
    torn = bool(damaged_bytes) and not damaged_bytes.endswith(b"\n")
    with warnings_matching("cut off" if torn else None):
        rec = RecordingBackend(echo, path)
    assert rec.recorded == (count - 1 if torn and warning is None else count)
    rec.chat([{"role": "user", "content": "next 学"}])  # starts on a line of its own
    with no_warning():
        records = read_records(path)
    assert len(records) == rec.recorded and records[-1]["messages"][-1]["content"] == "next 学"


@pytest.mark.parametrize("fault", DAMAGED)
def test_a_transcript_damaged_inside_is_refused_naming_the_line(tmp_path, fault: str) -> None:
    path = tmp_path / "run" / TRANSCRIPT
    path.parent.mkdir()
    recorded(path)
    change, number = DAMAGED[fault]
    path.write_bytes(change(path.read_bytes()))
    before = path.read_bytes()
    for read in (read_records, lambda p: len(ReplayBackend(p)), lambda p: RecordingBackend(echo, p)):
        with pytest.raises(LLMBackendError, match=rf"line {number} is .*head -n {number - 1}"):
            read(path)
    with pytest.raises(RunDirectoryError, match=rf"{TRANSCRIPT}.*line {number} is .*move it aside") as info:
        open_run(path.parent, [])
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    assert_unlocked(path.parent)


FAILED_WRITES = [0, 1, 17, "inside a character", "all but the newline", "all, then fsync fails"]
CORPUS["transcript writes failing half-way (simulated)"] = len(FAILED_WRITES) + 1


@pytest.mark.parametrize("written", FAILED_WRITES)
def test_a_write_that_fails_half_way_is_cut_back(tmp_path, monkeypatch, written: int | str) -> None:
    path = tmp_path / TRANSCRIPT
    rec = RecordingBackend(echo, path)
    rec.chat([{"role": "user", "content": "first"}])
    before = path.read_bytes()
    prompt = "disk full at é€😀学"
    line = json.dumps({"x": echo([{"role": "user", "content": prompt}])}, ensure_ascii=False).encode()
    sizes = {"inside a character": min(_multibyte_offsets(line)), "all but the newline": None}
    real_write = files._write_all

    def disk_full(fd: int, data: bytes) -> None:
        if written == "all, then fsync fails":
            real_write(fd, data)
            monkeypatch.setattr(files.os, "fsync", _raise_enospc)
            return
        size = sizes.get(written, written) if not isinstance(written, int) else written
        real_write(fd, data[: len(data) - 1 if size is None else int(size)])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_write_all", disk_full)
    with pytest.raises(OSError, match="No space left"):
        rec.chat([{"role": "user", "content": prompt}])
    monkeypatch.undo()
    assert path.read_bytes() == before  # cut back: no torn line
    assert rec.recorded == 1
    rec.chat([{"role": "user", "content": "after"}])
    assert [r["messages"][-1]["content"] for r in read_records(path)] == ["first", "after"]


def _raise_enospc(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_torn_line_that_could_not_be_cut_back_is_cut_by_the_next_write(tmp_path, monkeypatch) -> None:
    path = tmp_path / TRANSCRIPT
    rec = RecordingBackend(echo, path)
    rec.chat([{"role": "user", "content": "first"}])
    real_write = files._write_all

    def torn(fd: int, data: bytes) -> None:
        real_write(fd, data[:33])
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files, "_write_all", torn)
    monkeypatch.setattr(files.os, "ftruncate", lambda *args: _raise_enospc(0))
    with pytest.raises(OSError, match="Input/output"):
        rec.chat([{"role": "user", "content": "torn"}])
    monkeypatch.undo()
    assert not path.read_bytes().endswith(b"\n")  # the torn line stayed
    with pytest.warns(RuntimeWarning, match="half-written last line"):
        assert len(read_records(path)) == 1
    with pytest.warns(RuntimeWarning, match="cut off a half-written last line"):
        rec.chat([{"role": "user", "content": "after"}])
    assert [r["messages"][-1]["content"] for r in read_records(path)] == ["first", "after"]


FULL_DISK = textwrap.dedent(
    """
    import json, resource, signal, sys, warnings
    from sb3_r2po.llm.recording import RecordingBackend, read_records

    path, limits = sys.argv[1], json.loads(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the limit a write fails with EFBIG, as on a full disk
    warnings.simplefilter("error")  # a torn line must never be left for the next write to cut
    rec = RecordingBackend(lambda messages: "réponse 😀 " + messages[-1]["content"], path)
    done, failed = [], 0
    for number, extra in enumerate(limits):
        prompt = f"call {number}: é€😀学" * 3
        size = len(open(path, "rb").read())
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + extra, resource.RLIM_INFINITY))
        try:
            rec.chat([{"role": "user", "content": prompt}])
            done.append(prompt)
        except OSError:
            failed += 1
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert open(path, "rb").read().endswith(b"\\n") or size == 0
    assert [r["messages"][-1]["content"] for r in read_records(path)] == done and rec.recorded == len(done)
    print(json.dumps({"failed": failed, "done": len(done)}))
    """
)

LIMITS = [*range(0, 1200, 11), 10**6]
CORPUS["transcript writes past a real file size limit (a full disk)"] = len(LIMITS)


@pytest.mark.slow
def test_writes_past_a_real_file_size_limit_leave_a_whole_transcript(tmp_path) -> None:
    path = tmp_path / TRANSCRIPT
    path.touch()
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path), json.dumps(LIMITS)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert counts["failed"] > 40 and counts["done"] >= 1
    assert len(ReplayBackend(path)) == counts["done"]


# ---------------------------------------------------------------------------------------------------------------------
# run directories copied, moved and renamed


def _copied(run: Path, tmp: Path) -> tuple[Any, str, str]:
    copy = copy_run(run, tmp / "copy")
    return copy / MODEL, str(run), str(copy)


def _moved(run: Path, tmp: Path) -> tuple[Any, str, str]:
    target = tmp / "elsewhere" / "moved"
    target.parent.mkdir()
    shutil.move(copy_run(run, tmp / "original"), target)
    return target / MODEL, str(tmp / "original"), str(target)


def _renamed(run: Path, tmp: Path) -> tuple[Any, str, str]:
    copy_run(run, tmp / "old").rename(tmp / "new")
    return tmp / "new" / MODEL, str(tmp / "old"), str(tmp / "new")


def _without_suffix(run: Path, tmp: Path) -> tuple[Any, str, str]:
    copy = copy_run(run, tmp / "copy")
    return str(copy / "model"), str(run), str(copy)


def _transcript_only(run: Path, tmp: Path) -> tuple[Any, str, str]:
    copy = copy_run(run, tmp / "copy")
    (copy / HISTORY).unlink()
    return copy / MODEL, str(run), str(copy)


def _the_original(run: Path, tmp: Path) -> tuple[Any, str, str]:
    return run / MODEL, str(run), str(run)


def _through_a_link(run: Path, tmp: Path) -> tuple[Any, str, str]:
    (tmp / "link").symlink_to(run, target_is_directory=True)
    return tmp / "link" / MODEL, str(run), str(run)


def _spelled_otherwise(run: Path, tmp: Path) -> tuple[Any, str, str]:
    return Path(str(run) + "/./") / MODEL, str(run) + "/", str(run) + "/"


def _zip_alone(run: Path, tmp: Path) -> tuple[Any, str, str]:
    shutil.copyfile(run / MODEL, tmp / MODEL)
    return tmp / MODEL, str(run), str(run)


def _zip_renamed(run: Path, tmp: Path) -> tuple[Any, str, str]:
    copy = copy_run(run, tmp / "copy")
    (copy / MODEL).rename(copy / "backup.zip")
    return copy / "backup.zip", str(run), str(run)


def _file_object(run: Path, tmp: Path) -> tuple[Any, str, str]:
    return io.BytesIO((run / MODEL).read_bytes()), str(run), str(run)


def _no_checkpoint_dir(run: Path, tmp: Path) -> tuple[Any, Any, Any]:
    return copy_run(run, tmp / "copy") / MODEL, None, None


RELOCATIONS: dict[str, Callable[[Path, Path], tuple[Any, Any, Any]]] = {
    "copied": _copied,
    "moved": _moved,
    "renamed": _renamed,
    "without suffix": _without_suffix,
    "transcript only": _transcript_only,
    "the original": _the_original,
    "through a link": _through_a_link,
    "spelled otherwise": _spelled_otherwise,
    "zip alone": _zip_alone,
    "zip renamed": _zip_renamed,
    "file object": _file_object,
    "no checkpoint dir": _no_checkpoint_dir,
}
"""Where a zip is loaded from: (the original run directory, tmp_path) -> (what is given to load, the saved
checkpoint_dir, the directory the run must write into)."""
CORPUS["run directories copied, moved, renamed, or zips loaded from elsewhere (+ 2 resumed end to end)"] = len(RELOCATIONS) + 3


@pytest.mark.parametrize("case", RELOCATIONS)
def test_the_directory_a_loaded_model_writes_into(runs, tmp_path, case: str) -> None:
    path, saved, expected = RELOCATIONS[case](runs["cut"], tmp_path)
    moved = expected != saved
    with warnings_matching("not the one its run was started in" if moved else None):
        assert loaded_checkpoint_dir(path, saved) == expected


def test_a_relative_checkpoint_dir_resumed_from_another_working_directory(runs, tmp_path, monkeypatch) -> None:
    copy_run(runs["cut"], tmp_path / "runs" / "a")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # "runs/a" now names nothing
    with pytest.warns(RuntimeWarning, match="not the one its run was started in"):
        assert loaded_checkpoint_dir(tmp_path / "runs" / "a" / MODEL, "runs/a") == str(tmp_path / "runs" / "a")
    monkeypatch.chdir(tmp_path)
    assert loaded_checkpoint_dir(Path("runs/a/model.zip"), "runs/a") == "runs/a"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["copied", "moved"])
def test_a_run_resumed_from_a_copied_or_moved_directory_writes_there(runs, tmp_path, how: str) -> None:
    original = copy_run(runs["cut"], tmp_path / "original")
    # the saved checkpoint_dir is runs["cut"]: make it the original's, as if the run had been started there
    model = R2PO.load(original / MODEL, env=gym.make("CartPole-v1"), llm="example")
    model.settings = dataclasses.replace(model.settings, checkpoint_dir=str(original))
    model.save(original / MODEL)
    before = contents(original)
    target = tmp_path / "target"
    if how == "copied":
        copy_run(original, target)
    else:
        shutil.move(original, target)
    replay = f"replay:{runs['reference'] / TRANSCRIPT}"
    with pytest.warns(RuntimeWarning, match="not the one its run was started in"):
        resumed = R2PO.load(target / MODEL, env=gym.make("CartPole-v1"), llm=replay)
    assert resumed.settings.checkpoint_dir == str(target)
    resumed.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert (target / HISTORY).read_bytes() == (runs["reference"] / HISTORY).read_bytes()
    if how == "copied":
        assert contents(original) == before  # the original is untouched
    else:
        assert not original.exists()  # and not created again
    assert R2PO.load(target / MODEL, env=gym.make("CartPole-v1")).settings.checkpoint_dir == str(target)


def test_corpus_sizes() -> None:
    """The figures docs/reliability.md gives (run with -s to print them)."""
    assert sum(CORPUS.values()) >= 300
    for kind, count in CORPUS.items():
        print(f"{count:5d}  {kind}")
    print(f"{sum(CORPUS.values()):5d}  in all")
