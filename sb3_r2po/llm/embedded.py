"""``llm="embedded"`` (``"embedded:0.5b"``, ``"embedded:1.5b"``): Qwen2.5-Coder-Instruct (GGUF) run in-process with
``llama-cpp-python`` (details: the embedded CPU model page of the documentation)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

import numpy as np

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle
from sb3_r2po.llm.base import (
    ChatReply,
    LLMBackendError,
    Message,
    TransientState,
    cut_off_reply,
    request_hash,
    request_settings,
)
from sb3_r2po.llm.grammar import GreedyGrammar, compile_grammar, max_reply_chars, parameter_grammar
from sb3_r2po.llm.weights import cache_directory, check_disk, ensure_model_file, locate_parts, model_spec

logger = logging.getLogger(__name__)


def available_memory() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes; ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def llama_system_info() -> str:
    """llama.cpp's ``llama_print_system_info()``; empty where it cannot say."""
    import llama_cpp

    try:
        return llama_cpp.llama_print_system_info().decode("utf-8", "replace")
    except Exception:  # an older or unusual build
        return ""


def llama_build_has_amx() -> bool:
    """Whether the installed llama.cpp has AMX kernels (``AMX_INT8 = 1``; a build that cannot say: no)."""
    return "AMX_INT8 = 1" in llama_system_info()


_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def model_params_override(**fields: Any) -> Iterator[None]:
    """The AMX crash workaround (ggml-org/llama.cpp#20824; ``Llama()`` has no ``use_extra_bufts`` argument): while
    active, ``Llama`` starts from model parameters with ``fields`` changed (fields this build lacks are ignored)."""
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


