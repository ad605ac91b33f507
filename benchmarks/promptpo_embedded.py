"""PromptPO (``variant="promptpo"``, the ``"Code"`` policy) with the embedded Qwen2.5-Coder model on CartPole-v1, in the
strict sandbox: what that small CPU model scores, not what gpt-oss-20b would.

    python benchmarks/promptpo_embedded.py --size 1.5b --candidates 2 --rounds 2 --repairs 2 --seed 0 --out /tmp/promptpo_1_5b

Prints one line per round (the kept candidate's mean return, every candidate's, the repairs) and the run's LLM calls,
tokens and seconds; the run directory (``--out``) keeps the model, history.json and every LLM call.
"""

from __future__ import annotations

import argparse
import time

from sb3_r2po import R2PO
from sb3_r2po.llm.embedded import EmbeddedBackend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1.5b", choices=["0.5b", "1.5b"])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--candidates", type=int, default=2, help="code_candidates (PromptPO: 10)")
    parser.add_argument("--rounds", type=int, default=2, help="max_iterations (PromptPO: 10)")
    parser.add_argument("--repairs", type=int, default=2, help="code_repairs (PromptPO: 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="checkpoint_dir of the run")
    args = parser.parse_args()
    llm = EmbeddedBackend(args.size, seed=args.seed)
    start = time.perf_counter()
    model = R2PO(
        "Code",
        args.env,
        llm=llm,
        variant="promptpo",
        code_candidates=args.candidates,
        code_repairs=args.repairs,
        max_iterations=args.rounds,
        seed=args.seed,
        checkpoint_dir=args.out,
    )
    model.learn(10**9)
    for record in model.history:
        scores = ["failed" if c["mean_return"] is None else f"{c['mean_return']:.1f}" for c in record["candidates"]]
        repairs = sum(len(c["failures"]) for c in record["candidates"])
        print(f"round {record['iteration']}: kept {record['mean_return']:.1f} | candidates {scores} | repairs {repairs}")
    s = model.llm_stats
    print(
        f"{args.size}, {args.env}, seed {args.seed}: {int(s['calls'])} LLM calls, {int(s['prompt_tokens'])} prompt and "
        f"{int(s['completion_tokens'])} completion tokens, {s['seconds']:.0f} s in the LLM, "
        f"{time.perf_counter() - start:.0f} s in all; {model.episodes_used} episodes"
    )


if __name__ == "__main__":
    main()
