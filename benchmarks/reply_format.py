"""Parse failures of the embedded model on R2PO's own Search and Critic prompts, with and without the grammar.

1. Real prompts: R2PO runs on CartPole-v1 with the deterministic ``example`` stand-in (not an LLM) and the
   quickstart's lean prompt settings; every call is recorded. The first attempt of each Search and each Critic call
   is kept (re-asks are left out), so the prompts are exactly what the embedded model would be asked in a run.
2. Each prompt is answered by the embedded model, greedily, once with the parameter grammar and once without it.
3. Each reply is parsed by R2PO's own parser (``sb3_r2po.common.parsing.parse_params``) for the 10-parameter
   space; a reply is *usable* when it parses and is not a vector of the history (Search) - for the Critic, an
   unchanged candidate is a legal "keep it" answer and is counted separately.

``--reply-styles indexed list`` collects the prompts once per vector format of the prompts (``reply_style`` of R2PO:
``params[0]: v, ...`` or ``params: [v, ...]``) and compares them; ``--grammar on`` leaves out the unconstrained replies.

Usage::

    python benchmarks/reply_format.py --size 0.5b --n 10
    python benchmarks/reply_format.py --size 1.5b --n 10 --json out.json
    python benchmarks/reply_format.py --size 0.5b --n 6 --reply-styles indexed list --grammar on
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po import R2PO, ExampleLLM
from sb3_r2po.common.parsing import parse_params
from sb3_r2po.llm.embedded import EmbeddedBackend
from sb3_r2po.llm.recording import RecordingBackend, read_records
from sb3_r2po.prompts import prompt_preset

LEAN = {key: value for key, value in prompt_preset("lean").items() if key != "reply_style"}
"""The quickstart's lean prompt settings (the ``lean`` preset), the reply style left to the caller."""

CRITIC_OPENING = "You are an optimization agent"
"""How R2PO's Critic prompts start (one user message, no system message; its Search prompts are a global optimizer's)."""


def role_of(messages: list[dict[str, str]]) -> str | None:
    first = messages[0]["content"] if messages and messages[0]["role"] == "user" else ""
    return "critic" if first.startswith(CRITIC_OPENING) else "search" if first.startswith("You are a global") else None


def collect_prompts(n: int, seed: int = 0, reply_style: str = "indexed") -> tuple[dict[str, list[list[dict[str, str]]]], Any]:
    """``n`` first-attempt prompts per role from an R2PO run with the example stand-in, and the parameter space."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calls.jsonl"
        model = R2PO(
            "MlpLinear",
            "CartPole-v1",
            llm=RecordingBackend(ExampleLLM(seed=seed), path),
            n_eval_episodes=5,
            warmup_episodes=5,
            seed=seed,
            max_episodes=5 + 10 * (n + 4),
            reply_style=reply_style,
            **LEAN,
        )
        model.learn(10**9)
        prompts: dict[str, list[list[dict[str, str]]]] = {role: [] for role in ("search", "critic")}
        for record in read_records(path):
            messages = record["messages"]
            role = role_of(messages)
            if role is not None and not any(m["role"] == "assistant" for m in messages) and len(prompts[role]) < n:
                prompts[role].append(messages)
    short = [role for role, found in prompts.items() if len(found) < n]
    if short:
        raise RuntimeError(f"the run gave fewer than {n} prompts for {short}")
    return prompts, model.policy.parameter_space


def history_vectors(messages: list[dict[str, str]], space: Any) -> list[np.ndarray]:
    """The vectors listed in a prompt (every line holding exactly ``space.size`` parseable values)."""
    vectors = []
    for line in messages[-1]["content"].splitlines():
        result = parse_params(line, space)
        if result.ok:
            vectors.append(result.params)
    return vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="0.5b", choices=["0.5b", "1.5b"])
    parser.add_argument("--n", type=int, default=10, help="prompts per role")
    parser.add_argument("--reply-styles", nargs="+", default=["indexed"], choices=["indexed", "list"])
    parser.add_argument("--grammar", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    prompt_sets = {style: collect_prompts(args.n, reply_style=style) for style in args.reply_styles}
    space = next(iter(prompt_sets.values()))[1]
    backend = EmbeddedBackend(args.size)
    backend.constrain(space)
    rows, calls = [], []
    for grammar, style in [(g == "on", s) for g in args.grammar for s in args.reply_styles]:
        backend.grammar = grammar
        for role, convs in prompt_sets[style][0].items():
            failures, repeats, degenerate, seconds, p_tok, c_tok = 0, 0, 0, [], [], []
            for i, messages in enumerate(convs):
                start = time.perf_counter()
                reply = backend.chat(messages, temperature=0.0)
                seconds.append(time.perf_counter() - start)
                p_tok.append(reply.prompt_tokens or 0)
                c_tok.append(reply.completion_tokens or 0)
                result = parse_params(reply.text, space)
                listed = history_vectors(messages, space)
                repeat = result.ok and any(np.array_equal(result.params, v) for v in listed)
                failures += int(not result.ok)
                repeats += int(bool(repeat))
                degenerate += int(result.ok and bool(np.all(result.params == result.params[0])))
                calls.append(
                    {"grammar": grammar, "style": style, "role": role, "i": i, "text": reply.text, "error": result.error}
                )
                status = "ok" if result.ok else f"FAIL ({result.error})"
                print(f"[grammar={grammar} {style} {role} {i}] {seconds[-1]:.1f} s {status}", file=sys.stderr, flush=True)
            rows.append(
                {
                    "grammar": grammar,
                    "style": style,
                    "role": role,
                    "n": len(convs),
                    "parse_failures": failures,
                    "repeats": repeats,
                    "all_equal": degenerate,
                    "mean_s": statistics.mean(seconds),
                    "mean_prompt_tokens": statistics.mean(p_tok),
                    "mean_completion_tokens": statistics.mean(c_tok),
                }
            )
    backend.close()

    print(f"\n{backend.spec.model}, R2PO's CartPole prompts (lean settings), greedy, one reply per prompt:\n")
    print(
        "| grammar | vectors in the prompt | prompt | parse failures | repeats a listed vector | all values equal "
        "| mean s/call | prompt tokens | completion tokens |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {'on' if r['grammar'] else 'off'} | {r['style']} | {r['role']} | {r['parse_failures']}/{r['n']} "
            f"| {r['repeats']}/{r['n']} "
            f"| {r['all_equal']}/{r['n']} | {r['mean_s']:.1f} | {r['mean_prompt_tokens']:.0f} "
            f"| {r['mean_completion_tokens']:.0f} |"
        )
    print(
        "\n'repeats a listed vector': for Search a copy of a history entry (R2PO rejects it and re-asks); for the "
        "Critic mostly the candidate itself (a legal 'keep it' answer)."
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"size": args.size, "rows": rows, "calls": calls}, indent=1))


if __name__ == "__main__":
    main()
