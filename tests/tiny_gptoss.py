"""A tiny gpt-oss look-alike for offline tests of the real transformers code paths.

gpt-oss-20b cannot run here (section 7 of the method notes), and no weights can be downloaded, so the tests
build their own model in-process:

- a byte-level BPE tokenizer trained with the ``tokenizers`` library on a few KB of generated text, with
  the harmony special tokens (``<|start|>``, ``<|end|>``, ``<|message|>``, ``<|channel|>``, ``<|return|>``,
  ``<|constrain|>``, ``<|call|>``, ...) and a harmony-style Jinja chat template that honours a
  ``reasoning_effort`` variable, wrapped as a :class:`~transformers.PreTrainedTokenizerFast`;
- a :class:`~transformers.GptOssForCausalLM` from a small :class:`~transformers.GptOssConfig` (2 layers,
  hidden size 64, 4 experts);
- :func:`overfit`, a second or so of Adam that teaches it one fixed harmony reply, e.g.
  ``<|channel|>analysis<|message|>short thought<|end|><|start|>assistant<|channel|>final<|message|>params:
  [1.0, -2.0, 0.5, 0.0, 3.0]<|return|>``.

Both layers use *sliding-window* attention, so what the model sees when it writes a token is only the last
few dozen tokens: the end of the chat template and the reply so far. That is why greedy decoding of any chat
prompt, however long, yields the trained reply, and why training only needs short sequences.

:func:`tiny_model` builds each model once per process (a cached call) into a temporary folder; test modules
wrap it in session-scoped fixtures. Import it as ``from tiny_gptoss import ...`` (pytest puts ``tests/`` on the path).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, GptOssConfig, GptOssForCausalLM, PreTrainedTokenizerFast

HARMONY_SPECIAL_TOKENS = [
    "<|startoftext|>",
    "<|endoftext|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
]
"""The harmony special tokens of the tiny tokenizer (decoded as text only with ``skip_special_tokens=False``)."""

DEFAULT_FINAL = "params: [1.0, -2.0, 0.5, 0.0, 3.0]"
"""The final-channel answer of the default trained model."""

CARTPOLE_FINAL = ", ".join(f"params[{i}]: {v}" for i, v in enumerate([0.5, 1.0, -0.5, 1.5, 2.0, -2.0, 3.0, -3.0, 0.0, 0.1]))
"""A 10-parameter answer for the CartPole linear policy (range [-6, 6], one decimal), in R2PO's reply format."""

DEFAULT_ANALYSIS = "short thought"

CHAT_TEMPLATE = (
    "{%- set effort = reasoning_effort if reasoning_effort is defined and reasoning_effort else 'medium' -%}"
    "<|start|>system<|message|>You are a tiny test model.\n"
    "Reasoning: {{ effort }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
    "{%- for message in messages -%}"
    "{%- if message['role'] in ['system', 'developer'] -%}"
    "<|start|>developer<|message|># Instructions\n\n{{ message['content'] }}<|end|>"
    "{%- elif message['role'] == 'user' -%}"
    "<|start|>user<|message|>{{ message['content'] }}<|end|>"
    "{%- elif message['role'] == 'assistant' -%}"
    "<|start|>assistant<|channel|>final<|message|>{{ message['content'] }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)
"""A harmony-style chat template (a simplified form of gpt-oss's), with the ``reasoning_effort`` variable."""

SLIDING_WINDOW = 16

_WORDS = (
    "policy parameter return episode reward cart pole angle velocity action observation history mean target "
    "iteration search critic revise keep best median trajectory step size explore range precision linear "
    "weights bias state left right push balance fall terminated truncated success failure statistics "
    "the a of to and in is for with on this that you your model answer propose vector values list"
).split()


def harmony_reply(final: str = DEFAULT_FINAL, analysis: str = DEFAULT_ANALYSIS) -> str:
    """The raw harmony text of a reply with one analysis and one final message."""
    return f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant<|channel|>final<|message|>{final}<|return|>"


def _random_text(rng: random.Random, n_words: int) -> str:
    parts: list[str] = []
    for _ in range(n_words):
        roll = rng.random()
        if roll < 0.03:
            parts.append(rng.choice("xyz#=-_ .0123456789") * rng.randint(2, 40))
        elif roll < 0.15:
            parts.append(f"{rng.uniform(-6, 6):.1f}")
        elif roll < 0.2:
            parts.append(rng.choice(["[", "]", ",", ":", ".", "(", ")", "->", "=", "\n", "-", "!", "?"]))
        else:
            parts.append(rng.choice(_WORDS))
    return " ".join(parts)


def _random_chat(rng: random.Random) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _random_text(rng, rng.randint(1, 30))})
    messages.append({"role": "user", "content": _random_text(rng, rng.randint(0, 60))})
    return messages


