"""The code sandbox (sb3_r2po/common/sandbox.py): escapes a hostile policy tries, each refused or contained with the
parent fine afterwards, and how a correct, a broken and a crashing policy behave."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sb3_r2po.common import sandbox
from sb3_r2po.common.sandbox import CodeSandbox, PolicyError, SandboxError, SandboxTimeout

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="strict mode needs Linux")

CARTPOLE = """
import numpy as np

class CartPolePolicy:
    def act(self, obs):
        return int(3 * obs[2] + obs[3] + 0.1 * obs[0] + 0.5 * obs[1] > 0)
"""
OBS = np.array([[0.01, -0.02, 0.03, 0.04]], dtype=np.float32)


def policy(body: str, head: str = "import os") -> str:
    """A policy whose ``act`` runs ``body`` (indented into the method), after ``head`` at module level."""
    return f"{head}\n\nclass Hostile:\n    def act(self, obs):\n{textwrap.indent(textwrap.dedent(body), ' ' * 8)}"


def attempt(expression: str, head: str = "import os") -> str:
    """A policy acting 1 when ``expression`` ran and was truthy, 0 when it raised or was falsy."""
    return policy(f"try:\n    return int(bool({expression}))\nexcept Exception:\n    return 0", head)


def workers() -> list[int]:
    """The pids of every live process running the sandbox's worker (those forked from one included)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and sandbox.__file__.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture(autouse=True)
def no_worker_left() -> Iterator[None]:
    yield
    assert not workers(), "a sandbox worker (or a process it forked) outlived its test"


@pytest.fixture(scope="module")
def layers() -> tuple[str, ...]:
    with CodeSandbox(CARTPOLE) as box:
        return box.layers


def requires(layers: tuple[str, ...], *any_of: str) -> None:
    if not any(layer.startswith(name) for layer in layers for name in any_of):
        pytest.skip(f"this kernel offers none of the layers {any_of} that refuse this")


def act_once(source: str, **kwargs: Any) -> list[object]:
    with CodeSandbox(source, **kwargs) as box:
        return box.act(OBS).tolist()


def assert_parent_fine() -> None:
    with CodeSandbox(CARTPOLE) as box:
        assert box.act(OBS).tolist() == [1]


# escapes


def test_socket_connect_is_refused(layers: tuple[str, ...]) -> None:
    requires(layers, "netns", "seccomp", "landlock-abi")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        assert act_once(attempt(f"socket.create_connection(('127.0.0.1', {port}), timeout=0.5)", "import socket")) == [0]
        with pytest.raises(TimeoutError):
            listener.accept()
    assert_parent_fine()


@pytest.mark.parametrize(
    "expression",
    ["subprocess.run(['/bin/true']).returncode == 0", "os.system('/bin/true') == 0", "os.execv('/bin/true', ['true'])"],
)
def test_subprocess_and_exec_are_refused(layers: tuple[str, ...], expression: str) -> None:
    requires(layers, "seccomp", "landlock")
    assert act_once(attempt(expression, "import os, subprocess")) == [0]
    assert_parent_fine()


@pytest.mark.parametrize(
    "expression", ["open(PATH, 'w').write('x')", "os.open(PATH, os.O_CREAT | os.O_WRONLY)", "os.mkdir(PATH) or True"]
)
def test_file_writes_are_refused(layers: tuple[str, ...], tmp_path: Path, expression: str) -> None:
    requires(layers, "seccomp", "landlock")
    target = tmp_path / "written"
    assert act_once(attempt(expression.replace("PATH", repr(str(target))))) == [0]
    assert not target.exists() and not list(tmp_path.iterdir())
    assert_parent_fine()


