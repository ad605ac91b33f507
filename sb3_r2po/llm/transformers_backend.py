"""A chat backend running a Hugging Face model in-process through a ``transformers`` text-generation pipeline, as
the R2PO paper ran gpt-oss-20b (the default ``llm``); harmony replies, batches and token counts as the "Reasoning
effort" section of the LLM backends page describes them."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from sb3_r2po.common.parameters import complete_answer, final_channel, is_harmony
from sb3_r2po.llm.base import (
    HARMONY_STOP_TOKENS,
    ChatReply,
    LLMBackendError,
    Message,
    TransientState,
    check_reasoning_effort,
    cut_off_reply,
    retry_request,
)

DEFAULT_MODEL = "openai/gpt-oss-20b"

KNOWN_LARGE_MODELS: dict[str, float] = {"gpt-oss-20b": 16.0, "gpt-oss-120b": 80.0}
"""GPU memory (GB) that known large models need, keyed by the last part of their id (MXFP4 weights)."""

logger = logging.getLogger(__name__)


def required_gpu_memory_gb(model: str) -> float | None:
    """GPU memory (GB) a Hugging Face model id or local directory needs when known to be large (:data:`KNOWN_LARGE_MODELS`
    by the last path component, or a local gpt-oss checkpoint of at least 4 GB by its weight files); ``None`` otherwise."""
    if (base := re.split(r"[/\\]", model.rstrip("/\\").lower())[-1]) in KNOWN_LARGE_MODELS:
        return KNOWN_LARGE_MODELS[base]
    path = Path(model).expanduser()
    config = path / "config.json"
    if path.is_dir() and config.is_file():
        try:
            model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError):
            return None
        if model_type == "gpt_oss":
            size_gb = sum(f.stat().st_size for f in path.glob("*.safetensors")) / 1e9
            if size_gb >= 4.0:
                return round(size_gb * 1.15, 1)
    return None


@dataclass(eq=False, repr=False)
class TransformersBackend(TransientState):
    """Run a chat model in-process with a ``transformers`` text-generation pipeline (gpt-oss harmony aware).

    :param model: A Hugging Face model id, a local model directory, or a loaded ``PreTrainedModel`` (with ``tokenizer``).
    :param tokenizer: A tokenizer object or id; by default the model's own.
    :param reasoning_effort: ``"low"``, ``"medium"`` or ``"high"``: the template's ``reasoning_effort``; ``None``: its default.
    :param max_new_tokens: Token budget of one reply (reasoning included).
    :param retry_budget_factor: Budget multiplier (at least +1 token) of the one retry of a reply without an answer (0: none).
    :param retry_lower_effort: Whether the retry also uses one step lower reasoning effort.
    :param dtype: Weights dtype for loading (``"auto"``: as stored).
    :param device: ``"cuda"``, ``"cpu"``, ... ; ``None`` picks CUDA when available.
    :param device_map: Passed to the pipeline on CUDA when ``device`` is ``None`` or ``"cuda"`` and ``accelerate`` is
        installed; otherwise the model is put on ``device`` (a named GPU such as ``"cuda:1"`` is honoured).
    :param batch_size: Most conversations per ``generate`` call in :meth:`chat_batch`; ``None``: all at once.
    :param memory_check: Refuse known-too-large models without a big enough GPU (before any download).
    :param trust_remote_code: Passed to the pipeline.
    :param model_kwargs: Extra ``from_pretrained`` keyword arguments. With the Hub offline, ``use_kernels`` is
        ``False`` unless given here (the Hub's compiled kernels cannot be fetched offline).
    :param generate_kwargs: Extra ``generate`` keyword arguments (e.g. ``{"top_p": 1.0}``).
    """

    model: Any = DEFAULT_MODEL
    _: KW_ONLY
    tokenizer: Any = None
    reasoning_effort: str | None = "medium"
    max_new_tokens: int = 4096
    retry_budget_factor: float = 2.0
    retry_lower_effort: bool = True
    dtype: Any = "auto"
    device: str | None = None
    device_map: str | dict[str, Any] | None = "auto"
    batch_size: int | None = None
    memory_check: bool = True
    trust_remote_code: bool = False
    model_kwargs: dict[str, Any] | None = None
    generate_kwargs: dict[str, Any] | None = None
    _transient = ("_pipe", "_stop_ids")

    def __post_init__(self) -> None:
        if isinstance(self.model, os.PathLike):
            self.model = os.fspath(self.model)
        check_reasoning_effort(self.reasoning_effort)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {self.batch_size}")
        self.max_new_tokens = int(self.max_new_tokens)
        self.retry_budget_factor = float(self.retry_budget_factor)
        self.model_kwargs = dict(self.model_kwargs or {})
        self.generate_kwargs = dict(self.generate_kwargs or {})
        # replies asked for, ``generate`` calls, retries, replies still without a (complete) final channel
        self.stats: dict[str, int] = {"calls": 0, "generate_calls": 0, "retries": 0, "no_final": 0}
        self._pipe: Any = None
        self._stop_ids: list[int] | None = None
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The model id or path (or the class name of a model object)."""
        if isinstance(self.model, str):
            return self.model
        return str(getattr(getattr(self.model, "config", None), "name_or_path", None) or type(self.model).__name__)

    def check_resources(self) -> None:
        """Raise :class:`LLMBackendError` when the model is known to need more GPU memory than any CUDA device has
        (``memory_check``; also run before the first load). Cheap: nothing is loaded."""
        need = required_gpu_memory_gb(self.model) if self.memory_check and isinstance(self.model, str) else None
        if need is None:
            return
        import torch

        devices = range(torch.cuda.device_count()) if torch.cuda.is_available() else ()
        have = max((torch.cuda.get_device_properties(i).total_memory / 1e9 for i in devices), default=0.0)
        if have >= need:
            return
        found = "no CUDA device was found" if have == 0 else f"the largest CUDA device has {have:.1f} GB"
        raise LLMBackendError(
            f"llm={self.model!r} needs a CUDA GPU with about {need:.0f} GB of memory, but {found}; "
            "on a CPU it does not fit (dequantized to bf16, gpt-oss-20b needs 40-48 GB of RAM). Nothing was downloaded "
            'or loaded. Use llm="embedded" (a small model that runs on the CPU through llama.cpp), or an '
            'OpenAI-compatible server serving the model elsewhere, e.g. llm="http://127.0.0.1:8000/v1" (vLLM, SGLang, '
            "llama.cpp server, Ollama, transformers serve). To try anyway, build TransformersBackend(..., memory_check=False)."
        )

    @property
    def loaded(self) -> bool:
        """Whether the pipeline has been built."""
        return self._pipe is not None

    @property
    def pipeline(self) -> Any:
        """The ``transformers`` text-generation pipeline (built on first use)."""
        if self._pipe is None:
            with self._lock:
                if self._pipe is None:
                    self._pipe = self._build_pipeline()
        return self._pipe

    def prepare(self) -> None:
        """Build the pipeline (load the model) now (:class:`~sb3_r2po.llm.base.Preparable`)."""
        _ = self.pipeline

    def _build_pipeline(self) -> Any:
        self.check_resources()
        logger.info("loading %s with transformers", self.model_name)
        import torch
        from transformers import pipeline

        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            pipe = pipeline("text-generation", model=self.model, **self._pipeline_kwargs(device))
        except Exception as exc:  # missing files offline, unknown id, bad directory, out of memory, ...
            hint = " (the Hub is offline: only already downloaded models can load)" if _offline() else ""
            raise LLMBackendError(
                f"Could not load llm={self.model_name!r} with transformers{hint}: {type(exc).__name__}: {exc}"
            ) from exc
        tok = pipe.tokenizer
        if tok is None:
            raise LLMBackendError(f"llm={self.model_name!r}: the text-generation pipeline has no tokenizer")
        if tok.pad_token_id is None:  # prefer a token that does not end a harmony reply
            tok.pad_token = "<|endoftext|>" if "<|endoftext|>" in tok.get_vocab() else tok.eos_token
        tok.padding_side = "left"
        self._stop_ids = _stop_token_ids(pipe)
        return pipe

    def _pipeline_kwargs(self, device: str) -> dict[str, Any]:
        """The ``pipeline()`` keyword arguments besides the task and the model, for a model that runs on ``device``."""
        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.tokenizer is not None:
            kwargs["tokenizer"] = self.tokenizer
        if not isinstance(self.model, str):  # a model object is already loaded
            return kwargs if self.device is None else {**kwargs, "device": self.device}
        kwargs["dtype"] = self.dtype
        model_kwargs = dict(self.model_kwargs or {})  # a copy: the pipeline adds to the dict it is given
        if _offline() and "use_kernels" not in model_kwargs:
            logger.info("the Hub is offline: loading %s without the Hub's kernels (use_kernels=False)", self.model_name)
            model_kwargs["use_kernels"] = False
        if model_kwargs:
            kwargs["model_kwargs"] = model_kwargs
        placed = self.device not in (None, "cuda")  # a given device ("cuda:1") is honoured, not mapped away
        if device.startswith("cuda") and not placed and self.device_map is not None and has_accelerate():
            kwargs["device_map"] = self.device_map
        else:
            kwargs["device"] = device
        return kwargs

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        return self.chat_batch([messages], temperature=temperature)[0]

    def chat_batch(self, conversations: Sequence[Sequence[Message]], *, temperature: float = 0.0) -> list[ChatReply]:
        """Answer several independent conversations as one batch (one ``generate`` call, left padding)."""
        convs = [[dict(m) for m in conv] for conv in conversations]
        if not convs:
            return []
        self.stats["calls"] += len(convs)
        effort = self.reasoning_effort
        raw, seconds = self._generate(convs, effort, self.max_new_tokens, temperature)
        prompt_tokens = [self._count_prompt(c, effort) for c in convs]
        completion_tokens = [self._count_completion(r) for r in raw]
        spent = [seconds] * len(convs)
        missing = [i for i, text in enumerate(raw) if not final_channel(text)]  # no answer begun (a cut one is read)
        retry = retry_request(effort, self.max_new_tokens, self.retry_budget_factor, self.retry_lower_effort)
        if missing and retry is not None:
            self.stats["retries"] += len(missing)
            effort2, budget = retry[0], retry[1] or self.max_new_tokens  # a budget is always given here
            raw2, seconds2 = self._generate([convs[i] for i in missing], effort2, budget, temperature)
            for i, text in zip(missing, raw2, strict=True):
                raw[i] = text
                prompt_tokens[i] += self._count_prompt(convs[i], effort2)
                completion_tokens[i] += self._count_completion(text)
                spent[i] += seconds2
        return [  # generate() processes every prompt token: no prefix is kept between calls
            ChatReply(self._answer(text), p_tok, c_tok, sec, prompt_tokens_cached=0)
            for text, p_tok, c_tok, sec in zip(raw, prompt_tokens, completion_tokens, spent, strict=True)
        ]

    def _answer(self, text: str) -> str:
        final = complete_answer(text)
        if final is None and final_channel(text):  # an answer cut off by the budget
            return cut_off_reply(text)
        if final is None:  # no answer
            self.stats["no_final"] += 1
            return text
        return final if is_harmony(text) else self._strip_specials(text)

    def _generate(
        self, convs: list[list[dict[str, str]]], effort: str | None, max_new_tokens: int, temperature: float
    ) -> tuple[list[str], float]:
        pipe = self.pipeline
        gen: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": pipe.tokenizer.pad_token_id}
        gen["do_sample"] = bool(temperature and temperature > 0)
        if gen["do_sample"]:
            gen["temperature"] = float(temperature)
        if self._stop_ids:
            gen["eos_token_id"] = list(self._stop_ids)
        gen.update(self.generate_kwargs or {})
        start = time.perf_counter()
        try:
            outputs = pipe(
                convs,
                batch_size=min(len(convs), self.batch_size or len(convs)),
                return_full_text=False,
                skip_special_tokens=False,
                tokenizer_encode_kwargs=_template_kwargs(effort),
                **gen,
            )
        except Exception as exc:
            raise LLMBackendError(f"Generation with {self.model_name!r} failed: {type(exc).__name__}: {exc}") from exc
        seconds = time.perf_counter() - start
        self.stats["generate_calls"] += -(-len(convs) // (self.batch_size or len(convs)))
        return [self._strip_padding(out[0]["generated_text"]) for out in outputs], seconds

    def _count_prompt(self, messages: list[dict[str, str]], effort: str | None) -> int:
        enc = self.pipeline.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, **_template_kwargs(effort)
        )
        return len(enc["input_ids"])

    def _count_completion(self, text: str) -> int:
        return len(self.pipeline.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _strip_padding(self, text: str) -> str:
        if (pad := self.pipeline.tokenizer.pad_token) and text.endswith(pad):
            while text.endswith(pad):
                text = text[: -len(pad)]
            if pad in HARMONY_STOP_TOKENS:  # the reply stopped on it, then padding repeated it: keep the stop
                text += pad
        return text

    def _strip_specials(self, text: str) -> str:
        tok = self.pipeline.tokenizer
        for added in getattr(tok, "added_tokens_decoder", {}).values():
            if getattr(added, "special", False) and added.content:
                text = text.replace(added.content, "")
        for special in getattr(tok, "all_special_tokens", []):
            text = text.replace(special, "")
        return text.strip()

    def __repr__(self) -> str:
        return (
            f"TransformersBackend({self.model_name!r}, reasoning_effort={self.reasoning_effort!r}, "
            f"max_new_tokens={self.max_new_tokens})"
        )


def _template_kwargs(effort: str | None) -> dict[str, Any]:
    return {} if effort is None else {"reasoning_effort": effort}


def has_accelerate() -> bool:
    """Whether ``accelerate`` is installed (``device_map`` needs it; without it the model is put on one device)."""
    return importlib.util.find_spec("accelerate") is not None


def _offline() -> bool:
    """Whether the Hugging Face Hub is offline (``HF_HUB_OFFLINE``, else ``TRANSFORMERS_OFFLINE``)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def _stop_token_ids(pipe: Any) -> list[int] | None:
    """The model's end-of-sequence ids plus harmony's stop tokens, when the tokenizer has harmony tokens."""
    tok = pipe.tokenizer
    vocab = tok.get_vocab()
    harmony = [vocab[t] for t in HARMONY_STOP_TOKENS if t in vocab]
    if not harmony:
        return None
    eos = getattr(getattr(pipe.model, "generation_config", None), "eos_token_id", None)
    ids = [eos] if isinstance(eos, int) else [int(i) for i in eos] if isinstance(eos, (list, tuple)) else []
    own = [] if tok.eos_token_id is None else [int(tok.eos_token_id)]
    return list(dict.fromkeys([*ids, *own, *harmony]))
