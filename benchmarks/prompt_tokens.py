"""Prompt tokens per Search and Critic call at iterations 1, 50 and 100, with the embedded model's tokenizer.

    python benchmarks/prompt_tokens.py [--size 1.5b] [--envs CartPole-v1 Swimmer-v5]

The prompts come from real R2PO runs driven by ``ExampleLLM`` (a deterministic local search, not an LLM: only
the prompt *lengths* matter here, and they depend on the history length and the rendered trajectory, not on
who answers). The reference implementation prints whole trajectories (up to 1000 steps) and the whole history;
the goal is <= 3000 tokens per Critic prompt at iteration 100. Each setting is one row:

- ``paper-like``: the whole trajectory (``max_trajectory_steps=None``), no folding, 4 significant figures, whole history;
- ``default``: 40 trajectory steps (head and tail), folding of repeated steps, 3 significant figures, whole history;
- ``compact``: ``default`` plus history compression (``history_best_k=10``, ``history_recent=10``) and 2 figures;
- ``lean``: the ``lean`` preset (``sb3_r2po.prompts``) with indexed vectors: the 8 best plus the 4 latest history
  entries, 20 trajectory steps, 2 figures;
- ``minimal``: the 5 best plus the 3 latest history entries, 16 trajectory steps, 2 figures, indexed vectors;
- ``minimal-list``: ``minimal`` with vectors written as lists (``reply_style="list"``: ``params: [v, v, ...]``);
- ``tight``: the ``tight`` preset: ``minimal-list`` with 12 trajectory steps.

Tokens are counted with the GGUF's own tokenizer (llama-cpp-python, ``vocab_only``), chat template excluded.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from sb3_r2po import R2PO, ChatReply, ExampleLLM
from sb3_r2po.prompts import prompt_preset

SETTINGS = {
    "paper-like": dict(max_trajectory_steps=None, fold_repeated_steps=False, trajectory_digits=4),
    "default": dict(),
    "compact": dict(history_best_k=10, history_recent=10, trajectory_digits=2),
    "lean": {**prompt_preset("lean"), "reply_style": "indexed"},
    "minimal": {**prompt_preset("tight"), "max_trajectory_steps": 16, "reply_style": "indexed"},
}
SETTINGS["minimal-list"] = {**SETTINGS["minimal"], "reply_style": "list"}
SETTINGS["tight"] = prompt_preset("tight")
ENVS = {
    "CartPole-v1": dict(target_return=500, tau_c=480, step_size=1.0, warmup_episodes=20),
    "Swimmer-v5": dict(target_return=250, tau_c=230, step_size=0.1, warmup_episodes=100),
}
CHECKPOINTS = (1, 50, 100)


CRITIC_OPENING = "You are an optimization agent"
"""How R2PO's Critic prompts start (its Search prompts are a global optimizer's)."""


class PromptCapture(ExampleLLM):
    """ExampleLLM that keeps the last user prompt of each role, per iteration."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.prompts: dict[tuple[int, str], str] = {}

    def chat(self, messages: Sequence[dict[str, str]], *, temperature: float = 0.0) -> ChatReply:
        user = messages[-1]["content"]  # one user message per call (no system message)
        role = "critic" if user.startswith(CRITIC_OPENING) else "search"
        iteration = int(user.split("This is iteration ")[1].split()[0].rstrip(".")) if "This is iteration " in user else -1
        if iteration < 0:  # the critic prompt has no iteration line: it belongs to the latest search
            iteration = max((i for i, r in self.prompts if r == "search"), default=0)
        self.prompts[(iteration, role)] = "\n".join(m["content"] for m in messages)
        return super().chat(messages, temperature=temperature)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="0.5b", choices=["0.5b", "1.5b"])
    parser.add_argument("--envs", nargs="+", default=list(ENVS))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--k", type=int, default=5, help="episodes per candidate (prompt length does not depend on it)")
    args = parser.parse_args()

    from llama_cpp import Llama

    from sb3_r2po.llm.embedded import ensure_model_file

    tokenizer = Llama(str(ensure_model_file(args.size)), vocab_only=True, verbose=False)

    def count(text: str) -> int:
        return len(tokenizer.tokenize(text.encode(), add_bos=False, special=False))

    print(f"Tokens per prompt (system + user), Qwen2.5-Coder {args.size} tokenizer")
    print("| env | setting | " + " | ".join(f"search @{i} | critic @{i}" for i in CHECKPOINTS) + " |")
    print("|---|---|" + "---|---|" * len(CHECKPOINTS))
    for env_id in args.envs:
        for name in args.settings:
            setting = SETTINGS[name]
            llm = PromptCapture()
            env_settings = ENVS[env_id]
            model = R2PO(
                "MlpLinear",
                env_id,
                llm=llm,
                n_eval_episodes=args.k,
                seed=0,
                max_episodes=env_settings["warmup_episodes"] + 2 * args.k * max(CHECKPOINTS),
                **env_settings,
                **setting,
            )
            model.learn(total_timesteps=10**12)
            cells = []
            for i in CHECKPOINTS:
                for role in ("search", "critic"):
                    text = llm.prompts.get((i, role))
                    cells.append(str(count(text)) if text else "-")
            print(f"| {env_id} | {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