@pytest.mark.parametrize("which", ["secret file", "/etc/hostname", "parent's /proc environ"])
def test_reading_outside_the_library_directories_is_refused(layers: tuple[str, ...], tmp_path: Path, which: str) -> None:
    requires(layers, "landlock")
    path = {"secret file": tmp_path / "secret.txt", "/etc/hostname": Path("/etc/hostname")}.get(
        which, Path(f"/proc/{os.getpid()}/environ")
    )
    if which == "secret file":
        path.write_text("the secret is 42")
    if not path.exists():
        pytest.skip(f"{path} does not exist here")
    read = policy(f"try:\n    return [ord(c) for c in open({str(path)!r}).read(64)] or [-2]\nexcept OSError:\n    return [-1]")
    assert act_once(read) == [[-1]]
    assert_parent_fine()


def test_the_parents_environment_is_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SB3_R2PO_TEST_API_KEY", "sk-sandbox-secret")
    seen = "any('sk-sandbox-secret' in value for value in os.environ.values()) or 'SB3_R2PO_TEST_API_KEY' in os.environ"
    assert act_once(attempt(seen)) == [0]
    assert act_once(attempt("'HOME' in os.environ or 'PATH' in os.environ")) == [0]
    assert_parent_fine()


def test_a_large_allocation_is_refused() -> None:
    with pytest.raises(PolicyError, match="MemoryError"):
        act_once(policy("return int(np.ones(2 << 30, dtype=np.uint8)[-1])", "import numpy as np"))
    assert_parent_fine()


def test_an_infinite_loop_is_killed_at_the_timeout() -> None:
    with CodeSandbox(policy("while True:\n    pass"), call_timeout=0.5) as box:
        start = time.monotonic()
        with pytest.raises(SandboxTimeout, match=r"0\.5 s timeout"):
            box.act(OBS)
        assert time.monotonic() - start < 1.0
        assert not workers()
        with pytest.raises(SandboxError, match="unusable"):
            box.act(OBS)
    assert_parent_fine()


def test_the_cpu_time_limit_kills_the_worker() -> None:
    start = time.monotonic()
    with pytest.raises(SandboxError, match="worker died during act \\(killed by signal"):
        act_once(policy("while True:\n    pass"), cpu_seconds=1, call_timeout=30)
    assert time.monotonic() - start < 10
    assert_parent_fine()


def test_a_fork_bomb_is_refused(layers: tuple[str, ...]) -> None:
    requires(layers, "seccomp", "nobody")
    with pytest.raises(PolicyError, match=r"PermissionError|BlockingIOError"):
        act_once(policy("while True:\n    os.fork()"))
    assert_parent_fine()


# behaviour


def test_a_cartpole_policy_acts_on_a_batch_and_scores_500() -> None:
    batch = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with CodeSandbox(CARTPOLE) as box:
        assert "rlimits" in box.layers
        assert box.act(batch).tolist() == [int(3 * o[2] + o[3] + 0.1 * o[0] + 0.5 * o[1] > 0) for o in batch]
        env = gym.make("CartPole-v1")
        for seed in range(3):
            obs, _ = env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(int(box.act(obs[None])[0]))
                total, done = total + float(reward), terminated or truncated
            assert total == 500.0


def test_a_policy_can_import_and_use_the_standard_library_and_numpy() -> None:
    head = "import math, random, sys, time\nimport numpy as np"
    body = """
    import statistics, heapq, fractions
    time.sleep(0.001)
    print("printed text goes to /dev/null, not into the protocol")
    spectrum = np.abs(np.fft.rfft(obs)).sum() + np.linalg.norm(obs)
    return [statistics.mean([1, 3]), heapq.nsmallest(1, [5, 4])[0], float(fractions.Fraction(1, 2)),
            random.random() < 1, math.isfinite(spectrum), len(sys.stdin.read())]
    """
    assert act_once(policy(body, head)) == [[2, 4, 0.5, 1, 1, 0]]


def test_trusted_mode_gives_the_same_actions_as_strict() -> None:
    source = policy("return obs * 2 if obs[0] > 0 else -obs", "import numpy as np")
    batch = np.random.default_rng(1).normal(size=(8, 3))
    with CodeSandbox(source) as strict, CodeSandbox(source, mode="trusted") as trusted:
        assert trusted.layers == ()
        strict_actions, trusted_actions = strict.act(batch), trusted.act(batch)
    assert strict_actions.dtype == trusted_actions.dtype == np.float64
    np.testing.assert_array_equal(strict_actions, trusted_actions)