def default_threads() -> int:
    """The CPUs this process may run on (its affinity mask, else every CPU), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def busy_cpus(samples: int = 5, interval: float = 0.01) -> int | None:
    """Other running tasks: the fewest runnable in ``/proc/loadavg`` over ``samples`` reads, less this one (else ``None``)."""
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
    """Threads for the next call: ``max_threads`` less one per other running task, at least one."""
    busy = busy_cpus()
    if busy is None:
        return max_threads
    return max(1, min(max_threads, default_threads() - busy))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def reused_tokens(live: Sequence[int], served: Sequence[int] | None, prompt: Sequence[int]) -> int:
    """Of ``prompt``'s tokens, those llama-cpp-python reused from the ``live`` context or the ``served`` state: never all
    of them (the last one is evaluated again, for fresh logits)."""
    shared = max(common_prefix(live, prompt), common_prefix(served or (), prompt))
    return shared - 1 if shared == len(prompt) and shared > 0 else shared


class PrefixStateCache:
    """The most recently used llama.cpp states, found by the longest common token prefix (``Llama.set_cache``'s protocol),
    at most ``capacity_bytes`` of them (the least recently used are dropped first)."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self.capacity_bytes = int(capacity_bytes)
        self.states: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.served: tuple[int, ...] | None = None  # the tokens of the state the last lookup returned
        self.hits = 0

    @property
    def cache_size(self) -> int:
        """The bytes of the kept states: llama.cpp's state and the arrays ``input_ids`` and ``scores``."""
        arrays = [getattr(state, name, None) for state in self.states.values() for name in ("input_ids", "scores")]
        own = sum(int(getattr(state, "llama_state_size", 0)) for state in self.states.values())
        return own + sum(int(a.nbytes) for a in arrays if isinstance(a, np.ndarray))

    def _longest(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        best = max(self.states, key=lambda tokens: common_prefix(tokens, key), default=None)
        return best if best is not None and common_prefix(best, key) > 0 else None

    def __getitem__(self, key: Sequence[int]) -> Any:
        key = tuple(int(t) for t in key)
        self.served = None
        found = self._longest(key)
        if found is None:
            raise KeyError("no cached state shares a prefix with the prompt")
        self.states.move_to_end(found)
        self.served, self.hits = found, self.hits + 1
        return self.states[found]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._longest(tuple(int(t) for t in key)) is not None

    def __setitem__(self, key: Sequence[int], state: Any) -> None:
        """Keep ``state`` under the tokens it evaluated (``input_ids[:n_tokens]``), else under ``key``, without what no
        call reads: the tokens past ``n_tokens`` (stale ones would pass for a shared prefix) and all logits rows but one
        (of zeros, which ``Llama.load_state`` broadcasts)."""
        ids, n_tokens = getattr(state, "input_ids", None), getattr(state, "n_tokens", None)
        if isinstance(ids, np.ndarray) and isinstance(n_tokens, int):
            key = ids[:n_tokens].tolist()
            ids[n_tokens:] = -1
        scores = getattr(state, "scores", None)
        if isinstance(scores, np.ndarray) and scores.ndim == 2 and scores.shape[0] > 1:
            state.scores = np.zeros((1, scores.shape[1]), dtype=scores.dtype)
        key = tuple(int(t) for t in key)
        self.states.pop(key, None)
        self.states[key] = state
        while self.states and self.cache_size > self.capacity_bytes:
            self.states.popitem(last=False)


@dataclass(eq=False)
class EmbeddedBackend(TransientState):
    """A Qwen2.5-Coder-Instruct model run on the CPU with ``llama-cpp-python``, joined and loaded by the first :meth:`chat`.

    :param size: ``"0.5b"`` (about 0.8 GB of memory) or ``"1.5b"`` (about 1.5 GB).
    :param n_ctx: The context window in tokens (prompt and reply together).
    :param n_threads: CPU threads; ``None`` (default) chooses before every call (:func:`adaptive_threads`).
    :param max_tokens: The most tokens of one reply; under the grammar raised to the longest reply it admits.
    :param grammar: Whether to decode under a parameter grammar once :meth:`constrain` was called.
    :param reply_style: The reply shape the grammar enforces: ``"list"`` (``params: [v0, ...]``) or ``"indexed"``.
    :param grammar_first: Apply the grammar to the whole vocabulary at every step (``False``: check the greedy token first).
    :param reason_chars: When positive, the grammar lets a reply start with one line of at most this many characters.
    :param cache_dir: Where the joined GGUF is kept (default: :func:`~sb3_r2po.common.files.default_cache_dir`).
    :param seed: The sampling seed (a call's seed is drawn from it, the conversation and how often it was asked).
    :param extra_buffers: Allow llama.cpp's extra CPU buffers; ``None``: not with AMX kernels (:func:`model_params_override`).
    :param llama: An already loaded ``llama_cpp.Llama`` to answer with (not pickled; :meth:`close` closes it).
    :param prefix_cache: Resume each prompt from the kept state sharing its longest prefix (``False``: the last call's only).
    :param prefix_cache_bytes: The most memory the kept states may take.
    """

    size: str = "0.5b"
    n_ctx: int = 8192
    n_threads: int | None = field(default=None, repr=False)
    max_tokens: int = 512
    grammar: bool = True
    reply_style: ReplyStyle = "list"
    grammar_first: bool = False
    reason_chars: int = field(default=0, repr=False)
    cache_dir: str | os.PathLike[str] | None = field(default=None, repr=False)
    seed: int = field(default=0, repr=False)
    extra_buffers: bool | None = field(default=None, repr=False)
    llama: InitVar[Any] = None
    prefix_cache: bool = field(default=True, repr=False)
    prefix_cache_bytes: int = field(default=512 * 2**20, repr=False)
    _transient = ("_llm", "_grammar", "greedy_grammar", "threads", "state_cache")
    _least = (("n_ctx", 256), ("max_tokens", 1), ("n_threads", 1), ("reason_chars", 0), ("prefix_cache_bytes", 0))

    def __post_init__(self, llama: Any) -> None:
        self.spec = model_spec(self.size)
        for name, least in self._least:
            value = getattr(self, name)
            if value is not None and value < least:
                bound = f"at least {least}" if least else ">= 0"
                raise ValueError(f"{name} must be {bound}, got {value}")
        if self.reply_style not in REPLY_STYLES:
            raise ValueError(f"reply_style must be one of {REPLY_STYLES}, got {self.reply_style!r}")
        self.size = self.spec.size
        self.grammar_text: str | None = None
        self.grammar_max_chars = 0
        self._asked: dict[str, int] = {}  # conversation hash -> times asked
        self._llm: Any = llama
        self._grammar: Any = None
        self.greedy_grammar: GreedyGrammar | None = None  # made by the first constrained call at temperature 0
        self.threads = 0  # the threads llama.cpp uses now; 0 before loading
        self.state_cache: PrefixStateCache | None = None  # the kept states of recent calls, once a call was made
        self._lock = threading.Lock()

    def constrain(self, space: ParameterSpace | None) -> None:
        """Decode the following replies under a grammar admitting one parameter reply for ``space`` (``None`` lifts it)."""
        with self._lock:
            if space is None:
                self.grammar_text, self.grammar_max_chars = None, 0
            else:
                self.grammar_text = parameter_grammar(space, style=self.reply_style, reason_chars=self.reason_chars)
                self.grammar_max_chars = max_reply_chars(space, style=self.reply_style, reason_chars=self.reason_chars)
            self._drop_greedy()
            self._grammar = (
                None if self._llm is None or self.grammar_text is None else compile_grammar(self.grammar_text, self._llm)
            )

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._llm is not None

    def memory_needed(self) -> int:
        """Bytes the loaded model needs: weights, KV cache for ``n_ctx``, 300 MiB of buffers, the prefix cache."""
        cache = self.prefix_cache_bytes if self.prefix_cache else 0
        return self.spec.total_bytes + self.spec.kv_bytes_per_token * self.n_ctx + 300 * 2**20 + cache

    def check_resources(self) -> None:
        """Raise :class:`LLMBackendError` saying what to install or free, before anything is joined or loaded."""
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMBackendError(
                "llm='embedded' needs llama-cpp-python (it builds from source, a few minutes): "
                "pip install llama-cpp-python   (or: pip install 'sb3-r2po[embedded]')"
            )
        directory = cache_directory(self.cache_dir)
        cached = directory / self.spec.filename
        if not (cached.is_file() and cached.stat().st_size == self.spec.total_bytes):
            locate_parts(self.spec)
            check_disk(directory, self.spec)
        free = available_memory()
        needed = self.memory_needed()
        if free is not None and free < needed:
            raise LLMBackendError(
                f"{self.spec.model} with n_ctx={self.n_ctx} needs about {needed / 2**30:.1f} GiB of memory, "
                f"{free / 2**30:.1f} GiB is available; free memory, lower n_ctx or use size='0.5b'"
            )

    def load(self) -> Any:
        """Join (when needed) and load the model; return the ``llama_cpp.Llama``. Idempotent."""
        with self._lock:
            return self._load_locked()

    prepare = load

    def _load_locked(self) -> Any:
        if self._llm is not None:
            return self._llm
        self.check_resources()  # says what is missing, llama-cpp-python first
        from llama_cpp import Llama

        path = ensure_model_file(self.size, self.cache_dir)
        threads = self.threads = self.n_threads or default_threads()
        extra = self.extra_buffers if self.extra_buffers is not None else not llama_build_has_amx()
        start = time.perf_counter()
        try:
            with model_params_override(use_extra_bufts=extra):
                llm = Llama(
                    str(path), n_ctx=self.n_ctx, n_threads=threads, n_threads_batch=threads, seed=self.seed, verbose=False
                )
        except Exception as exc:
            raise LLMBackendError(f"llama.cpp could not load {path}: {exc}") from exc
        if "tokenizer.chat_template" not in llm.metadata:
            raise LLMBackendError(f"{path} has no chat template in its GGUF metadata")
        if self.prefix_cache:
            # Llama.scores (public) holds n_batch rows of logits a chat completion never reads, which save_state and
            # load_state copy (311 MB): one row keeps the prefix cache cheap (LLM time 1.29x without it: performance page)
            llm.scores = np.zeros((1, llm.n_vocab()), dtype=np.single)
        self._llm = llm
        seconds = time.perf_counter() - start
        logger.info("loaded %s (%d threads, extra buffers %s) in %.1f s", self.spec.model, threads, extra, seconds)
        self._grammar = None if self.grammar_text is None else compile_grammar(self.grammar_text, llm)
        return llm

    def _drop_greedy(self) -> None:
        if self.greedy_grammar is not None:
            self.greedy_grammar.close()
            self.greedy_grammar = None

    def close(self) -> None:
        """Free the model and the kept states (the model is loaded again on the next call)."""
        with self._lock:
            llm, self._llm, self._grammar, self.state_cache = self._llm, None, None, None
            self._drop_greedy()
        if llm is not None and hasattr(llm, "close"):
            llm.close()

    def _call_seed(self, messages: Sequence[Message], temperature: float) -> int:
        key = request_hash(messages, request_settings(temperature))
        nth = self._asked.get(key, 0)
        self._asked[key] = nth + 1
        digest = hashlib.sha256(f"{self.seed}:{key}:{nth}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2**31)

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        """One completion with the model's chat template (greedy at temperature 0)."""
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        with self._lock:
            llm = self._load_locked()
            if self.n_threads is None:
                threads = adaptive_threads(default_threads())
                if threads != self.threads:
                    import llama_cpp

                    llama_cpp.llama_set_n_threads(llm.ctx, threads, threads)
                    self.threads = threads
            grammar = self._grammar if self.grammar else None
            max_tokens = max(self.max_tokens, self.grammar_max_chars + 1) if grammar is not None else self.max_tokens
            constraint: dict[str, Any] = {"grammar": grammar}
            if grammar is not None and temperature == 0 and not self.grammar_first:
                if self.greedy_grammar is None:
                    assert self.grammar_text is not None
                    self.greedy_grammar = GreedyGrammar(llm, self.grammar_text)
                self.greedy_grammar.reset()
                constraint = {"grammar": None, "logits_processor": [self.greedy_grammar]}
            seed = self._call_seed(messages, temperature)
            request = {"temperature": float(temperature), "max_tokens": max_tokens, "seed": seed}
            start = time.perf_counter()
            out, cached = self._complete(llm, messages=[dict(m) for m in messages], **request, **constraint)
            seconds = time.perf_counter() - start
        choice = out["choices"][0]
        text = choice["message"].get("content") or ""
        usage = out.get("usage") or {}
        if choice.get("finish_reason") == "length":
            cut = "%s reply was cut off at max_tokens=%d or n_ctx=%d; only its complete lines are read"
            logger.warning(cut, self.spec.model, max_tokens, self.n_ctx)
            text = cut_off_reply(text)
        return ChatReply(
            text, usage.get("prompt_tokens"), usage.get("completion_tokens"), seconds, prompt_tokens_cached=cached
        )

    def _complete(self, llm: Any, **request: Any) -> tuple[dict[str, Any], int | None]:
        """One ``create_chat_completion`` and the prompt tokens it took from an earlier state (``None`` for a stand-in)."""
        if self.prefix_cache and self.state_cache is None and hasattr(llm, "set_cache"):
            self.state_cache = PrefixStateCache(self.prefix_cache_bytes)
            llm.set_cache(self.state_cache)
        ids = getattr(llm, "input_ids", None)
        live = ids[: int(llm.n_tokens)].tolist() if ids is not None else []
        try:
            out = llm.create_chat_completion(**request)
        except ValueError as exc:
            raise LLMBackendError(f"{self.spec.model}: {exc} (n_ctx={self.n_ctx}; raise n_ctx for longer prompts)") from exc
        except RuntimeError as exc:
            raise LLMBackendError(f"{self.spec.model} failed: {exc}") from exc
        prompt_tokens = (out.get("usage") or {}).get("prompt_tokens")
        if ids is None or not isinstance(prompt_tokens, int):
            return out, None
        served = self.state_cache.served if self.state_cache is not None else None
        return out, reused_tokens(live, served, llm.input_ids[:prompt_tokens].tolist())
