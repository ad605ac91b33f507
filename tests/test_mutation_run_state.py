"""What ``r2po/run_state.py`` promises about a run directory, stated exactly (docs/mutation.md, run_state).

The run directory's rules (docs/usage.md, "Runs that survive crashes"; docs/reliability.md, run directories):
``model.zip`` is the one file a run resumes from, ``history.json`` its export; a damaged, missing or foreign
``model.zip`` is refused with an error naming the file and the way out; one run at a time holds the directory's lock;
a copied or moved directory resumes into itself; evaluation ``j`` draws its env seed from the ``j``-th child of
``SeedSequence(seed)``. Each test works on files and :class:`RunState` directly (no training): milliseconds each.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import threading
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sb3_r2po.r2po import run_state
from sb3_r2po.r2po.run_state import (
    RunDirectoryError,
    RunDirectoryInUseError,
    RunState,
    check_model_file,
    evaluation_seed,
    loaded_checkpoint_dir,
)


def reply(messages: Any) -> str:
    return "params[0]: 1"


def model_zip(path: Path, data: bytes | None = None, history: Any = None, members: dict[str, bytes] | None = None) -> Path:
    """A zip as SB3 writes one: ``data`` (JSON with ``history``), or the given members."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if members is None:
        members = {"data": data if data is not None else json.dumps({"history": history or []}).encode()}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return path


def refusal(path: Path) -> tuple[type[BaseException], str]:
    with pytest.raises((FileNotFoundError, RunDirectoryError)) as caught:
        check_model_file(path)
    return type(caught.value), str(caught.value)


def lost_run(directory: Path, problem: str) -> str:
    """The message for a run directory whose model.zip cannot be used (written out from the format)."""
    return (
        f"'{directory}/model.zip' {problem}: the run in '{directory}' cannot be resumed, as it resumes only from its "
        f"model.zip. Restore it from a copy to resume the run ('{directory}/history.json' is only an export of its "
        f"history). To start a new run instead, give it another checkpoint_dir (or move '{directory}' away first to "
        "use that name again)."
    )


def test_evaluation_seeds_are_31_bits_of_the_jth_child_of_the_seed_sequence() -> None:
    for seed in (0, 1, 7, 2**40 + 3):
        children = np.random.SeedSequence(seed).spawn(5)
        seeds = [evaluation_seed(seed, j) for j in range(5)]
        assert seeds == [int(child.generate_state(1)[0]) // 2 for child in children]
        assert all(0 <= s < 2**31 for s in seeds) and len(set(seeds)) == 5
    assert evaluation_seed(0, 0) != evaluation_seed(1, 0)


def test_a_model_file_that_cannot_be_read_is_refused_with_its_reason(tmp_path: Path) -> None:
    missing = tmp_path / "m.zip"
    assert refusal(missing) == (FileNotFoundError, f"'{missing}' is missing")
    link = tmp_path / "link.zip"
    link.symlink_to(tmp_path / "nowhere.zip")
    assert refusal(link) == (FileNotFoundError, f"'{link}' is a link to a file that does not exist")
    folder = tmp_path / "folder.zip"
    folder.mkdir()
    assert refusal(folder) == (RunDirectoryError, f"'{folder}' is a folder, not a file. Restore it from a copy.")
    pipe = tmp_path / "pipe.zip"
    os.mkfifo(pipe)
    assert refusal(pipe) == (
        RunDirectoryError,
        f"'{pipe}' is not a regular file (a pipe, a socket or a device). Restore it from a copy.",
    )
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"not a zip at all")
    assert refusal(junk) == (
        RunDirectoryError,
        f"'{junk}' is not a readable zip (BadZipFile: File is not a zip file; damaged or cut short). Restore it from a copy.",
    )
    flipped = model_zip(tmp_path / "flipped.zip", history=[{"a": 1}])
    raw = bytearray(flipped.read_bytes())
    raw[raw.index(b'"a"')] ^= 1  # stored, not compressed: a byte of the member's content
    flipped.write_bytes(bytes(raw))
    assert refusal(flipped) == (
        RunDirectoryError,
        f"'{flipped}' is damaged (its member 'data' fails its checksum). Restore it from a copy.",
    )
    cases = {
        "holds no 'data' (it is not a model saved by Stable-Baselines3)": {"other": b"{}"},
        "holds a 'data' that is not JSON (damaged)": {"data": b"{not json"},
        "holds no history (it is not a model saved by R2PO)": {"data": b'["history"]'},
        "holds a history that is not a list of history entries (damaged)": {"data": b'{"history": {}}'},
    }
    cases_2 = {
        "holds no history (it is not a model saved by R2PO)": {"data": b'{"policy": 1}'},
        "holds a history that is not a list of history entries (damaged)": {"data": b'{"history": [1, {}]}'},
    }
    for i, (problem, members) in enumerate([*cases.items(), *cases_2.items()]):
        path = model_zip(tmp_path / f"case{i}.zip", members=members)
        assert refusal(path) == (RunDirectoryError, f"'{path}' {problem}. Restore it from a copy.")