@pytest.mark.parametrize("mode", ["strict", "trusted"])
def test_a_syntax_error_carries_its_traceback(mode: str) -> None:
    with pytest.raises(PolicyError, match="loading the policy's source raised") as error:
        CodeSandbox("class Broken:\n    def act(self, obs)\n        return 0\n", mode=mode)
    assert "SyntaxError" in error.value.traceback and "def act(self, obs)" in error.value.traceback


@pytest.mark.parametrize("mode", ["strict", "trusted"])
def test_a_crash_in_act_carries_its_shortened_traceback_and_ends_the_sandbox(mode: str) -> None:
    with CodeSandbox(policy("return helper(obs)", "def helper(obs):\n    return 1 / 0"), mode=mode) as box:
        with pytest.raises(PolicyError, match="act raised") as error:
            box.act(OBS)
        assert 'File "<policy>", line 2, in helper' in error.value.traceback
        assert "return 1 / 0" in error.value.traceback and "ZeroDivisionError" in error.value.traceback
        assert "sandbox.py" not in error.value.traceback
        with pytest.raises(SandboxError, match="unusable"):
            box.act(OBS)
    with pytest.raises(PolicyError) as error, CodeSandbox(policy("raise ValueError('x' * 5000)"), mode=mode) as box:
        box.act(OBS)
    assert len(error.value.traceback) <= 2000 and error.value.traceback.endswith("x")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "exactly one class.*defines none"),
        (CARTPOLE + "\nclass Other(CartPolePolicy):\n    pass\n", r"exactly one class.*\['CartPolePolicy', 'Other'\]"),
        (policy("return 'left'"), "act returned <U4 actions"),
        (policy("return [0] * int(obs[0] > 0) + [1]"), "do not form an array|act returned"),
    ],
)
def test_a_policy_without_one_class_or_numeric_actions_fails(source: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message), CodeSandbox(source) as box:
        box.act(np.array([[1.0], [-1.0]]))


def test_class_name_picks_the_class() -> None:
    source = CARTPOLE + "\nclass Left:\n    def act(self, obs):\n        return 0\n"
    assert act_once(source, class_name="Left") == [0]


def test_a_timeout_while_loading_kills_the_worker() -> None:
    with pytest.raises(SandboxTimeout, match="loading"):
        CodeSandbox(
            "class Slow:\n    def __init__(self):\n        while True: pass\n    def act(self, obs): return 0\n",
            call_timeout=0.3,
        )


@pytest.mark.parametrize(
    ("body", "status"),
    [("os._exit(3)", "exit code 3"), ("import ctypes\nctypes.string_at(0)", "killed by signal 11")],
)
def test_a_dead_worker_is_reported_with_its_exit_status(body: str, status: str) -> None:
    with pytest.raises(SandboxError, match=f"worker died during act \\({status}"):
        act_once(policy(body))
    assert_parent_fine()


def test_strict_mode_off_linux_names_the_weaker_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(SandboxError, match="mode='trusted'"):
        CodeSandbox(CARTPOLE)
    assert CodeSandbox(CARTPOLE, mode="trusted").act(OBS).tolist() == [1]


@pytest.mark.parametrize("mode", ["strict", "trusted"])
def test_a_method_other_than_act_gets_the_batch_as_a_list(mode: str) -> None:
    source = "class Feedback:\n    def summarize_trajectory(self, t):\n        return f'{len(t)} steps, last {t[-1][0]}'"
    with CodeSandbox(source, method="summarize_trajectory", mode=mode) as box:
        assert box.summarize(np.array([[0.0, 1.0], [2.0, 3.0]])) == "2 steps, last 2.0"
    numbers = "class Feedback:\n    def summarize_trajectory(self, traj):\n        return len(traj)\n"
    with pytest.raises(PolicyError, match="summarize_trajectory returned int, not a str"):
        CodeSandbox(numbers, method="summarize_trajectory", mode=mode).summarize(np.zeros((2, 2)))
