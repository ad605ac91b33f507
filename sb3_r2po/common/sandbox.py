"""Run a policy written as Python source (an LLM's) in a hardened worker process (``mode="strict"``, Linux only: the
Code policies page, "Security model"), one round trip per batch, or in this process (``mode="trusted"``: no protection)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import linecache
import os
import select
import signal
import struct
import subprocess
import sys
import sysconfig
import time
import traceback
import warnings
from typing import Any, NoReturn

import numpy as np

POLICY_FILE = "<policy>"  # the policy's file name in its tracebacks
MAX_REPLY_BYTES = 16 << 20
START_TIMEOUT = 30.0  # seconds the worker may take to start, import numpy and harden itself
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
NOBODY = 65534
MAX_TRACEBACK_LINES = 20  # ours: PromptPO shows a traceback whole
# The read-act-write loop, memory, time, randomness, imports (with a read-only openat): found by removing each in turn
ALLOWED_SYSCALLS = (
    *("read", "write", "close", "newfstatat", "fstat", "stat", "lstat", "getdents64"),  # fstat, stat: older glibc
    *("mmap", "munmap", "mremap", "mprotect", "brk", "madvise", "futex", "exit", "exit_group", "rt_sigreturn"),
    *("clock_gettime", "clock_nanosleep", "getrandom"),
)
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_READ = 0b1100  # LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR


def shorten_traceback(text: str, max_lines: int = MAX_TRACEBACK_LINES) -> str:
    """``text`` (a traceback), stripped, in at most ``max_lines`` lines: its first and last ones, a note of the rest."""
    lines = text.strip().splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join([lines[0], f"... ({len(lines) - max_lines + 1} lines left out)", *lines[2 - max_lines :]])


class SandboxError(RuntimeError):
    """The sandbox cannot go on: its worker died or broke the protocol, or the sandbox failed earlier or is closed."""


class PolicyError(SandboxError):
    """The policy's code failed: its source did not compile or load, ``act`` raised or returned no numbers.

    :param message: what failed
    :param traceback: the traceback ("" if none); ``.traceback``: it :func:`shortened <shorten_traceback>`, last 2,000 chars
    """

    def __init__(self, message: str, traceback: str = "") -> None:
        self.traceback = shorten_traceback(traceback)[-2000:]
        super().__init__(f"{message}\n{self.traceback}" if traceback else message)


class SandboxTimeout(SandboxError, TimeoutError):
    """A call to the worker ran past its timeout; the worker was killed."""


class CodeSandbox(contextlib.AbstractContextManager["CodeSandbox"]):
    """A policy's source, loaded once and called with batches of observations.

    :param source: Python source defining the policy class (``act(self, obs)``; instantiated once, without arguments)
    :param class_name: the class to use; ``None``: the one class the source defines with a ``method``
    :param method: ``"act"``: :meth:`act` calls it once per observation; another name: :meth:`summarize` calls it once
        with the batch as a list (PromptPO's ``Feedback.summarize_trajectory``)
    :param mode: ``"strict"``: a hardened worker process (Linux only); ``"trusted"``: this process, no protection
    :param call_timeout: seconds a call (loading the source, or a batch) may take in strict mode; past it the worker is killed
    :param memory_mb: the worker's address-space limit in MiB
    :param cpu_seconds: the worker's CPU time limit over its whole life, in seconds
    :raises PolicyError: the source does not compile or its class cannot be found or instantiated
    :raises SandboxError: strict mode off Linux, or the worker could not start
    """

    def __init__(
        self,
        source: str,
        *,
        class_name: str | None = None,
        method: str = "act",
        mode: str = "strict",
        call_timeout: float = 1.0,
        memory_mb: int = 1024,
        cpu_seconds: int = 3600,
    ) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._policy: Any = None
        self._failure: str | None = None
        self.mode, self.call_timeout, self.method = mode, call_timeout, method
        self.layers: tuple[str, ...] = ()  # the hardening layers applied to the worker (none in trusted mode)
        if mode == "trusted":
            try:
                self._policy = _load_policy(source, class_name, method)
            except Exception as exc:
                self._fail(PolicyError("loading the policy's source raised", _format_error(exc)))
            return
        if mode != "strict":
            raise ValueError(f"mode must be 'strict' or 'trusted', not {mode!r}")
        if not sys.platform.startswith("linux"):
            raise SandboxError(
                f"mode='strict' needs Linux (this is {sys.platform}); pass mode='trusted' to run the policy's code in "
                "this process without any protection"
            )
        settings = json.dumps({"memory_mb": memory_mb, "cpu_seconds": cpu_seconds})
        self._process = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), settings],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=WORKER_ENV,
            cwd="/",
            bufsize=0,
            start_new_session=True,  # its own process group, killed whole by close()
        )
        assert self._process.stdin is not None
        os.set_blocking(self._process.stdin.fileno(), False)
        report = self._call(None, START_TIMEOUT, "the worker's start")  # sent before any of the policy's code runs
        self.layers = tuple(report["layers"])
        for missing in report["missing"]:
            warnings.warn(f"the code sandbox runs without {missing}; its other layers stay on", RuntimeWarning, stacklevel=2)
        self._call(json.dumps([source, class_name, method]).encode(), call_timeout, "loading the policy's source")

    def act(self, observations: np.ndarray) -> np.ndarray:
        """The policy's actions for a batch of observations, in one round trip to the worker.

        :param observations: a numeric array, one observation per entry of its first axis
        :return: one action per observation (an array of numbers; its dtype and shape follow what ``act`` returned)
        :raises PolicyError: ``act`` raised (the shortened traceback attached) or returned something not numeric
        :raises SandboxTimeout: the batch took longer than ``call_timeout``
        :raises SandboxError: the worker died, or the sandbox failed earlier or is closed
        """
        actions = self._run(observations)
        try:
            array = np.asarray(actions)
        except ValueError as exc:
            self._fail(PolicyError(f"act returned actions that do not form an array: {exc}"))
        if not isinstance(actions, list) or len(actions) != len(observations) or array.dtype.kind not in "biuf":
            self._fail(PolicyError(f"act returned {array.dtype} actions; it must return an int, float, list or array"))
        return array

    def summarize(self, observations: np.ndarray) -> str:
        """``method`` called once with ``observations`` as a list, in one round trip; it must return a str."""
        if not isinstance(summary := self._run(observations), str):
            self._fail(PolicyError(f"{self.method} returned {type(summary).__name__}, not a str"))
        return summary

    def _run(self, observations: np.ndarray) -> Any:
        observations = np.ascontiguousarray(observations)
        if observations.dtype.hasobject:
            raise TypeError(f"observations must be numeric, not {observations.dtype}")
        if self._process is not None or self._failure is not None:
            header = json.dumps([observations.dtype.str, observations.shape]).encode()
            return self._call(header + b"\n" + observations.tobytes(), self.call_timeout, self.method)
        try:
            return _act_batch(self._policy, observations, self.method)
        except Exception as exc:
            self._fail(PolicyError(f"{self.method} raised", _format_error(exc)))

    def close(self) -> None:
        """Kill the worker (if any); the sandbox is unusable afterwards. Calling it again does nothing."""
        self._policy = None
        self._failure = self._failure or "it is closed"
        process, self._process = self._process, None
        if process is not None:
            with process, contextlib.suppress(ProcessLookupError):  # leaving it closes the pipes and reaps the worker
                os.killpg(process.pid, signal.SIGKILL)  # the worker and whatever it forked where forking was allowed

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _fail(self, error: SandboxError) -> NoReturn:
        self._failure = str(error).splitlines()[0]
        self.close()
        raise error

    def _call(self, message: bytes | None, timeout: float, what: str) -> Any:
        """Send ``message`` (``None``: nothing) framed, read the worker's JSON reply and return its ``"ok"`` value."""
        if self._failure is not None or self._process is None:
            raise SandboxError(f"the sandbox is unusable: {self._failure}")
        assert self._process.stdin is not None and self._process.stdout is not None
        deadline = time.monotonic() + timeout
        try:
            if message is not None:
                _write(self._process.stdin.fileno(), len(message).to_bytes(8, "little") + message, deadline)
            reply = json.loads(_receive(self._process.stdout.fileno(), deadline, MAX_REPLY_BYTES))
        except TimeoutError:
            self._fail(SandboxTimeout(f"{what} ran past its {timeout:g} s timeout; the worker was killed"))
        except (EOFError, BrokenPipeError):
            try:
                code = self._process.wait(timeout=1.0)
                how = f"killed by signal {-code}: {signal.strsignal(-code)}" if code < 0 else f"exit code {code}"
            except subprocess.TimeoutExpired:
                how = "it closed its output"
            self._fail(SandboxError(f"the sandbox's worker died during {what} ({how})"))
        except (ValueError, RecursionError) as exc:
            self._fail(SandboxError(f"the sandbox's worker broke the protocol during {what}: {exc}"))
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            self._fail(PolicyError(f"{what} raised", reply["error"]))
        if not isinstance(reply, dict) or "ok" not in reply:
            self._fail(SandboxError(f"the sandbox's worker broke the protocol during {what}: no 'ok' or 'error'"))
        return reply["ok"]


def _format_error(exc: BaseException) -> str:
    """The traceback of ``exc`` from the policy's first frame on (the exception alone when no frame is the policy's)."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_frame.f_code.co_filename != POLICY_FILE:
        frame = frame.tb_next
    return "".join(traceback.format_exception(type(exc), exc, frame))


def _load_policy(source: str, class_name: str | None, method: str) -> Any:
    linecache.cache[POLICY_FILE] = (len(source), None, source.splitlines(True), POLICY_FILE)
    namespace: dict[str, Any] = {"__name__": "policy"}
    exec(compile(source, POLICY_FILE, "exec"), namespace)
    found = [k for k, v in namespace.items() if isinstance(v, type) and v.__module__ == "policy" and hasattr(v, method)]
    chosen = [name for name in found if class_name in (None, name)]
    if len(chosen) != 1:
        wanted = f"a class {class_name!r}" if class_name else "exactly one class"
        raise LookupError(f"the source must define {wanted} with a {method} method; it defines {found or 'none'}")
    return namespace[chosen[0]]()


def _act_batch(policy: Any, observations: np.ndarray, method: str) -> Any:
    if method != "act":
        return getattr(policy, method)(list(observations))
    actions = (policy.act(observation) for observation in observations)
    return [a if isinstance(a, (int, float)) else np.asarray(a).tolist() for a in actions]  # JSON's types


def _receive(fd: int, deadline: float | None = None, limit: int | None = None) -> bytearray:
    """One frame from ``fd``: its length (8 bytes, little-endian), then its bytes. ``EOFError`` at the end of ``fd``,
    ``TimeoutError`` past ``deadline`` (``time.monotonic``), ``ValueError`` for more than ``limit`` bytes."""
    data, size = bytearray(), 8
    while len(data) < size:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        chunk = os.read(fd, max(1 << 16, size - len(data)))
        if not chunk:
            raise EOFError
        data += chunk
        if size == 8 and len(data) >= 8:
            size += int.from_bytes(data[:8], "little")
            if limit is not None and size - 8 > limit:
                raise ValueError(f"a reply of {size - 8} bytes (at most {limit})")
    return data[8:size]


def _write(fd: int, data: bytes, deadline: float) -> None:
    """Write ``data`` to the non-blocking ``fd``; ``TimeoutError`` past ``deadline`` (``time.monotonic``)."""
    view = memoryview(data)
    while True:
        with contextlib.suppress(BlockingIOError):
            view = view[os.write(fd, view) :]
        if not view:
            return
        if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
            raise TimeoutError


def _syscall(libc: ctypes.CDLL, number: int, *args: Any) -> int:
    result: int = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def _landlock(libc: ctypes.CDLL, directories: list[str]) -> str:
    """Restrict this process to reading ``directories``, no TCP, no signals out; return the layer's name."""
    abi = _syscall(libc, _LANDLOCK_CREATE_RULESET, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    fs_rights = (1 << {1: 13, 2: 14, 3: 15, 4: 15}.get(abi, 16)) - 1  # every file-system right this ABI knows
    attr = struct.pack("<QQQ", fs_rights, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)  # handled: fs, TCP, scopes
    ruleset = _syscall(libc, _LANDLOCK_CREATE_RULESET, attr, 8 if abi < 4 else 16 if abi < 6 else 24, 0)
    try:
        for directory in directories:
            fd = os.open(directory, os.O_PATH | os.O_CLOEXEC)
            try:
                _syscall(libc, _LANDLOCK_ADD_RULE, ruleset, 1, struct.pack("<Qi", _LANDLOCK_READ, fd), 0)
            finally:
                os.close(fd)
        _syscall(libc, _LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    return f"landlock-abi{abi}"


def _become_nobody(directories: list[str]) -> bool:
    """Switch to uid and gid ``nobody`` if ``nobody`` can read ``directories``; whether it did."""
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    readable = all(os.access(directory, os.R_OK | os.X_OK, effective_ids=True) for directory in directories)
    os.seteuid(0)
    os.setegid(0)
    if readable:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    return readable


def _harden(memory_mb: int, cpu_seconds: int) -> tuple[list[str], list[str]]:
    """Apply every layer this system allows to this process: (the layers applied, the layers missing and why)."""
    import resource

    layers, missing = [], []
    try:  # before anything else: finding libseccomp runs ldconfig
        import pyseccomp as seccomp  # type: ignore[import-untyped]

        rules = seccomp.SyscallFilter(seccomp.ERRNO(errno.EPERM))
        for name in ALLOWED_SYSCALLS:
            rules.add_rule(seccomp.ALLOW, name)
        writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        rules.add_rule(seccomp.ALLOW, "openat", seccomp.Arg(2, seccomp.MASKED_EQ, writing, 0))
    except (ImportError, RuntimeError, OSError) as exc:
        rules = None
        missing.append(f"seccomp ({exc})")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: Landlock and seccomp need it without CAP_SYS_ADMIN
    if libc.unshare(_CLONE_NEWNET) == 0 or libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        layers.append("netns")
    else:
        missing.append(f"a network namespace ({os.strerror(ctypes.get_errno())})")
    paths = {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    directories = sorted({*paths, os.path.dirname(os.path.dirname(np.__file__))})  # numpy's, wherever it is
    if os.getuid() == 0 and _become_nobody(directories):
        layers.append("nobody")
    try:
        layers.append(_landlock(libc, directories))
    except OSError as exc:
        missing.append(f"Landlock ({exc.strerror})")
    limits = {"AS": memory_mb << 20, "CPU": cpu_seconds, "FSIZE": 0, "NPROC": 0, "NOFILE": 16, "CORE": 0}
    for name, value in limits.items():
        limit = getattr(resource, f"RLIMIT_{name}")
        hard = resource.getrlimit(limit)[1]
        resource.setrlimit(limit, (value, value) if hard == resource.RLIM_INFINITY else (min(value, hard),) * 2)
    layers.append("rlimits")
    if rules is not None:
        try:
            rules.load()
            layers.append("seccomp")
        except OSError as exc:
            missing.append(f"seccomp ({exc})")
    return layers, missing


def _serve(memory_mb: int, cpu_seconds: int) -> None:
    """The worker: harden, report, load the policy, then answer batches until the parent closes the pipe."""
    for name in ("math", "random"):  # numpy is imported already
        __import__(name)
    requests, replies = os.dup(0), os.dup(1)
    os.dup2(2, 0)  # /dev/null: what the policy prints or reads cannot reach the protocol
    os.dup2(2, 1)
    layers, missing = _harden(memory_mb, cpu_seconds)
    body = json.dumps({"ok": {"layers": layers, "missing": missing}}).encode()
    policy = None
    while True:
        os.write(replies, len(body).to_bytes(8, "little") + body)
        try:
            message = _receive(requests)
        except EOFError:
            return
        try:
            if policy is None:
                (source, class_name, method), result = json.loads(message), None
                policy = _load_policy(source, class_name, method)
            else:
                header, _, data = message.partition(b"\n")
                dtype, shape = json.loads(header)
                result = _act_batch(policy, np.frombuffer(data, dtype=dtype).reshape(shape), method)  # writable: a bytearray
            body = json.dumps({"ok": result}).encode()
        except BaseException as exc:
            body = json.dumps({"error": _format_error(exc)}).encode()


if __name__ == "__main__":
    _serve(**json.loads(sys.argv[1]))
