"""Parse-failure rate, latency and throughput of the embedded model with and without the parameter grammar.

Each reply answers an R2PO-style Search prompt for a 10-parameter CartPole-v1 linear policy: the task,
the policy layout, the parameter space ([-6, 6], one decimal), a history of 20 candidates with their
real CartPole returns, the rules, and the reply format. Every prompt has its own random history (seed
``i``), so the ``n`` replies of a mode are ``n`` different prompts decoded greedily (temperature 0),
as R2PO would see them over ``n`` iterations. Modes run one after another, so consecutive calls share
only the fixed prefix of the prompt (llama.cpp reuses the cached prefix, as it would inside R2PO).

A reply *parses* when it holds exactly 10 finite numbers after ``params`` in one of the two formats
``params: [v0, ..., v9]`` or ``params[0]: v0, ..., params[9]: v9`` (the last occurrence counts). Each
parsed proposal is also run for 5 CartPole episodes to see whether the grammar changes what the model
proposes.

Usage::

    python benchmarks/embedded_format.py --size 0.5b --n 10
    python benchmarks/embedded_format.py --size 1.5b --n 10 --order seed --jsonl calls_1.5b.jsonl --json out.json
    python benchmarks/embedded_format.py --size 0.5b --n 10 --modes free-indexed,gbnf-list
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from sb3_r2po.common.parameters import ParameterSpace
from sb3_r2po.llm.embedded import EmbeddedBackend

SPACE = ParameterSpace(size=10, low=-6.0, high=6.0, decimals=1)
OBS_DIM, ACT_DIM = 4, 2

MODES: dict[str, dict[str, Any]] = {
    # name: grammar on/off, reply style, free-text line allowed before the parameters
    "free-indexed": {"grammar": False, "style": "indexed", "reason": True},
    "free-list": {"grammar": False, "style": "list", "reason": True},
    "gbnf-indexed": {"grammar": True, "style": "indexed", "reason": False},
    "gbnf-list": {"grammar": True, "style": "list", "reason": False},
    "gbnf-list-reason": {"grammar": True, "style": "list", "reason": True},
    # the grammar's list shape under a prompt that asks for the indexed one (R2PO's own prompts do)
    "gbnf-list-asked-indexed": {"grammar": True, "style": "list", "reason": False, "prompt_style": "indexed"},
}

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

FORMATS = {
    "indexed": ", ".join(f"params[{i}]: v" for i in range(SPACE.size)),
    "list": "params: [" + ", ".join(f"v{i}" for i in range(SPACE.size)) + "]",
}


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


def make_prompt(history: list[tuple[np.ndarray, float]], style: str, reason: bool, iteration: int = 1) -> list[dict[str, str]]:
    """An R2PO Search-style prompt; the reply-format paragraph depends on the mode."""
    lines = [f"{k + 1}. {SPACE.format(theta)} -> return {ret:.1f}" for k, (theta, ret) in enumerate(history)]
    best = max(ret for _, ret in history)
    fmt = FORMATS[style]
    if reason:
        reply = (
            "Reply format: first at most one short sentence of reasoning on its own line, then the new vector on the "
            f"next line, exactly in this form:\n{fmt}"
        )
    else:
        reply = f"Reply format: reply with one line only, exactly in this form:\n{fmt}"
    user = (
        f"{TASK}\n\nIteration {iteration} of 100. Best return so far: {best:.1f}. Target: 500.\n\n"
        f"Evaluated vectors (parameters -> return):\n" + "\n".join(lines) + f"\n\n{RULES}\n\n{reply}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


_NUM = r"[-\u2212]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


def parse_reply(text: str, n: int = SPACE.size) -> list[float] | None:
    """Exactly ``n`` finite numbers after ``params`` in one of the two formats (last occurrence), else ``None``."""
    text = text.replace("\u2212", "-")
    candidates: list[tuple[int, list[float] | None]] = []
    lists = list(re.finditer(r"params\s*[:=]\s*\[([^\]]*)\]", text))
    if lists:
        m = lists[-1]
        items = [s.strip() for s in m.group(1).split(",") if s.strip()]
        ok = all(re.fullmatch(_NUM, s) for s in items)
        candidates.append((m.start(), [float(s) for s in items] if ok else None))
    starts = [m.start() for m in re.finditer(r"params\s*\[\s*0\s*\]", text)]
    if starts:
        tail = text[starts[-1] :]
        items = re.findall(rf"params\s*\[\s*(\d+)\s*\]\s*[:=]\s*({_NUM})", tail)
        idx = [int(i) for i, _ in items]
        vals = [float(v) for _, v in items] if idx == list(range(len(items))) else None
        candidates.append((starts[-1], vals))
    if not candidates:
        return None
    _, values = max(candidates, key=lambda c: c[0])
    if values is None or len(values) != n or not all(math.isfinite(v) for v in values):
        return None
    return values


@dataclass
class Call:
    mode: str
    seed: int
    ok: bool
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    prompt_eval_tokens: int
    prompt_eval_ms: float
    gen_tokens: int
    gen_ms: float
    other_ms: float  # wall time outside llama.cpp's decode: mostly the grammar sampler, when on
    in_range: bool | None = None
    duplicate: bool | None = None
    degenerate: bool | None = None
    proposal_return: float | None = None
    best_history: float = 0.0
    text: str = ""


@dataclass
class Summary:
    mode: str
    n: int
    parse_failures: int
    mean_seconds: float
    median_seconds: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    prompt_tok_per_s: float
    gen_tok_per_s: float
    other_ms_per_token: float
    out_of_range: int
    duplicates: int
    degenerate: int
    mean_proposal_return: float | None
    mean_best_history: float
    examples: list[str] = field(default_factory=list)


def perf(llm: Any) -> tuple[int, float, int, float]:
    """(prompt tokens evaluated, ms, generated tokens, ms) since the last reset of llama.cpp's counters."""
    import llama_cpp

    data = llama_cpp.llama_perf_context(llm.ctx)
    return int(data.n_p_eval), float(data.t_p_eval_ms), int(data.n_eval), float(data.t_eval_ms)


