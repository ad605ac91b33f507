"""A cache of llama.cpp states keyed by their tokens, so that a prompt reuses the longest prefix any recent call
processed, not only the call just before (R2PO's Search and Critic prompts alternate and differ from their first line).

:class:`PrefixStateCache` has llama-cpp-python's cache protocol (``Llama.set_cache``): before a completion,
``cache[prompt]`` returns the state with the longest common token prefix (loaded when it shares more than the live
context); after it, ``cache[tokens] = state`` stores one. :func:`reused_tokens` tells how many prompt tokens a call did
not evaluate.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PrefixStateCache", "common_prefix", "reused_tokens"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def reused_tokens(live: Sequence[int], served: Sequence[int] | None, prompt: Sequence[int]) -> int:
    """
    How many of ``prompt``'s tokens llama-cpp-python took from an earlier state: the longer common prefix of the live
    context and the served state, but never the whole prompt (its last token is evaluated again, for fresh logits).

    :param live: The context's tokens before the call.
    :param served: The tokens of the state the cache returned for the prompt, or ``None``.
    :param prompt: The prompt's tokens.
    """
    shared = common_prefix(live, prompt)
    if served is not None:
        shared = max(shared, common_prefix(served, prompt))
    return shared - 1 if shared == len(prompt) and shared > 0 else shared


class PrefixStateCache:
    """
    The most recently used llama.cpp states, found by the longest common token prefix.

    :param capacity_bytes: The most bytes the stored states may take; the least recently used are dropped first (a
        state larger than this is not kept).
    """

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self.capacity_bytes = int(capacity_bytes)
        self.states: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.asked: tuple[int, ...] | None = None
        """The tokens of the last lookup (a call's prompt)."""
        self.served: tuple[int, ...] | None = None
        """The tokens of the state the last lookup returned (``None``: none)."""
        self.hits = 0
        """Lookups that returned a state."""

    @property
    def cache_size(self) -> int:
        """Bytes the stored states take."""
        return sum(_size(state) for state in self.states.values())

    def forget_lookup(self) -> None:
        """Forget the last lookup (call before a call, to read :attr:`asked` and :attr:`served` after it)."""
        self.asked = self.served = None

    def _longest(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        best, best_len = None, 0
        for tokens in self.states:
            shared = common_prefix(tokens, key)
            if shared > best_len:
                best, best_len = tokens, shared
        return best

    def __getitem__(self, key: Sequence[int]) -> Any:
        key = tuple(int(t) for t in key)
        self.asked, self.served = key, None
        found = self._longest(key)
        if found is None:
            raise KeyError("no cached state shares a prefix with the prompt")
        self.states.move_to_end(found)
        self.served = found
        self.hits += 1
        return self.states[found]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._longest(tuple(int(t) for t in key)) is not None

    def __setitem__(self, key: Sequence[int], state: Any) -> None:
        """Keep ``state`` under the tokens it evaluated (``input_ids[:n_tokens]``), else under ``key`` (the prompt and
        reply, whose last tokens a state need not hold: a reply cut at ``max_tokens``)."""
        ids, n_tokens = getattr(state, "input_ids", None), getattr(state, "n_tokens", None)
        if isinstance(ids, np.ndarray) and isinstance(n_tokens, int):
            key = ids[:n_tokens].tolist()
        key = tuple(int(t) for t in key)
        _slim(state)
        self.states.pop(key, None)
        self.states[key] = state
        while self.states and self.cache_size > self.capacity_bytes:
            self.states.popitem(last=False)


def _slim(state: Any) -> None:
    """Drop what a stored state holds that no call reads: its logits rows (a completion without ``logits_all`` samples
    from the context's logits; one row of zeros stays, which ``Llama.load_state`` broadcasts), so a state costs its
    llama.cpp state only, and its tokens past ``n_tokens`` (stale ones would pass for a shared prefix)."""
    scores = getattr(state, "scores", None)
    if isinstance(scores, np.ndarray) and scores.ndim == 2 and scores.shape[0] > 1:
        state.scores = np.zeros((1, scores.shape[1]), dtype=scores.dtype)
    ids = getattr(state, "input_ids", None)
    if isinstance(ids, np.ndarray):
        ids[int(state.n_tokens) :] = -1


def _size(state: Any) -> int:
    """Bytes a stored state takes (its llama.cpp state, tokens and logits row)."""
    size = int(getattr(state, "llama_state_size", 0))
    for name in ("input_ids", "scores"):
        value = getattr(state, name, None)
        if isinstance(value, np.ndarray):
            size += int(value.nbytes)
    return size
