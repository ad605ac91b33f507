"""LLM calls per second when N training runs wait for the LLM at once: batched vs one after another.

For each N, N different R2PO-style Search prompts for CartPole (each with its own history of 20 evaluated
candidates) are answered twice:

- **sequential**: ``backend.chat`` N times in a row (what N seeds trained one after another pay);
- **batched**: N threads, each registered with one :class:`~sb3_r2po.llm.batching.BatchingBackend`, ask at the same
  time (exactly the path of :func:`sb3_r2po.lockstep.learn_in_lockstep` and ``compare --lockstep``): one padded
  ``generate`` for transformers, N concurrent requests for a server, one after another for backends that cannot
  batch (the embedded llama.cpp model).

Backends (``--backends``, any number):

- ``tiny-transformers``: the tiny gpt-oss model of the tests (built here, ~1 s), in-process with
  ``TransformersBackend`` (CUDA when available: the same command measures the GPU path on a lent device);
- ``tiny-serve``: the same model behind ``transformers serve`` on loopback, through ``OpenAIBackend``;
  ``tiny-serve-cb`` with the server's ``--continuous-batching`` (paged attention);
- any ``llm`` string: ``embedded``, ``embedded:1.5b``, ``http://host:8000/v1#model``, a model id or directory.

Usage::

    python benchmarks/batched_calls.py --backends tiny-transformers tiny-serve embedded --ns 1 2 4 8

Prints one table per backend: seconds and calls/s for both ways, and the speed-up (batched over sequential).
Every batched round must form one batch of N (checked); the time of the first call (loading) is excluded. The
tiny model was overfit on short chats: on these ~2,700-token prompts its replies are garbage, which does not matter
for throughput (its "no final channel" retry is off, so every call is one ``generate`` of at most 96 tokens).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.base import ChatBackend, Message
from sb3_r2po.llm.batching import BatchingBackend
from sb3_r2po.llm.resolve import make_backend

TINY_MAX_TOKENS = 96
SPACE = ParameterSpace(size=10, low=-6.0, high=6.0, decimals=1)
OBS_DIM, ACT_DIM = 4, 2

SYSTEM = (
    "You are a careful optimizer. You improve a control policy by proposing parameter vectors; each proposal is "
    "run in the environment and its return is reported back to you."
)

TASK = """\
Environment: CartPole-v1. A cart moves along a frictionless track and a pole is hinged on top of it.
Observation s (4 numbers): cart position, cart velocity, pole angle (radians), pole angular velocity.
Actions: 0 = push the cart left, 1 = push the cart right.
Reward: +1 for every step the pole stays up. An episode ends when the pole leans more than 12 degrees,
the cart leaves the track, or after 500 steps, so the best possible return is 500.

Policy: linear. Scores y = s @ W + b with W a 4 x 2 matrix and b 2 numbers; the action is argmax(y).
Layout of the 10 parameters: params[2*i + j] = W[i][j] for i = 0..3 and j = 0..1, then params[8] = b[0]
and params[9] = b[1].

Parameter space: 10 parameters, each a number in [-6.0, 6.0] with exactly one decimal."""

RULES = """\
Rules:
- Do not propose a vector that is already in the list.
- The target return is 500. While the best return is below it, explore new regions as well as
  improving on the best vectors.