def run_call(backend: EmbeddedBackend, mode: str, seed: int, history: list[tuple[np.ndarray, float]]) -> Call:
    """One reply of ``mode`` to the prompt of ``seed``, checked, timed and (when it parses) evaluated."""
    import llama_cpp

    cfg = MODES[mode]
    backend.grammar = cfg["grammar"]
    backend.reply_style = cfg["style"]
    backend.reason_chars = 160 if cfg["reason"] else 0
    backend.constrain(SPACE)
    llm = backend.load()
    llama_cpp.llama_perf_context_reset(llm.ctx)
    reply = backend.chat(make_prompt(history, cfg.get("prompt_style", cfg["style"]), cfg["reason"]), temperature=0.0)
    n_p, t_p, n_g, t_g = perf(llm)
    values = parse_reply(reply.text)
    call = Call(
        mode=mode,
        seed=seed,
        ok=values is not None,
        seconds=reply.seconds,
        prompt_tokens=reply.prompt_tokens or 0,
        completion_tokens=reply.completion_tokens or 0,
        prompt_eval_tokens=n_p,
        prompt_eval_ms=t_p,
        gen_tokens=n_g,
        gen_ms=t_g,
        other_ms=1000 * reply.seconds - t_p - t_g,
        best_history=max(r for _, r in history),
        text=reply.text,
    )
    if values is not None:
        vec = np.asarray(values)
        call.in_range = bool(np.all((vec >= SPACE.low) & (vec <= SPACE.high)))
        projected = SPACE.project(vec).params
        call.duplicate = any(np.array_equal(projected, theta) for theta, _ in history)
        call.degenerate = bool(np.all(projected == projected[0]))
        call.proposal_return = rollout(projected, seed=10_000 + seed, episodes=5)
    status = "ok  " if call.ok else "FAIL"
    print(
        f"[{mode}] seed {seed}: {status} {call.seconds:6.1f}s prompt {call.prompt_tokens} "
        f"(evaluated {n_p} in {t_p / 1000:.1f}s) "
        f"completion {call.completion_tokens} ({t_g / 1000:.1f}s decode, {call.other_ms / 1000:.1f}s other) "
        f"return {call.proposal_return} threads {backend.threads} load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
        flush=True,
    )
    return call


def summarize(mode: str, calls: list[Call]) -> Summary:
    ok = [c for c in calls if c.ok]
    p_tok = sum(c.prompt_eval_tokens for c in calls)
    p_ms = sum(c.prompt_eval_ms for c in calls)
    g_tok = sum(c.gen_tokens for c in calls)
    g_ms = sum(c.gen_ms for c in calls)
    returns = [c.proposal_return for c in ok if c.proposal_return is not None]
    return Summary(
        mode=mode,
        n=len(calls),
        parse_failures=len(calls) - len(ok),
        mean_seconds=statistics.mean(c.seconds for c in calls),
        median_seconds=statistics.median(c.seconds for c in calls),
        mean_prompt_tokens=statistics.mean(c.prompt_tokens for c in calls),
        mean_completion_tokens=statistics.mean(c.completion_tokens for c in calls),
        prompt_tok_per_s=1000 * p_tok / p_ms if p_ms else float("nan"),
        gen_tok_per_s=1000 * g_tok / g_ms if g_ms else float("nan"),
        other_ms_per_token=sum(c.other_ms for c in calls) / max(1, sum(c.completion_tokens for c in calls)),
        out_of_range=sum(1 for c in ok if c.in_range is False),
        duplicates=sum(1 for c in ok if c.duplicate),
        degenerate=sum(1 for c in ok if c.degenerate),
        mean_proposal_return=statistics.mean(returns) if returns else None,
        mean_best_history=statistics.mean(c.best_history for c in calls),
        examples=[c.text for c in calls[:2]],
    )


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The command line, and the modes it names (an unknown mode ends the command with a usage error)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="0.5b", choices=["0.5b", "1.5b"])
    parser.add_argument("--n", type=int, default=10, help="replies per mode (one prompt per seed)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {list(MODES)}")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--order",
        default="mode",
        choices=["mode", "seed"],
        help="mode: every prompt of a mode, then the next mode (calls share only the fixed prompt prefix, as in "
        "R2PO); seed: every mode for one prompt, then the next (later modes reuse the cached prompt: much faster, "
        "but only the first mode's latency is that of a fresh prompt)",
    )
    parser.add_argument("--json", default=None, help="write every call and the summaries here")
    parser.add_argument(
        "--jsonl",
        default=None,
        help="append every call to this file as soon as it is done; calls already there (same mode and seed) are "
        "not run again, so an interrupted run resumes, and the summary covers every call in the file",
    )
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    return args, modes