def build_tokenizer(vocab_size: int = 1000, seed: int = 0) -> PreTrainedTokenizerFast:
    """
    Train a byte-level BPE tokenizer on a few KB of generated text (any text can be encoded).

    :param vocab_size: The target vocabulary size, special tokens and the 256 byte symbols included.
    :param seed: Seed of the generated training text.
    """
    rng = random.Random(seed)
    corpus = [_random_text(rng, 40) for _ in range(120)]
    corpus += [DEFAULT_FINAL, CARTPOLE_FINAL, DEFAULT_ANALYSIS] * 40  # the trained replies get short tokenizations
    corpus += ["assistant analysis final commentary developer user system"] * 3
    corpus += ["You are a tiny test model. Reasoning: low medium high # Valid channels Instructions"] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=HARMONY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|startoftext|>",
        eos_token="<|return|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[
            t for t in HARMONY_SPECIAL_TOKENS if t not in ("<|startoftext|>", "<|endoftext|>", "<|return|>")
        ],
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=16384,
    )


def build_model(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> GptOssForCausalLM:
    """A randomly initialised tiny :class:`~transformers.GptOssForCausalLM` for ``tokenizer``."""
    stop_ids = tokenizer.convert_tokens_to_ids(["<|return|>", "<|call|>", "<|endoftext|>"])
    config = GptOssConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "sliding_attention"],
        max_position_embeddings=16384,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = GptOssForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, do_sample=False
    )
    model.eval()
    return model