def test_a_model_file_is_found_with_zip_appended_only_when_the_given_name_is_missing(tmp_path: Path) -> None:
    good = model_zip(tmp_path / "m.zip", history=[{"a": 1}])
    assert check_model_file(tmp_path / "m") == good
    assert check_model_file(str(good)) == good
    model_zip(tmp_path / "both", history=[])
    (tmp_path / "both.zip").write_bytes(b"junk")
    assert check_model_file(tmp_path / "both") == tmp_path / "both"  # the given name exists: it is the file


def test_a_run_directorys_unreadable_model_zip_names_the_way_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.json").write_text("[]")
    assert refusal(run / "model.zip") == (FileNotFoundError, lost_run(run, "is missing"))
    (run / "model.zip").write_bytes(b"")
    assert refusal(run / "model.zip") == (
        RunDirectoryError,
        lost_run(run, "is not a readable zip (BadZipFile: File is not a zip file; damaged or cut short)"),
    )
    cut = tmp_path / "cut"  # a run cut before its first entry has only its transcript: still a run directory
    cut.mkdir()
    (cut / "llm_calls.jsonl").write_text("")
    (cut / "model.zip").write_bytes(b"junk")
    assert refusal(cut / "model.zip")[1].startswith(f"'{cut}/model.zip' is not a readable zip")
    assert refusal(cut / "model.zip")[1].endswith("(or move '" + str(cut) + "' away first to use that name again).")
    other = run / "m.zip"  # another name in a run directory: the plain message
    other.write_bytes(b"junk")
    assert refusal(other)[1].endswith("damaged or cut short). Restore it from a copy.")


def test_a_run_directory_is_created_locked_and_checked(tmp_path: Path) -> None:
    fresh = RunState()
    assert (fresh.locked, fresh.transcript_calls, fresh.committed(), fresh.directory) == (False, None, {}, None)
    history = [{"a": 1}]
    assert fresh.saved_history(history) == history  # no snapshot yet: all of it
    fresh.acquire(history)  # nothing happens without a directory
    fresh.rewind(0)
    fresh.close()
    assert not fresh.locked and not (tmp_path / ".lock").exists()

    run = tmp_path / "a" / "b" / "run"
    state = RunState()
    backend = state.open(reply, run, [])
    assert backend is state.transcript and state.locked and (run / ".lock").is_file()
    assert backend.chat([{"role": "user", "content": "x"}]).text == "params[0]: 1"
    assert state.transcript_calls == 1 and len((run / "llm_calls.jsonl").read_text().splitlines()) == 1
    with pytest.warns(RuntimeWarning, match="1 recorded call"):
        state.rewind(0)  # a resumed run asks the calls after the first 0 again
    assert state.transcript_calls == 0
    state.close()
    assert not state.locked
    state.acquire([])  # the next learn() locks the directory again
    assert state.locked
    state.close()
    other = RunState()
    other.open(reply, run, [])
    other.transcript.chat([{"role": "user", "content": "y"}])
    other.close()
    state.acquire([])  # and counts the calls another run recorded meanwhile
    assert state.locked and state.transcript_calls == 1
    assert state.open(reply, None, []) is reply and state.transcript is None and state.transcript_calls is None
    assert not state.locked  # no directory: the lock is released


