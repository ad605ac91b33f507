"""R2PO on CartPole-v1, top to bottom.

    python examples/quickstart.py --llm example          # deterministic stand-in (NOT an LLM), seconds
    python examples/quickstart.py --llm embedded         # Qwen2.5-Coder on this CPU (see README)
    python examples/quickstart.py --llm http://127.0.0.1:8000/v1   # any OpenAI-compatible server

Prints what it prepares (the model file, the model), one line per iteration (``verbose=1``: episodes used of the
budget, the Search proposal's mean return, the Critic's revision with its mean return and whether it was kept, the
best so far, the LLM's calls and seconds), then a short results table. What a small CPU model or the example
stand-in achieves says nothing about what gpt-oss-20b achieves.
"""

from __future__ import annotations

import sys

print("quickstart: loading the libraries (torch, Stable-Baselines3)", flush=True)  # the first run's imports take seconds
sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # every line shows at once, also through a pipe

import argparse  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402

from sb3_r2po import R2PO  # noqa: E402
from sb3_r2po.prompts import PROMPT_PRESETS, prompt_preset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="example", help="llm string: example[:seed], embedded[:size], a server URL, an HF id")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--episodes", type=int, default=65, help="episode budget, warm-up included (the paper: 4020)")
    parser.add_argument("--k", type=int, default=5, help="episodes per candidate (the paper uses 20)")
    parser.add_argument("--warmup", type=int, default=5, help="random candidates before the first iteration (paper: 20)")
    parser.add_argument(
        "--prompts",
        default=None,
        choices=list(PROMPT_PRESETS),
        help="prompt preset: lean (the default, for CPU models), tight, or full (the reference's: whole history and "
        "trajectories, slow on CPU; the default with --paper)",
    )
    parser.add_argument(
        "--paper",
        action="store_true",
        help="R2PO's defaults (the paper's method): the full prompts, without the quickstart's options for small models",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=None, help="save the trained model to this path")
    args = parser.parse_args()
    args.prompts = args.prompts or ("full" if args.paper else "lean")

    # R2PO's defaults run the paper's method. For a small CPU model the quickstart turns on three options of ours
    # (off by default; --paper leaves them off): a reply that repeats a history vector is unusable, an unusable reply is
    # re-asked with the error stated and then replaced by a local step from the best candidate (the reference runs the
    # whole iteration again instead), and a revision equal to its candidate is not evaluated again.
    options: dict[str, Any] = (
        {} if args.paper else {"reject_duplicates": True, "on_unusable_reply": "reask", "skip_unchanged_revisions": True}
    )

    # 1. The model: a linear policy y = s @ W + b (10 parameters on CartPole), optimized by the LLM.
    model = R2PO(
        "MlpLinear",
        args.env,
        llm=args.llm,
        n_eval_episodes=args.k,
        warmup_episodes=args.warmup,
        target_return=500,
        tau_c=480,
        max_episodes=args.episodes,
        seed=args.seed,
        # prompt size; the default "lean" preset, for CPU models: the 8 best and 4 latest history entries (grown by
        # appending up to 8 more before they are cut back, so each prompt starts with the previous one: prefix reuse),
        # 20 trajectory steps, 2 digits, vectors written as lists (params: [v, ...], what the embedded grammar enforces)
        **prompt_preset(args.prompts),
        **options,
        verbose=1,  # what is being prepared, then one line per iteration
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # the per-iteration lines only, not SB3's log tables
    print(
        f"quickstart: R2PO on {args.env} with llm={args.llm}: {args.warmup} warm-up episodes, then iterations of "
        f"up to 2 x {args.k} episodes until {args.episodes} episodes are used; prompt preset {args.prompts!r}"
        + (" (the reference's prompts)" if args.prompts == "full" else " (shorter prompts with our additions)")
        + (
            "; R2PO's loop defaults (the paper's method)"
            if args.paper
            else "; loop options for small models: " + ", ".join(options)
        )
    )

    # 2. Train until the episode budget is spent (total_timesteps is only an upper safety net here).
    start = time.perf_counter()
    model.learn(total_timesteps=10**9)
    seconds = time.perf_counter() - start

    # 3. Evaluate the best policy found (the model always holds it) on fresh episodes, seeded apart from training.
    eval_env = Monitor(gym.make(args.env))
    eval_env.reset(seed=args.seed + 10_000)
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)

    # 4. Report.
    warmup = [r["mean_return"] for r in model.history if r["kind"] == "warmup"]
    iterations = [r for r in model.history if r["kind"] != "warmup"]
    best = model.best_record()
    kept = sum(r["revision"]["status"] == "kept" for r in iterations)
    rows = [
        ("llm", args.llm),
        ("episodes used", f"{model.episodes_used} (budget {args.episodes})"),
        ("iterations", f"{model.iteration}"),
        ("best warm-up return (1 episode)", f"{max(warmup):.1f}" if warmup else "-"),
        (
            "best candidate (mean of K)",
            f"{best['mean_return']:.1f} ({best['kind']}, iteration {best['iteration']})" if best else "-",
        ),
        ("mean return over iterations", f"{sum(r['mean_return'] for r in iterations) / max(1, len(iterations)):.1f}"),
        ("revisions kept", f"{kept} of {len(iterations)}"),
        (
            "LLM calls / parse failures / fallbacks",
            " / ".join(str(int(model.llm_stats[key])) for key in ("calls", "parse_failures", "fallbacks")),
        ),
        ("LLM seconds / wall seconds", f"{model.llm_stats['seconds']:.1f} / {seconds:.1f}"),
        ("final policy, 20 fresh episodes", f"{mean:.1f} +- {std:.1f}"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"| {'R2PO on ' + args.env:<{width}} | result |\n|{'-' * (width + 2)}|--------|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")
    if args.save:
        model.save(args.save)


if __name__ == "__main__":
    main()