def read_calls(path: str | None) -> dict[tuple[str, int], Call]:
    """The calls a ``--jsonl`` file already holds, by (mode, seed); none without a file."""
    done: dict[tuple[str, int], Call] = {}
    if path and os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                if line.strip():
                    call = Call(**json.loads(line))
                    done[(call.mode, call.seed)] = call
    return done


def call_order(modes: list[str], n: int, order: str) -> list[tuple[str, int]]:
    """Every (mode, seed) pair, mode by mode (``order="mode"``) or seed by seed."""
    if order == "mode":
        return [(mode, seed) for mode in modes for seed in range(n)]
    return [(mode, seed) for seed in range(n) for mode in modes]


def run_missing(
    backend: EmbeddedBackend,
    pairs: list[tuple[str, int]],
    histories: list[list[tuple[np.ndarray, float]]],
    done: dict[tuple[str, int], Call],
    jsonl: str | None,
) -> None:
    """Run every pair not in ``done`` and add it there (and to ``jsonl``, when given, as soon as it is done)."""
    for mode, seed in pairs:
        if (mode, seed) in done:
            continue
        call = run_call(backend, mode, seed, histories[seed])
        done[(mode, seed)] = call
        if jsonl:
            with open(jsonl, "a") as fh:
                fh.write(json.dumps(asdict(call)) + "\n")


def print_report(backend: EmbeddedBackend, args: argparse.Namespace, summaries: list[Summary], load_s: float) -> None:
    """The table of every mode, the load average and each mode's first reply, on stdout."""
    print(
        f"\nmodel {backend.spec.model}, {args.n} prompts per mode, order {args.order}, temperature 0, "
        f"max_tokens {args.max_tokens}, load {load_s:.1f} s"
    )
    header = (
        "| mode | parse failures | mean s/call | median s | prompt tok | completion tok | prompt tok/s | gen tok/s "
        "| other ms/tok | out of range | duplicates | all-equal | mean return of proposals (5 ep.) | mean best in history |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for s in summaries:
        ret = f"{s.mean_proposal_return:.1f}" if s.mean_proposal_return is not None else "-"
        print(
            f"| {s.mode} | {s.parse_failures}/{s.n} | {s.mean_seconds:.1f} | {s.median_seconds:.1f} "
            f"| {s.mean_prompt_tokens:.0f} | {s.mean_completion_tokens:.0f} | {s.prompt_tok_per_s:.0f} "
            f"| {s.gen_tok_per_s:.1f} | {s.other_ms_per_token:.0f} | {s.out_of_range} "
            f"| {s.duplicates} | {s.degenerate} | {ret} | {s.mean_best_history:.1f} |"
        )
    print(f"load average at the end (1, 5, 15 min): {os.getloadavg()}")
    for s in summaries:
        print(f"\n[{s.mode}] first reply:\n{s.examples[0] if s.examples else ''}")


def write_json(args: argparse.Namespace, load_s: float, summaries: list[Summary], calls: list[Call]) -> None:
    """Every call and the summaries, to ``--json``."""
    with open(args.json, "w") as fh:
        json.dump(
            {
                "size": args.size,
                "order": args.order,
                "n": args.n,
                "load_seconds": load_s,
                "loadavg_end": os.getloadavg(),
                "summaries": [asdict(s) for s in summaries],
                "calls": [asdict(c) for c in calls],
            },
            fh,
            indent=1,
        )


def main(argv: list[str] | None = None) -> int:
    args, modes = parse_args(argv)
    faulthandler.enable()

    done = read_calls(args.jsonl)
    print(f"load average at start: {os.getloadavg()}; {len(done)} calls already done", file=sys.stderr)
    histories = [make_history(seed) for seed in range(args.n)]
    backend = EmbeddedBackend(args.size, n_ctx=args.n_ctx, n_threads=args.threads, max_tokens=args.max_tokens)
    start = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - start
    print(f"loaded {backend.spec.model} in {load_s:.1f} s (join included when it was not cached)", file=sys.stderr)

    pairs = call_order(modes, args.n, args.order)
    run_missing(backend, pairs, histories, done, args.jsonl)
    all_calls = [done[pair] for pair in pairs]
    summaries = [summarize(mode, [c for c in all_calls if c.mode == mode]) for mode in modes]

    print_report(backend, args, summaries, load_s)
    if args.json:
        write_json(args, load_s, summaries, all_calls)
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
