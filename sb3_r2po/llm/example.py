"""``ExampleLLM``: a deterministic stand-in for a language model (NOT an LLM) for tests, docs and the quickstart."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Sequence

import numpy as np

from sb3_r2po.common.parameters import ParameterSpace, parse_params
from sb3_r2po.llm.base import ChatReply, Message

_VECTOR = r"params(?:\[0\]|: \[)[^\n;]*"  # a vector in either reply style, indexed or list
_HISTORY = re.compile(rf"^(?:[\w -]+: )?({_VECTOR}); [^:=\n]*[:=] (\S+)", re.M)  # a history line, maybe labelled
_REFERENCE_HISTORY = re.compile(  # the reference layout's lines: Trial 3: params=[4.9,0.1] mean_reward=9.00, and ProPS's
    r"^(?:(?:Warmup |Training )?[Tt]rial \d+: params=\[([^\]\n]*)\] (?:mean|rollout)_reward="
    r"|(params\[0\]: [^\n]*?); f\(params\): )(\S+)",
    re.M,
)
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?|-?inf|nan")
_CANDIDATE = re.compile(r"The optimizer proposed these parameters:\n(params(?:\[0\]|: \[)[^\n]*)")
_CANDIDATE_MEAN = re.compile(r"Mean reward over its \d+ evaluation episodes?: (\S+)")
_THRESHOLD = re.compile(r"mean reward (?:is|of) (\S+) or more")
_SIZE = re.compile(r"There are (\d+) parameters")
_RANGE = re.compile(r"a number in \[(\S+), (\S+)\] written with (\d+) decimal")
_CHOICES = re.compile(r"must be one of the values ([\d, -]+)\.")
_STEP = re.compile(r"(?:in steps of about|changes of) (\d+(?:\.\d+)?)")


class ExampleLLM:
    """A seeded local search speaking R2PO's prompt and reply format, NOT a language model (its results say nothing about an
    LLM's): the Search perturbs the history's best vector by about the step size; the Critic makes a small edit to the
    candidate, or keeps it when its mean reward reaches the revision threshold (critic_only: a small edit of the best).

    :param seed: Seed of the search; the reply is a deterministic function of the seed and the messages.
    :param explore: Probability that a Search reply samples a fresh random vector instead of refining the best.
    """

    def __init__(self, seed: int = 0, explore: float = 0.1) -> None:
        self.seed = int(seed)
        self.explore = float(explore)

    def chat(self, messages: Sequence[Message], *, temperature: float = 0.0) -> ChatReply:
        start = time.perf_counter()
        prompt = "\n".join(m["content"] for m in messages if m["role"] == "user")
        digest = hashlib.sha256(json.dumps([self.seed, list(messages)], sort_keys=True).encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        size = int(m.group(1)) if (m := _SIZE.search(prompt)) else 1
        step = float(m.group(1)) if (m := _STEP.search(prompt)) else 1.0
        choices = [int(c) for c in m.group(1).split(",")] if (m := _CHOICES.search(prompt)) else None
        m = _RANGE.search(prompt)
        low, high, decimals = (float(m.group(1)), float(m.group(2)), int(m.group(3))) if m else (-6.0, 6.0, 1)
        space = ParameterSpace(size, low, high, decimals, values=None if choices is None else tuple(choices))
        candidate = _CANDIDATE.search(prompt)
        lines = [(line, ret) for line, ret in _HISTORY.findall(prompt) if _NUMBER.fullmatch(ret)]  # not "value;" returns
        lines += [(f"params: [{flat}]" if flat else indexed, ret) for flat, indexed, ret in _REFERENCE_HISTORY.findall(prompt)]
        history = [(v, float(ret)) for line, ret in lines if (v := parse_params(line, space).params) is not None]
        best = max(history, key=lambda item: item[1])[0] if history else None
        if candidate is not None:
            theta = parse_params(candidate.group(1), space).params
            assert theta is not None  # the Critic prompt's candidate is always a valid vector
            mean, threshold = _CANDIDATE_MEAN.search(prompt), _THRESHOLD.search(prompt)
            if mean is not None and threshold is not None and float(mean.group(1)) >= float(threshold.group(1)):
                note = "The candidate meets the revision threshold: keeping it unchanged."
            else:
                theta = _edit(theta, rng, step / 2, choices, n_changes=max(1, size // 4))
                note = "Small edit of the candidate."
        elif "in a single pass" in prompt and best is not None:  # critic_only: no candidate, revise the best
            theta = _edit(best, rng, step / 2, choices, n_changes=max(1, size // 4))
            note = "Small edit of the best vector so far."
        elif best is None or rng.random() < self.explore:
            allowed = np.array(choices or (), dtype=np.float64)  # a discrete space's values
            theta = rng.normal(0.0, 3.0, size=size) if choices is None else rng.choice(allowed, size=size)
            note = "Exploring a random vector."
        else:
            theta = _edit(best, rng, step, choices, n_changes=size)
            note = "Refining the best vector so far."
        if choices is None:
            theta = np.round(np.clip(theta, low, high), decimals)
        values = space.format(theta, "list" if "params: [<value>" in prompt else "indexed")  # the shape the prompt asks for
        text = f"{values}\nExampleLLM (seeded local search, not a language model). {note}"  # the vector first, as asked
        return ChatReply(text=text, seconds=time.perf_counter() - start)

    def __repr__(self) -> str:
        return f"ExampleLLM(seed={self.seed})"


def _edit(theta: np.ndarray, rng: np.random.Generator, scale: float, choices: list[int] | None, n_changes: int) -> np.ndarray:
    out = theta.copy()
    if choices is not None:
        i = int(rng.integers(out.size))
        out[i] = float(rng.choice([c for c in choices if c != out[i]] or choices))
        return out
    idx = rng.choice(out.size, size=min(n_changes, out.size), replace=False)
    out[idx] += rng.normal(0.0, scale, size=idx.size)
    return out
