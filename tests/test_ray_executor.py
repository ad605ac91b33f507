"""The Ray executor on a real local Ray (two CPUs, loopback only): its results equal the serial executor's, a worker
killed in the middle of a run is retried and the run resumes from its checkpoint, a failing run is reported while the
others are kept, and nothing of the local Ray listens beyond the loopback interface.

The killed run is slowed down by its LLM (:class:`SlowExampleLLM`: the example LLM's replies, each after a pause), so
that the kill lands in the middle of the run whatever the machine's load; the workers import it from this module
(``PYTHONPATH`` is set to this directory before Ray starts) and log the process id of every call, which is how the
test finds the worker to kill.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from filelock import FileLock

from sb3_r2po.experiments import ResultsStore, RunResult, RunSpec, SerialExecutor
from sb3_r2po.llm.base import ChatReply, Message
from sb3_r2po.llm.example import ExampleLLM

if importlib.util.find_spec("ray") is None:  # not imported here: the executor sets Ray's local-only switch first
    pytest.skip("the Ray executor's tests need ray: pip install -e '.[ray]'", allow_module_level=True)

from sb3_r2po.experiments.executors import RayExecutor, RunsFailed
from sb3_r2po.experiments.runs import ATTEMPT_LOCK

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ENV = "CartPole-v1"
SETTINGS = {"n_eval_episodes": 3, "warmup_episodes": 4}
BUDGET = 4 + 3 * 2 * 6
"""The warm-up and six iterations of a Search and a Critic evaluation of K = 3 episodes (12 LLM calls)."""
GRID = [RunSpec(ENV, "r2po", seed, BUDGET, "example", SETTINGS) for seed in (0, 1)] + [
    RunSpec(ENV, "ars", seed, 16) for seed in (0, 1)
]
"""R2PO and a baseline (ARS: no checkpoint, torch policies) on two seeds."""
SLOW = f"{__name__}:SlowExampleLLM"
CALL_LOG = "SB3_R2PO_TEST_LLM_CALL_LOG"
"""The file :class:`SlowExampleLLM` appends the process id of every call to (set in the environment Ray inherits)."""
DELAY_S = 0.4
TIMEOUT_S = 240.0
"""How long the test waits for a state it needs (generous: the machine may be loaded)."""

T = TypeVar("T")


class SlowExampleLLM:
    """The replies of ``llm="example"`` (:class:`ExampleLLM` with seed 0), each after :data:`DELAY_S`; every call
    appends this process's id to the file named by :data:`CALL_LOG`."""

    def __init__(self) -> None:
        self.inner = ExampleLLM(0)

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        with open(os.environ[CALL_LOG], "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(DELAY_S)
        return self.inner.chat(messages, temperature=temperature)


def wait_for(condition: Callable[[], T | None], what: str, timeout: float = TIMEOUT_S) -> T:
    """The first non-``None`` value of ``condition()``, polled every 20 ms; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value is not None:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm_calls") / "calls.log"


@pytest.fixture(scope="module")
def executor(call_log: Path) -> Iterator[RayExecutor]:
    """A local Ray of two CPUs, started once for the module by the executor itself, shut down at the end."""
    with pytest.MonkeyPatch.context() as patch:  # the environment Ray's processes inherit
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        patch.setenv(CALL_LOG, str(call_log))
        executor = RayExecutor(cluster_cpus=2)
        executor.start()
    assert executor.started
    yield executor
    executor.shutdown()


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[ResultsStore, list[RunResult]]:
    """The grid run by the serial executor, in this process."""
    store = ResultsStore(tmp_path_factory.mktemp("serial"))
    return store, SerialExecutor().run(GRID, store)


def test_results_equal_the_serial_executors_run_for_run(executor: RayExecutor, serial, tmp_path: Path) -> None:
    serial_store, expected = serial
    store = ResultsStore(tmp_path)
    results = executor.run(GRID, store)
    assert [r.spec for r in results] == GRID
    for got, want in zip(results, expected, strict=True):
        assert got.outcome() == want.outcome(), got.spec.run_id  # returns, lengths, history, LLM statistics, ...
        assert got.full_history(store.run_dir(got.spec)) == want.full_history(serial_store.run_dir(want.spec))
        assert (store.run_dir(got.spec) / "result.json").exists()  # saved into the store by the driver
    assert {r.spec.method for r in results if r.history} == {"r2po"}
    assert len({tuple(r.returns) for r in results}) == len(GRID)  # four different runs, not one result four times


def _pid_of_a_run_past_its_first_iteration(history: Path, call_log: Path) -> int | None:
    """The worker's process id once the run's checkpoint holds an iteration's entry (the warm-up's are not enough)."""
    try:
        entries = json.loads(history.read_text(encoding="utf-8"))
        pids = call_log.read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return None  # not written yet (history.json is written atomically: it is whole or absent)
    if not any(entry["kind"] != "warmup" for entry in entries) or not pids:
        return None
    return int(pids[0])


def test_a_killed_worker_is_retried_and_its_run_resumes_from_its_checkpoint(
    executor: RayExecutor, serial, call_log: Path, tmp_path: Path
) -> None:
    serial_store, expected = serial
    reference = expected[0]  # the same run answered by llm="example", uninterrupted
    spec = RunSpec(ENV, "r2po", 0, BUDGET, SLOW, SETTINGS)
    assert reference.spec == RunSpec(ENV, "r2po", 0, BUDGET, "example", SETTINGS)
    store = ResultsStore(tmp_path)
    call_log.write_text("", encoding="utf-8")
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["results"] = executor.run([spec], store)
        except BaseException as error:  # reported by the test's thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    history = store.run_dir(spec) / "checkpoint" / "history.json"
    pid = wait_for(lambda: _pid_of_a_run_past_its_first_iteration(history, call_log), "the run's first iteration")
    assert pid != os.getpid()  # a worker process, not this one
    os.kill(pid, signal.SIGKILL)
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), "the executor did not return"
    assert "error" not in outcome, outcome.get("error")
    (result,) = outcome["results"]

    pids = [int(line) for line in call_log.read_text(encoding="utf-8").split()]
    assert pids[0] == pid and len(set(pids)) == 2  # one retry, in another worker process
    retried = sum(p != pid for p in pids)
    assert reference.llm_calls is not None and 0 < retried < reference.llm_calls  # resumed, not started over
    assert sum(p == pid for p in pids) + retried >= reference.llm_calls
    assert result.resumed == 1
    # the run is the uninterrupted one: no episode charged twice, the same history
    assert result.episodes_run == reference.episodes_run == BUDGET
    assert result.returns == reference.returns and result.lengths == reference.lengths
    assert result.history == reference.history
    assert result.timesteps == reference.timesteps and result.llm_calls == reference.llm_calls
    run_history = result.full_history(store.run_dir(spec))
    assert run_history == reference.full_history(serial_store.run_dir(reference.spec))
    assert store.result(spec) == result


def test_a_failing_run_is_reported_and_the_others_are_kept(executor: RayExecutor, tmp_path: Path) -> None:
    good = RunSpec(ENV, "r2po", 2, 10, "example", SETTINGS)
    bad = RunSpec(ENV, "r2po", 3, 10, "example", {**SETTINGS, "n_eval_episodes": 0})
    store = ResultsStore(tmp_path)
    with pytest.raises(RunsFailed) as raised:
        executor.run([bad, good], store)
    (failure,) = raised.value.failures
    assert failure.spec == bad
    assert failure.error.startswith("ValueError: ") and "n_eval_episodes must be an integer >= 1" in failure.error
    assert bad.run_id in str(raised.value) and 'arguments.py", line' in failure.details  # the worker's traceback
    assert store.result(bad) is None
    saved = store.result(good)
    assert saved is not None and raised.value.results == [saved]
    # the command run again runs nothing that has a result: the saved result comes back as it was
    assert executor.run([good], store) == [saved]


def test_a_run_whose_directory_another_attempt_holds_waits_then_fails(executor: RayExecutor, tmp_path: Path) -> None:
    spec = RunSpec(ENV, "r2po", 4, 10, "example", SETTINGS)
    store = ResultsStore(tmp_path)
    impatient = RayExecutor(lock_wait_s=0.5)  # uses the module's Ray
    with FileLock(str(store.run_dir(spec) / ATTEMPT_LOCK)):  # another attempt of the run, still alive
        with pytest.raises(RunsFailed) as raised:
            impatient.run([spec], store)
    (failure,) = raised.value.failures
    assert failure.error.startswith("AttemptInProgressError: ") and ATTEMPT_LOCK in failure.error
    assert not (store.run_dir(spec) / "checkpoint").exists() and not impatient.started  # nothing of the run was touched


def _listening_sockets() -> dict[int, str]:
    """The inodes of this machine's listening TCP sockets and their local addresses (from /proc/net)."""
    sockets = {}
    for name, size in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            packed = bytes.fromhex(fields[1].split(":")[0])
            words = b"".join(packed[i : i + 4][::-1] for i in range(0, size, 4))  # /proc prints 32-bit words in host order
            sockets[int(fields[9])] = str(ipaddress.ip_address(words))
    return sockets


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:  # the process ended, or is not ours to read
        pass
    return inodes


def _is_loopback(address: str) -> bool:
    """127.0.0.0/8 or ::1, also written as an IPv4-mapped IPv6 address (::ffff:127.0.0.1)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc")
def test_the_local_ray_listens_on_the_loopback_interface_only(executor: RayExecutor) -> None:
    sockets = _listening_sockets()
    ray_processes = {pid for pid in _descendants(os.getpid()) if "ray" in _command_line(pid)}
    listening = {sockets[inode] for pid in ray_processes for inode in _socket_inodes(pid) if inode in sockets}
    assert listening, "found none of the local Ray's servers"
    assert all(map(_is_loopback, listening)), f"the local Ray listens on {sorted(listening)}"