def _training_batch(
    tokenizer: PreTrainedTokenizerFast, reply_ids: list[int], rng: random.Random, batch: int, keep: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows: list[list[int]] = []
    labels: list[list[int]] = []
    for _ in range(batch):
        effort = rng.choice(["low", "medium", "high"])
        prompt = tokenizer.apply_chat_template(
            _random_chat(rng), add_generation_prompt=True, tokenize=True, return_dict=False, reasoning_effort=effort
        )
        prompt = list(prompt)[-keep:]  # the model only ever sees the last 2 * SLIDING_WINDOW tokens or so
        rows.append(prompt + reply_ids)
        labels.append([-100] * len(prompt) + reply_ids)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    lab = torch.tensor([[-100] * (width - len(r)) + r for r in labels])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask, lab


def overfit(
    model: GptOssForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    reply: str,
    *,
    max_steps: int = 200,
    max_seconds: float = 60.0,
    seed: int = 0,
    lr: float = 5e-3,
    batch: int = 8,
    keep: int = 2 * SLIDING_WINDOW,
    settle: int = 3,
    max_loss: float = 0.03,
) -> float:
    """
    Teach ``model`` to answer every chat prompt with ``reply`` (raw harmony text). Adam, a few dozen steps.

    :param model: The model (trained in place, left in eval mode).
    :param tokenizer: Its tokenizer.
    :param reply: The raw reply, special tokens included (see :func:`harmony_reply`).
    :param max_steps: Upper bound on optimisation steps.
    :param max_seconds: Upper bound on training time.
    :param seed: Seed of the random prompts.
    :param lr: Adam's learning rate.
    :param batch: Prompts per step.
    :param keep: Prompt tokens kept per training sequence (the model sees only the last few dozen anyway).
    :param settle: Stop after this many consecutive steps whose reply tokens are all the argmax, at a mean loss
        below ``max_loss`` (a margin, so greedy decoding of unseen prompts reproduces the reply).
    :param max_loss: See ``settle``.
    :return: The last training loss.
    """
    with one_torch_thread():
        return _overfit(model, tokenizer, reply, max_steps, max_seconds, seed, lr, batch, keep, settle, max_loss)


def _overfit(
    model: GptOssForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    reply: str,
    max_steps: int,
    max_seconds: float,
    seed: int,
    lr: float,
    batch: int,
    keep: int,
    settle: int,
    max_loss: float,
) -> float:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    reply_ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    start = time.perf_counter()
    loss_value = float("inf")
    streak = 0
    steps = 0
    for _ in range(max_steps):
        ids, mask, labels = _training_batch(tokenizer, reply_ids, rng, batch=batch, keep=keep)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        steps += 1
        loss_value = float(out.loss.detach())
        # teacher-forced greedy check: every reply token is the argmax at its position
        predicted = out.logits[:, :-1].argmax(-1)
        target = labels[:, 1:]
        exact = bool(((predicted == target) | (target == -100)).all())
        streak = streak + 1 if exact and loss_value < max_loss else 0
        if streak >= settle or time.perf_counter() - start > max_seconds:
            break
    model.eval()
    overfit.last_steps = steps  # type: ignore[attr-defined]
    return loss_value


def make_tiny_gptoss(
    directory: str | Path,
    *,
    final: str = DEFAULT_FINAL,
    analysis: str = DEFAULT_ANALYSIS,
    train: bool = True,
    seed: int = 0,
    tokenizer: PreTrainedTokenizerFast | None = None,
) -> Path:
    """
    Build (and, with ``train=True``, overfit) a tiny gpt-oss model and save it with its tokenizer.

    :param directory: Where to save (``save_pretrained`` layout: config, safetensors, tokenizer, template).
    :param final: The final-channel answer the trained model gives.
    :param analysis: The analysis-channel text the trained model gives first.
    :param train: ``False`` leaves random weights (garbage output).
    :param seed: Seed of the weights and the training prompts.
    :param tokenizer: A tokenizer to reuse (one is trained otherwise).
    :return: The directory.
    """
    tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
    model = build_model(tokenizer, seed=seed)
    if train:
        overfit(model, tokenizer, harmony_reply(final, analysis), seed=seed)
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one thread meanwhile: as fast for these tiny matrices, and far faster on a busy 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def spy_generate(monkeypatch: Any, model: Any) -> list[torch.Tensor]:
    """Wrap ``model.generate`` (undone with ``monkeypatch``); the returned list gets the ``input_ids`` of each call."""
    original = model.generate
    calls: list[torch.Tensor] = []

    def generate(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["input_ids"])
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", generate)
    return calls


@functools.cache
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="tiny_gptoss_"))
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.cache
def shared_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer of :func:`tiny_model` (trained once per process)."""
    return build_tokenizer()


TINY_KINDS = {
    "trained": {"final": DEFAULT_FINAL, "train": True, "seed": 0},
    "cartpole": {"final": CARTPOLE_FINAL, "train": True, "seed": 1},
    "random": {"final": DEFAULT_FINAL, "train": False, "seed": 2},
}
"""The tiny models: ``trained`` answers :data:`DEFAULT_FINAL` (5 values) after a short analysis; ``cartpole``
answers :data:`CARTPOLE_FINAL` (10 values, R2PO's reply format); ``random`` is untrained (garbage output)."""


@functools.cache
def tiny_model(kind: str = "trained") -> Path:
    """
    The directory of a saved tiny model, built once per process into a temporary folder (removed at exit).

    :param kind: One of :data:`TINY_KINDS`.
    """
    spec = TINY_KINDS[kind]
    return make_tiny_gptoss(
        _root() / kind,
        final=str(spec["final"]),
        train=bool(spec["train"]),
        seed=int(spec["seed"]),
        tokenizer=shared_tokenizer(),
    )