- Change parameters by about 1.0 at a time when you improve on a good vector."""


def rollout(params: np.ndarray, seed: int, episodes: int = 1) -> float:
    """Mean return of the linear argmax policy on CartPole-v1."""
    env = gym.make("CartPole-v1")
    w = np.asarray(params[: OBS_DIM * ACT_DIM]).reshape(OBS_DIM, ACT_DIM)
    b = np.asarray(params[OBS_DIM * ACT_DIM :])
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(np.argmax(obs @ w + b)))
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / episodes


def make_history(seed: int, n: int = 20) -> list[tuple[np.ndarray, float]]:
    """``n`` random candidates (N(0, 3), clipped and rounded) with their single-episode CartPole return."""
    rng = np.random.default_rng(seed)
    history = []
    for k in range(n):
        theta = SPACE.sample(rng)
        history.append((theta, rollout(theta, seed=1000 * seed + k)))
    return history


def make_prompt(history: list[tuple[np.ndarray, float]]) -> list[dict[str, str]]:
    """An R2PO Search-style prompt asking for one line in the indexed format (the removed
    ``benchmarks/embedded_format.py``'s ``gbnf-indexed`` prompt, which these figures used)."""
    lines = [f"{k + 1}. {SPACE.format(theta)} -> return {ret:.1f}" for k, (theta, ret) in enumerate(history)]
    best = max(ret for _, ret in history)
    fmt = ", ".join(f"params[{i}]: v" for i in range(SPACE.size))
    reply = f"Reply format: reply with one line only, exactly in this form:\n{fmt}"
    user = (
        f"{TASK}\n\nIteration 1 of 100. Best return so far: {best:.1f}. Target: 500.\n\n"
        f"Evaluated vectors (parameters -> return):\n" + "\n".join(lines) + f"\n\n{RULES}\n\n{reply}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def prompts(n: int, offset: int = 0) -> list[list[Message]]:
    """``n`` distinct Search prompts (history seeds ``offset .. offset + n - 1``)."""
    return [make_prompt(make_history(offset + i)) for i in range(n)]


@contextlib.contextmanager
def open_backend(name: str, workdir: Path) -> Iterator[ChatBackend]:
    """The backend called ``name`` (see the module docstring), torn down afterwards."""
    if name.startswith("tiny-"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from tiny_gptoss import make_tiny_gptoss

        directory = workdir / "tiny"
        if not directory.exists():
            make_tiny_gptoss(directory, final=SPACE.format(SPACE.sample(np.random.default_rng(0))))
        if name == "tiny-transformers":
            from sb3_r2po.llm.transformers_backend import TransformersBackend

            yield TransformersBackend(
                str(directory), max_new_tokens=TINY_MAX_TOKENS, retry_budget_factor=0, memory_check=False
            )
        elif name in ("tiny-serve", "tiny-serve-cb"):
            from servers import can_transformers_serve, serve_env, transformers_serve

            from sb3_r2po.llm.openai_backend import OpenAIBackend

            env = serve_env()
            if not can_transformers_serve(env):
                raise RuntimeError("transformers serve needs fastapi, uvicorn and accelerate (pip install -e '.[test]')")
            extra = ["--continuous-batching"] if name == "tiny-serve-cb" else []
            with transformers_serve(directory, env, extra) as server:
                print(f"[{name}] server: {server.kind} at {server.url}", file=sys.stderr)
                yield OpenAIBackend(
                    server.url, model=server.model_id, max_tokens=TINY_MAX_TOKENS, retry_budget_factor=0, max_concurrency=16
                )
        else:
            raise ValueError(f"unknown backend {name!r}")
        return
    backend = make_backend(name)
    constrain = getattr(backend, "constrain", None)
    if callable(constrain):  # as R2PO does: the grammar of the 10-parameter CartPole space
        constrain(SPACE)
    try:
        yield backend
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def sequential(backend: ChatBackend, convs: list[list[Message]]) -> float:
    """One call after another, from a worker thread like the batched way (torch's CPU threading differs between
    the main thread and others, which would skew the comparison; docs/scaling.md gives the figure)."""
    seconds: list[float] = []

    def ask_all() -> None:
        start = time.perf_counter()
        for conv in convs:
            backend.chat(conv)
        seconds.append(time.perf_counter() - start)

    thread = threading.Thread(target=ask_all)
    thread.start()
    thread.join()
    if not seconds:
        raise RuntimeError("the sequential calls failed (see the thread's traceback above)")
    return seconds[0]


def batched(backend: ChatBackend, convs: list[list[Message]]) -> float:
    """N registered threads ask at once through one BatchingBackend; checks that they formed one batch."""
    shared = BatchingBackend(backend)
    barrier = threading.Barrier(len(convs) + 1)
    errors: list[BaseException] = []

    def ask(conv: list[Message]) -> None:
        with shared.worker():
            barrier.wait()
            try:
                shared.chat(conv)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=ask, args=(conv,)) for conv in convs]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    if shared.batch_sizes != [len(convs)]:
        raise RuntimeError(f"expected one batch of {len(convs)}, got {shared.batch_sizes}")
    return seconds


def measure(name: str, ns: list[int], repeats: int, workdir: Path) -> list[dict[str, Any]]:
    rows = []
    with open_backend(name, workdir) as backend:
        start = time.perf_counter()
        backend.chat(prompts(1, offset=999)[0])  # load the model, warm caches
        print(f"[{name}] first call (load + answer): {time.perf_counter() - start:.1f} s", file=sys.stderr)
        for n in ns:
            seq, bat = [], []
            for r in range(repeats):  # alternate the two ways so that drift hits both
                # different prompts for the two ways: a backend that caches prompt prefixes (llama.cpp) must not
                # answer the second way from the first way's cache
                seq.append(sequential(backend, prompts(n, offset=100 * r)))
                bat.append(batched(backend, prompts(n, offset=100 * r + 50)))
            row = {
                "backend": name,
                "n": n,
                "sequential_s": statistics.median(seq),
                "batched_s": statistics.median(bat),
                "repeats": repeats,
            }
            row["sequential_calls_per_s"] = n / row["sequential_s"]
            row["batched_calls_per_s"] = n / row["batched_s"]
            row["speedup"] = row["sequential_s"] / row["batched_s"]
            rows.append(row)
            print(f"[{name}] N={n}: sequential {row['sequential_s']:.2f} s, batched {row['batched_s']:.2f} s", file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | N | sequential: s | sequential: calls/s | batched: s | batched: calls/s | speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['n']} | {r['sequential_s']:.2f} | {r['sequential_calls_per_s']:.2f} | "
            f"{r['batched_s']:.2f} | {r['batched_calls_per_s']:.2f} | {r['speedup']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", default=["tiny-transformers", "tiny-serve"])
    parser.add_argument("--ns", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=3, help="rounds per N (the median is reported)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()

    import torch

    device = f"CUDA ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else f"CPU, {os.cpu_count()} cores"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="batched_calls_") as tmp:
        for name in args.backends:
            rows += measure(name, args.ns, args.repeats, Path(tmp))
    print(f"\nLLM calls for N waiting runs, batched vs sequential ({device}; median of {args.repeats}):\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
