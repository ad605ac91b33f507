"""A behaviour oracle for refactors: example-LLM runs of every variant and every named option, recorded and compared.

    python benchmarks/oracle.py record DIR     # 61 short runs into DIR/<name>/ (about 10 seconds)
    python benchmarks/oracle.py compare A B    # per run: identical, or the first differing LLM call / file

Each run keeps its transcript (``llm_calls.jsonl``: every prompt and reply), ``history.json`` (byte for byte) and
``final.json`` (the saved model's parameters, timesteps and the history read back from ``model.zip``). A refactor that
keeps behaviour identical shows every run identical; one that changes behaviour on purpose names the runs it changes.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

from sb3_r2po import R2PO
from sb3_r2po.prompts import prompt_preset

ENVS: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(policy="MlpLinear", target_return=500, tau_c=480, step_size=1.0),
    "FrozenLake-v1": dict(policy="Tabular", target_return=1.0, tau_c=0.85),
    "MountainCarContinuous-v0": dict(policy="MlpLinear", target_return=100, tau_c=97, step_size=1.0),
}
VARIANTS = ["r2po", "props", "props_plus", "pure_search", "actor_second_pass", "critic_only", "rep_traj", "always_critic",
            "three_traj"]  # fmt: skip
OPTIONS: dict[str, dict[str, Any]] = {
    "search_sees_task": dict(search_sees_task=True),
    "critic_selection_hints": dict(critic_selection_hints=True),
    "extra_statistics": dict(extra_statistics=True),
    "max_traj": dict(max_trajectory_steps=10),
    "fold": dict(fold_repeated_steps=True),
    "hist": dict(history_best_k=3, history_recent=2),
    "slack": dict(history_best_k=3, history_recent=2, history_slack=4),
    "digits": dict(trajectory_digits=2),
    "list": dict(reply_style="list"),
    "excerpts": dict(history_excerpts=2),
    "skip": dict(skip_unchanged_revisions=True),
    "dups": dict(reject_duplicates=True),
    "reask": dict(on_unusable_reply="reask"),
    "racing": dict(racing=True),
    "stop": dict(stop_at_target=True),
    "lean": prompt_preset("lean"),
    "tight": prompt_preset("tight"),
    "compact": dict(prompt_layout="compact"),
    "last_vector": dict(reply_reading="last_vector"),
    "cut_off": dict(reject_cut_off_replies=True),
    "clip": dict(clip_actions=False),
    "decimals": dict(param_decimals=2),
    "iterations": dict(max_iterations=2),
}
ON_FROZENLAKE = ("lean", "tight", "list", "excerpts", "compact", "last_vector")
DEFAULTS = [  # plain R2PO(...) with the settings table
    ("CartPole-v1_table", "MlpLinear", "CartPole-v1", {}),
    ("MountainCarContinuous-v0_ProjectedMlp", "ProjectedMlp", "MountainCarContinuous-v0", {}),
    (
        "MountainCarContinuous-v0_RandomFeatures",
        "RandomFeatures",
        "MountainCarContinuous-v0",
        {"policy_kwargs": {"hidden_dim": 4}},
    ),
    ("MountainCarContinuous-v0_props_plus_table", "ProjectedMlp", "MountainCarContinuous-v0", {"variant": "props_plus"}),
]


def run(out: Path, name: str, policy: str, env_id: str, kwargs: dict[str, Any]) -> None:
    directory = out / name
    shutil.rmtree(directory, ignore_errors=True)
    model = R2PO(policy, env_id, llm="example", seed=0, checkpoint_dir=str(directory), **kwargs)
    model.learn(10**9)
    loaded = R2PO.load(directory / "model.zip")
    final = {
        "num_timesteps": loaded.num_timesteps,
        "parameters": [float(v) for v in loaded.policy.get_flat()],
        "history": loaded.history,
    }
    (directory / "final.json").write_text(json.dumps(final, indent=1, default=str))


def record(out: Path) -> None:
    def variant_run(name: str, env_id: str, variant: str, extra: dict[str, Any]) -> None:
        settings = dict(ENVS[env_id])
        policy = settings.pop("policy")
        kwargs = dict(variant=variant, warmup_episodes=5, n_eval_episodes=5, max_episodes=5 + 5 * 2 * 4,
                      max_episode_steps=1000, **settings, **extra)  # fmt: skip
        if variant != "r2po":
            kwargs["tau_c"] = None
        run(out, name, policy, env_id, kwargs)

    for env_id in ENVS:
        for variant in VARIANTS:
            variant_run(f"{env_id}_{variant}", env_id, variant, {})
    for option, extra in OPTIONS.items():
        variant_run(f"CartPole-v1_r2po_{option}", "CartPole-v1", "r2po", extra)
        if option in ON_FROZENLAKE:
            variant_run(f"FrozenLake-v1_rep_traj_{option}", "FrozenLake-v1", "rep_traj", extra)
    variant_run("MountainCarContinuous-v0_rep_traj_clip", "MountainCarContinuous-v0", "rep_traj", {"clip_actions": True})
    for name, policy, env_id, extra in DEFAULTS:
        run(out, name, policy, env_id, dict(n_eval_episodes=3, max_episodes=30, **extra))
    print("recorded", len(list(out.iterdir())), "runs into", out)


def calls(path: Path) -> list[tuple[Any, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(row["messages"], (row.get("reply") or {}).get("text")) for row in rows]


def compare(a: Path, b: Path) -> int:
    identical, different = [], []
    for run_a in sorted(p for p in a.iterdir() if p.is_dir()):
        run_b = b / run_a.name
        if not run_b.is_dir():
            different.append(f"{run_a.name}: missing in {b}")
            continue
        calls_a, calls_b = calls(run_a / "llm_calls.jsonl"), calls(run_b / "llm_calls.jsonl")
        if calls_a != calls_b:
            pairs = enumerate(zip(calls_a, calls_b, strict=False))
            first = next((i for i, (x, y) in pairs if x != y), min(len(calls_a), len(calls_b)))
            different.append(f"{run_a.name}: LLM call {first} differs ({len(calls_a)} vs {len(calls_b)} calls)")
            continue
        files = [f for f in ("history.json", "final.json") if (run_a / f).read_bytes() != (run_b / f).read_bytes()]
        (different if files else identical).append(f"{run_a.name}: {', '.join(files)} differ" if files else run_a.name)
    print(f"identical: {len(identical)} of {len(identical) + len(different)}")
    for line in different:
        print("differs:", line)
    return 1 if different else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if len(sys.argv) == 3 and sys.argv[1] == "record":
        record(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