def test_one_run_at_a_time_holds_a_directory_and_close_releases_it_from_any_thread(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    state = RunState()
    state.open(reply, first, [])
    intruder = RunState()
    start = time.monotonic()
    with pytest.raises(RunDirectoryInUseError) as caught:
        intruder.open(reply, first, [])
    assert time.monotonic() - start < 0.5  # refused at once, not after a wait
    assert str(caught.value) == (
        f"checkpoint_dir '{first}' is in use by another run (another process, or another model in this one, holds "
        f"'{first}/.lock' until its learn() ends, also by a crash; deleting it does not unlock it). Wait for that run, "
        "or give this run another checkpoint_dir"
    )
    assert not intruder.locked
    state.open(reply, second, [])  # moving to another directory releases the first
    intruder.open(reply, first, []).chat([{"role": "user", "content": "x"}])
    with pytest.raises(RunDirectoryInUseError):
        RunState().open(reply, second, [])
    intruder.close()
    state.close()

    opened = threading.Event()
    thread = threading.Thread(target=lambda: (state.open(reply, first, []), opened.set()))
    thread.start()
    thread.join()
    assert opened.is_set() and state.locked
    state.close()  # from another thread than the one that locked (lockstep training)
    assert not state.locked
    RunState().open(reply, first, []).chat([{"role": "user", "content": "z"}])


def test_a_copy_of_a_run_state_does_not_hold_the_lock(tmp_path: Path) -> None:
    state = RunState()
    state.open(reply, tmp_path / "run", [])
    copied = copy.deepcopy(state)
    assert state.locked and not copied.locked and copied.directory == state.directory
    state.close()


def test_a_folder_that_cannot_hold_a_run_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(RunDirectoryError) as caught:
        RunState().open(reply, file, [])
    assert str(caught.value) == (
        f"checkpoint_dir '{file}' cannot be used as a run directory ([Errno 17] File exists: '{file}'): it must be a "
        "folder this process can create and write to, whose .lock (when there is one) is a plain file; fix that, or "
        "give this run another checkpoint_dir"
    )
    run = tmp_path / "run"
    (run / "llm_calls.jsonl").mkdir(parents=True)
    state = RunState()
    with pytest.raises(RunDirectoryError) as caught:
        state.open(reply, run, [])
    assert str(caught.value) == (
        f"'{run}/llm_calls.jsonl', the run's transcript of LLM calls, cannot be used (it is a folder, not a file). The "
        "run itself is in model.zip: restore the transcript from a copy, or move it aside to record the rest of the "
        "run in a new one (a replay of the whole run then needs the calls of both)"
    )
    assert not state.locked  # a refusal leaves the directory unlocked
    (run / "llm_calls.jsonl").rmdir()
    state.open(reply, run, [])
    assert state.locked
    state.close()


def test_a_directory_is_accepted_only_for_the_run_whose_history_it_holds(tmp_path: Path) -> None:
    run = tmp_path / "run"
    saved = [{"b": 1, "a": math.nan}, {"b": 2, "a": 0.5}]  # keys out of order, a NaN: compared as sorted JSON
    model_zip(run / "model.zip", data=json.dumps({"history": saved}).encode())
    for ours in (saved, [*copy.deepcopy(saved), {"b": 3, "a": 1.0}]):
        state = RunState()
        state.open(reply, run, ours)
        state.close()
        state.acquire(ours)
        assert state.locked
        state.close()
    for foreign in ([], [{"b": 1, "a": 0.0}], [{"b": 1}]):
        with pytest.raises(RunDirectoryError) as caught:
            RunState().open(reply, run, foreign)
        assert str(caught.value) == (
            f"checkpoint_dir '{run}' already holds another run ({run}/model.zip: a history of 2 entries); resume it "
            f"with R2PO.load('{run}/model.zip', env=..., llm=...).learn(..., reset_num_timesteps=False), or give this "
            "run another directory"
        )
    (run / "history.json").mkdir()
    with pytest.raises(RunDirectoryError) as caught:
        RunState().open(reply, run, saved)
    assert str(caught.value) == (
        f"'{run}/history.json' is a folder, where this run writes the export of its history: move it away, or give "
        "this run another checkpoint_dir"
    )


def test_a_directory_with_history_json_but_no_model_zip_is_a_lost_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.json").write_text("[]")
    with pytest.raises(RunDirectoryError) as caught:
        RunState().open(reply, run, [])
    assert str(caught.value) == lost_run(run, "is missing")
    only_model = tmp_path / "only_model"
    model_zip(only_model / "model.zip", data=b"junk")
    with pytest.raises(RunDirectoryError) as caught:
        RunState().open(reply, only_model, [])
    assert str(caught.value) == lost_run(only_model, "holds a 'data' that is not JSON (damaged)")
    cut = tmp_path / "cut"  # a transcript alone: a run cut before its first entry, resumed
    cut.mkdir()
    (cut / "llm_calls.jsonl").write_text("")
    RunState().open(reply, cut, []).chat([{"role": "user", "content": "x"}])


def test_the_snapshot_is_a_copy_of_the_state_at_the_last_entry() -> None:
    state = RunState()
    values = {"num_timesteps": 10, "llm_stats": {"calls": [1, 2]}}
    state.snapshot(values, 2)
    values["llm_stats"]["calls"].append(3)
    committed = state.committed()
    assert committed == {"num_timesteps": 10, "llm_stats": {"calls": [1, 2]}}
    committed["llm_stats"]["calls"].clear()
    assert state.committed()["llm_stats"]["calls"] == [1, 2]
    assert state.saved_history([{"i": 0}, {"i": 1}, {"i": 2}]) == [{"i": 0}, {"i": 1}]


def test_write_puts_model_zip_then_history_json_in_the_directory(tmp_path: Path) -> None:
    history = [{"iteration": 0, "mean": 1.5, "params": [0.25, -1.0]}]
    target = tmp_path / "a" / "b"
    seen: list[Any] = []

    def save(buffer: io.BytesIO) -> None:
        seen.append(buffer)
        buffer.write(b"model bytes")

    for _ in range(2):  # a second entry into the same directory
        RunState().write(str(target), save, history)
    assert all(isinstance(buffer, io.BytesIO) for buffer in seen) and len(seen) == 2
    assert (target / "model.zip").read_bytes() == b"model bytes"
    assert (target / "history.json").read_bytes() == json.dumps(history, indent=1).encode()
    assert (target / "history.json").read_text().startswith('[\n {\n  "iteration": 0,')
    assert sorted(p.name for p in target.iterdir()) == ["history.json", "model.zip"]


def test_a_copied_or_moved_run_directory_resumes_into_itself(tmp_path: Path) -> None:
    started, copied = tmp_path / "started", tmp_path / "copied"
    for run in (started, copied):
        model_zip(run / "model.zip", history=[])
        (run / "history.json").write_text("[]")
    assert loaded_checkpoint_dir(copied / "model.zip", None) is None
    assert loaded_checkpoint_dir(io.BytesIO(b""), str(started)) == str(started)  # a file object: as saved
    assert loaded_checkpoint_dir(started / "model.zip", str(started)) == str(started)
    os.symlink(started, tmp_path / "alias")
    assert loaded_checkpoint_dir(tmp_path / "alias" / "model.zip", str(started)) == str(started)
    for saved in (started, tmp_path / "moved_away"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert loaded_checkpoint_dir(copied / "model", str(saved)) == str(copied)
        assert [(w.category, str(w.message)) for w in caught] == [
            (
                RuntimeWarning,
                f"'{copied}/model.zip' was loaded from a run directory that is not the one its run was started in "
                f"('{saved}'; copied, moved or renamed since): the run writes into '{copied}'",
            )
        ]
    lone = model_zip(tmp_path / "lone" / "model.zip", history=[])  # no history.json, no transcript: no run directory
    other_name = model_zip(copied / "m.zip", history=[])
    (tmp_path / "folder" / "model.zip").mkdir(parents=True)
    (tmp_path / "folder" / "history.json").write_text("[]")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in (lone, other_name, tmp_path / "folder" / "model.zip"):
            assert loaded_checkpoint_dir(path, str(started)) == str(started)


def test_a_data_larger_than_the_bound_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.dumps({"history": [{"a": 1}]}).encode()
    path = model_zip(tmp_path / "m.zip", data=data)
    monkeypatch.setattr(run_state, "_MAX_DATA_BYTES", len(data))  # the real bound (256 MiB) scaled down
    assert check_model_file(path) == path
    monkeypatch.setattr(run_state, "_MAX_DATA_BYTES", len(data) - 1)
    assert refusal(path) == (
        RunDirectoryError,
        f"'{path}' holds a 'data' of {len(data)} bytes (not one R2PO writes). Restore it from a copy.",
    )
