"""Prefix reuse: how much of each prompt an earlier call already processed, and what the embedded backend's prefix
cache saves.

    python benchmarks/prefix_reuse.py shares [--episodes 205] [--preset lean] [--order chronological] [--slack N ...]
    python benchmarks/prefix_reuse.py compare [--seeds 0 1] [--episodes 65] [--size 0.5b] [--slack N] [--baseline-tree DIR]
    python benchmarks/prefix_reuse.py paired RUN_DIR [--baseline RUN_DIR] [--also RUN_DIR] [--defaults-only] [--size 0.5b]

``shares`` runs R2PO with ``llm="example"`` (a deterministic local search, not an LLM: only the prompts matter) and a
``checkpoint_dir`` on CartPole with a prompt preset and the quickstart's settings, then reads the transcript
(``llm_calls.jsonl``) and prints, for every call with a predecessor, the share of its prompt text that is a common
prefix with the previous call of the same role, and with the previous call whatever its role: the mean of the calls'
shares and the pooled share (shared characters over all characters), over all calls and from the fifth iteration on.
``--order`` renders the compressed history in another order (``best-first``: the best entries, best first, then the
latest; ``blocks``: the best entries in history order, then the latest not among them) to compare with R2PO's
(``chronological``: the shown entries in history order). ``--slack`` runs each order once per ``history_slack`` value
given (the shown entries grow by appending until the window's size plus the slack, then are cut back; without it, the
preset's own: ``lean`` has 8). Beside the shares: the characters per call that are not a common prefix with the
previous call of its role (what a per-role prefix cache has to process).

``compare`` runs the quickstart's configuration (CartPole, ``lean`` preset, K=5, 5 warm-up episodes, 65 episodes,
the quickstart's loop options for small models; ``--slack N``: with ``history_slack=N`` instead of the preset's 8) with
the embedded model, once with the prefix cache off and once on, for each seed, and prints a table: prompt tokens,
prompt tokens served from a cache (all, and from the fifth iteration on), LLM seconds per iteration, wall seconds,
and whether the two runs' histories are identical. Off is the backend without its prefix cache: llama.cpp then
reuses only the prefix shared with the call just before.
``--baseline-tree DIR`` adds, for each seed, the same run on another source tree (a ``git worktree`` of an earlier
commit, imported through ``PYTHONPATH`` in a child process), without a prefix cache: e.g. the commit before prefix
reuse, whose prompts put the history and the candidate before the parts that stay the same. Its prompts differ, so
its history and replies are not compared.

``paired`` times the calls of recorded runs (``compare --out``'s run directories) again, call by call, in one
process: each call of ``RUN_DIR``'s transcript is asked of three backends (without the prefix cache and with the
grammar applied to every token, ``grammar_first=True``, as before either change; with the cache and the grammar applied
first; the defaults: with the cache and the grammar checked against the greedy token), and the same call of
``--baseline``'s transcript (a run of another commit) of a fourth backend without the cache and with the grammar
applied first, in turn, so all of them meet the same machine load at the same time (separate runs minutes apart on a
shared machine differ by more than the cache saves). ``--also RUN_DIR`` adds the calls of one more run (e.g. one with
``history_slack``) to the same rounds, asked of one more backend with the defaults; ``--defaults-only`` leaves out
the two grammar-first backends of ``RUN_DIR``. Each backend sees its transcript's calls in their order, as in the run;
every reply is checked against the recorded one. Prints each backend's prompt tokens, cached tokens and LLM seconds
per iteration.

``compare`` and ``paired`` name the machine in their tables' first line (the CPU, its cores and the instruction sets
llama.cpp uses): the embedded model's replies and timings are that machine's (another CPU's kernels round otherwise).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sb3_r2po import R2PO
from sb3_r2po.llm.recording import read_records
from sb3_r2po.prompts import prompt_preset
from sb3_r2po.r2po import run_state as history_module

CRITIC_OPENING = "You are an optimization agent"
"""How R2PO's Critic prompts start (its Search prompts are a global optimizer's)."""

QUICKSTART = dict(
    n_eval_episodes=5,
    warmup_episodes=5,
    target_return=500,
    tau_c=480,
    reject_duplicates=True,
    on_unusable_reply="reask",
    skip_unchanged_revisions=True,
)
"""examples/quickstart.py's settings (without the episode budget and the seed)."""


# ---------------------------------------------------------------------------------------------- shares


def prompt_text(record: dict[str, Any]) -> str:
    """A recorded call's prompt: its messages' contents, in order."""
    return "\n".join(str(m["content"]) for m in record["messages"])


def role_of(record: dict[str, Any]) -> str:
    """``"critic"`` or ``"search"``, from how the call's first message opens."""
    return "critic" if str(record["messages"][0]["content"]).startswith(CRITIC_OPENING) else "search"


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def iterations_of(records: Sequence[dict[str, Any]]) -> list[int]:
    """The iteration of every call: a Search prompt states it ("This is iteration N"); a Critic call belongs to the
    Search before it."""
    out, current = [], 0
    for record in records:
        text = prompt_text(record)
        if role_of(record) == "search" and "This is iteration " in text:
            current = int(text.split("This is iteration ")[1].split()[0].rstrip("."))
        out.append(current)
    return out


def prefix_shares(records: Sequence[dict[str, Any]], from_iteration: int = 1) -> dict[str, float]:
    """
    The common-prefix shares of a transcript's calls from iteration ``from_iteration`` on.

    :return: ``same_role`` and ``consecutive`` (the mean over calls of the share of a call's prompt that is a common
        prefix with the previous call of its role, and with the previous call), ``same_role_pooled`` and
        ``consecutive_pooled`` (shared characters over all characters of those calls) and ``calls`` (the calls that
        count: those with a previous call of their role), ``new_chars`` (the mean over those calls of the characters
        that are not a common prefix with the previous call of the role: what a per-role prefix cache processes).
    """
    texts = [prompt_text(r) for r in records]
    roles = [role_of(r) for r in records]
    iterations = iterations_of(records)
    last: dict[str, str] = {}
    same, consecutive, new, same_chars, consecutive_chars, chars = [], [], [], 0, 0, 0
    for i, (text, role) in enumerate(zip(texts, roles, strict=True)):
        previous = last.get(role)
        last[role] = text
        if previous is None or iterations[i] < from_iteration or not text:
            continue
        shared_same, shared_last = common_prefix(text, previous), common_prefix(text, texts[i - 1])
        same.append(shared_same / len(text))
        consecutive.append(shared_last / len(text))
        new.append(len(text) - shared_same)
        same_chars, consecutive_chars, chars = same_chars + shared_same, consecutive_chars + shared_last, chars + len(text)
    mean = lambda values: sum(values) / len(values) if values else float("nan")  # noqa: E731
    return {
        "same_role": mean(same),
        "consecutive": mean(consecutive),
        "same_role_pooled": same_chars / chars if chars else float("nan"),
        "consecutive_pooled": consecutive_chars / chars if chars else float("nan"),
        "new_chars": mean(new),
        "calls": float(len(same)),
    }


def blocks_order(
    history: list[dict[str, Any]], best_k: int | None, recent: int | None, slack: int = 0
) -> list[dict[str, Any]]:
    """The best ``best_k`` entries in history order, then the ``recent`` latest that are not among them."""
    if best_k is None and recent is None:
        return history
    n = len(history)
    ranked = sorted(range(n), key=lambda i: (-history[i]["mean_return"], i))
    best = sorted(ranked[: best_k or 0])
    latest = [i for i in range(max(0, n - (recent or 0)), n) if i not in best]
    return [history[i] for i in best + latest]


def best_first_order(
    history: list[dict[str, Any]], best_k: int | None, recent: int | None, slack: int = 0
) -> list[dict[str, Any]]:
    """The best ``best_k`` entries, best first, then the ``recent`` latest that are not among them, oldest first."""
    if best_k is None and recent is None:
        return history
    n = len(history)
    best = sorted(range(n), key=lambda i: (-history[i]["mean_return"], i))[: best_k or 0]
    latest = [i for i in range(max(0, n - (recent or 0)), n) if i not in best]
    return [history[i] for i in best + latest]


ORDERS: dict[str, Callable[..., list[dict[str, Any]]] | None] = {
    "chronological": None,  # R2PO's own
    "blocks": blocks_order,
    "best-first": best_first_order,
}


def example_transcript(
    directory: Path, preset: str, episodes: int, seed: int = 0, slack: int | None = None
) -> list[dict[str, Any]]:
    """Run R2PO with ``llm="example"`` and a ``checkpoint_dir`` in ``directory``; return its transcript's records."""
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm="example",
        max_episodes=episodes,
        seed=seed,
        checkpoint_dir=str(directory),
        **QUICKSTART,
        **preset_settings(preset, slack),
    )
    model.learn(total_timesteps=10**9)
    return read_records(directory / "llm_calls.jsonl")


def preset_settings(preset: str, slack: int | None) -> dict[str, Any]:
    """The prompt preset's R2PO arguments, with ``history_slack=slack`` unless ``slack`` is ``None`` (then the preset's
    own: a source tree from before the option has none)."""
    return {**prompt_preset(preset), **({} if slack is None else {"history_slack": slack})}


def shares_main(args: argparse.Namespace) -> None:
    print(
        f"Common-prefix share of each prompt (characters), CartPole, llm='example', preset {args.preset!r}, "
        f"{args.episodes} episodes, quickstart settings"
    )
    print(
        "| history order | history_slack | calls | same role, mean | same role, pooled | consecutive, mean | "
        "consecutive, pooled | new characters per call | from |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    preset_slack = prompt_preset(args.preset)["history_slack"]
    slacks = [preset_slack if slack is None else slack for slack in args.slack]
    if any(slacks) and args.order != ["chronological"]:
        raise SystemExit("a history_slack applies to R2PO's own (chronological) order only: add --slack 0")
    for order, slack in itertools.product(args.order, slacks):
        chosen = ORDERS[order]
        original = history_module.shown_history
        if chosen is not None:  # the prompt view calls run_state.shown_history: replace it there
            history_module.shown_history = chosen  # type: ignore[assignment]
        try:
            with tempfile.TemporaryDirectory() as tmp:
                records = example_transcript(Path(tmp) / "run", args.preset, args.episodes, slack=slack)
        finally:
            history_module.shown_history = original  # type: ignore[assignment]
        for start in (1, 5):
            s = prefix_shares(records, from_iteration=start)
            print(
                f"| {order} | {slack} | {int(s['calls'])} | {s['same_role']:.0%} | {s['same_role_pooled']:.0%} | "
                f"{s['consecutive']:.0%} | {s['consecutive_pooled']:.0%} | {s['new_chars']:.0f} | "
                f"iteration {start} |"
            )


# ---------------------------------------------------------------------------------------------- compare


def cache_option(prefix_cache: bool) -> dict[str, bool]:
    """``EmbeddedBackend``'s ``prefix_cache`` argument; none on a source tree from before the option (no cache)."""
    import inspect

    from sb3_r2po.llm.embedded import EmbeddedBackend

    if "prefix_cache" in inspect.signature(EmbeddedBackend).parameters:
        return {"prefix_cache": prefix_cache}
    if prefix_cache:
        raise SystemExit("this source tree's EmbeddedBackend has no prefix cache")
    return {}


def run_embedded(
    seed: int, prefix_cache: bool, episodes: int, size: str, directory: Path, slack: int | None = None
) -> dict[str, Any]:
    """One quickstart run with the embedded model; what the table needs."""
    from sb3_r2po.llm.embedded import EmbeddedBackend

    backend = EmbeddedBackend(size=size, **cache_option(prefix_cache))
    model = R2PO(
        "MlpLinear",
        "CartPole-v1",
        llm=backend,
        max_episodes=episodes,
        seed=seed,
        checkpoint_dir=str(directory),
        **QUICKSTART,
        **preset_settings("lean", slack),
    )
    backend.load()  # the load is not a call: keep it out of the wall time
    start = time.perf_counter()
    model.learn(total_timesteps=10**9)
    wall = time.perf_counter() - start
    backend.close()
    records = read_records(directory / "llm_calls.jsonl")
    iterations = iterations_of(records)
    late = [r["reply"] for r, i in zip(records, iterations, strict=True) if i >= 5]
    return {
        "seed": seed,
        "prefix_cache": prefix_cache,
        "calls": int(model.llm_stats["calls"]),
        "iterations": int(model.iteration),
        "prompt_tokens": int(model.llm_stats["prompt_tokens"]),
        "cached": int(model.llm_stats.get("prompt_tokens_cached", 0)),
        "late_prompt_tokens": sum(int(r.get("prompt_tokens") or 0) for r in late),
        "late_cached": sum(int(r.get("prompt_tokens_cached") or 0) for r in late),
        "late_calls": len(late),
        "late_seconds": sum(float(r.get("seconds") or 0.0) for r in late),
        "llm_seconds": float(model.llm_stats["seconds"]),
        "wall_seconds": wall,
        "history": json.dumps(model.history, sort_keys=True, default=str),
        "replies": {(r["hash"], n): r["reply"]["text"] for r, n in _numbered(records)},
    }


def _numbered(records: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """Each record with how often its request was asked before it (a request asked twice is two requests)."""
    seen: dict[str, int] = {}
    out = []
    for record in records:
        out.append((record, seen.get(record["hash"], 0)))
        seen[record["hash"]] = seen.get(record["hash"], 0) + 1
    return out


def same_replies(off: dict[str, Any], on: dict[str, Any]) -> tuple[int, int]:
    """Of the requests both runs asked (same prompt, same seed), how many got the same reply, and how many there are."""
    shared = set(off["replies"]) & set(on["replies"])
    return sum(off["replies"][k] == on["replies"][k] for k in shared), len(shared)


def baseline_run(tree: Path, seed: int, episodes: int, size: str, directory: Path) -> dict[str, Any]:
    """:func:`run_embedded` without a prefix cache on the source tree ``tree``, in a child process."""
    directory.mkdir(parents=True, exist_ok=True)
    row_file = directory.parent / f"{directory.name}.row.json"
    command = [sys.executable, __file__, "_row", str(seed), str(episodes), size, str(directory), str(row_file)]
    subprocess.run(command, env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    row = json.loads(row_file.read_text())
    row["replies"], row["tree"] = {}, _commit(tree)
    return row


def _commit(tree: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def machine() -> str:
    """The CPU, the cores this process may use and the instruction sets llama.cpp uses on them: the embedded model's
    replies depend on them (other kernels round otherwise), so its figures are this machine's."""
    from sb3_r2po.llm.embedded import default_threads, llama_system_info

    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        info = ""
    names = (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
    cpu = next(names, platform.processor() or platform.machine())
    features = llama_system_info().strip().rstrip("|").strip()
    return f"{cpu}, {default_threads()} cores; llama.cpp: {features}"


def _progress(row: dict[str, Any]) -> None:
    tree = f" on {row['tree']}" if "tree" in row else ""
    print(
        f"seed {row['seed']}{tree} prefix_cache={row['prefix_cache']}: {row['calls']} calls, {row['prompt_tokens']} "
        f"prompt tokens ({row['cached']} cached), LLM {row['llm_seconds']:.1f} s, wall {row['wall_seconds']:.1f} s",
        file=sys.stderr,
        flush=True,
    )


def compare_main(args: argparse.Namespace) -> None:
    rows = []
    baseline = Path(args.baseline_tree).resolve() if args.baseline_tree else None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        for seed in args.seeds:
            if baseline is not None:
                rows.append(baseline_run(baseline, seed, args.episodes, args.size, out / f"seed{seed}-baseline"))
                _progress(rows[-1])
            for cache in (False, True):
                directory = out / f"seed{seed}-cache-{'on' if cache else 'off'}"
                rows.append(run_embedded(seed, cache, args.episodes, args.size, directory, args.slack))
                _progress(rows[-1])
    slack = f", history_slack={args.slack}" if args.slack is not None else ""
    print(
        f"Embedded {args.size}, CartPole-v1, quickstart settings (lean preset{slack}, K=5, 5 warm-up, {args.episodes} "
        f"episodes); machine: {machine()}"
    )
    print(
        "| seed | prefix cache | iterations | calls | prompt tokens | cached | cached from it. 5 | "
        "LLM s / iteration | LLM s / call from it. 5 | wall s | history identical | same replies to the same prompts |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    by_seed = {(r["seed"], r["prefix_cache"]): r for r in rows if "tree" not in r}
    for r in rows:
        off, on = by_seed[(r["seed"], False)], by_seed[(r["seed"], True)]
        same = "yes" if off["history"] == on["history"] else "no"
        equal, shared = same_replies(off, on)
        comparison = f"{same} | {equal} of {shared}" if "tree" not in r else "(other prompts) | (other prompts)"
        late_share = r["late_cached"] / r["late_prompt_tokens"] if r["late_prompt_tokens"] else float("nan")
        per_call = r["late_seconds"] / r["late_calls"] if r["late_calls"] else float("nan")
        print(
            f"| {r['seed']} | {'on' if r['prefix_cache'] else 'off'}{' (' + r['tree'] + ')' if 'tree' in r else ''} | "
            f"{r['iterations']} | {r['calls']} | "
            f"{r['prompt_tokens']} | {r['cached']} ({r['cached'] / max(1, r['prompt_tokens']):.0%}) | {late_share:.0%} | "
            f"{r['llm_seconds'] / max(1, r['iterations']):.1f} | {per_call:.1f} | {r['wall_seconds']:.0f} | "
            f"{comparison} |"
        )


def paired_main(args: argparse.Namespace) -> None:
    from sb3_r2po.llm.embedded import EmbeddedBackend

    run, first = Path(args.run_dir), {"grammar_first": True}
    configurations: dict[str, tuple[Path, dict[str, bool]]] = {  # transcript and backend options of each row
        "off, grammar first": (run, {"prefix_cache": False, **first}),
        "on, grammar first": (run, {"prefix_cache": True, **first}),
        "on": (run, {"prefix_cache": True}),
    }
    if args.defaults_only:
        configurations = {name: configurations[name] for name in ("on",)}
    if args.also:
        configurations["also: on"] = (Path(args.also), {"prefix_cache": True})
    if args.baseline:
        configurations["baseline: off, grammar first"] = (Path(args.baseline), {"prefix_cache": False, **first})
    transcripts = {name: path for name, (path, _) in configurations.items()}
    records = {name: read_records(path / "llm_calls.jsonl") for name, path in transcripts.items()}
    space = R2PO("MlpLinear", "CartPole-v1", llm="example", **QUICKSTART, **prompt_preset("lean")).policy.parameter_space
    backends = {name: EmbeddedBackend(size=args.size, **options) for name, (_, options) in configurations.items()}
    totals = {name: {"seconds": 0.0, "prompt": 0, "cached": 0, "same": 0} for name in records}
    for backend in backends.values():
        backend.constrain(space)
        backend.load()
    for i in range(max(len(r) for r in records.values())):
        for name, backend in backends.items():
            if i >= len(records[name]):
                continue
            record = records[name][i]
            reply = backend.chat(record["messages"], temperature=float(record["settings"]["temperature"]))
            total = totals[name]
            total["seconds"] += reply.seconds
            total["prompt"] += int(reply.prompt_tokens or 0)
            total["cached"] += int(reply.prompt_tokens_cached or 0)
            total["same"] += reply.text == record["reply"]["text"]
        seconds = ", ".join(f"{name} {total['seconds']:.1f} s" for name, total in totals.items())
        print(f"after call {i + 1}: {seconds}", file=sys.stderr, flush=True)
    print(
        f"Embedded {args.size}: the calls of {args.run_dir} (and {args.baseline}) again, call by call in turn; "
        f"machine: {machine()}"
    )
    print(
        "| transcript | prefix cache, grammar | calls | iterations | prompt tokens | cached | LLM s | LLM s / it. "
        "| same replies |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, total in totals.items():
        n, iterations = len(records[name]), max(iterations_of(records[name]))
        print(
            f"| {transcripts[name]} | {name} | {n} | {iterations} | {total['prompt']} | {total['cached']} "
            f"({total['cached'] / max(1, total['prompt']):.0%}) | {total['seconds']:.1f} | "
            f"{total['seconds'] / max(1, iterations):.1f} | {total['same']} of {n} |"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    shares = sub.add_parser("shares", help="common-prefix shares of an example run's prompts")
    shares.add_argument("--episodes", type=int, default=205, help="episode budget (205: 20 iterations)")
    shares.add_argument("--preset", default="lean")
    shares.add_argument("--order", nargs="+", default=["chronological"], choices=list(ORDERS))
    shares.add_argument("--slack", type=int, nargs="+", default=[None], help="history_slack values (default: the preset's)")
    compare = sub.add_parser("compare", help="the embedded model with the prefix cache off and on")
    compare.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    compare.add_argument("--episodes", type=int, default=65, help="episode budget (the quickstart's: 65)")
    compare.add_argument("--size", default="0.5b", choices=["0.5b", "1.5b"])
    compare.add_argument("--out", default=None, help="keep the run directories (transcripts) here")
    compare.add_argument("--slack", type=int, default=None, help="history_slack of the runs on this tree (default: lean's)")
    compare.add_argument("--baseline-tree", default=None, help="also run each seed on this source tree, without a cache")
    paired = sub.add_parser("paired", help="the calls of recorded runs again, each backend in turn")
    paired.add_argument("run_dir")
    paired.add_argument("--baseline", default=None, help="a run directory of another commit (its calls without a cache)")
    paired.add_argument("--also", default=None, help="one more run directory (its calls with the default backend)")
    paired.add_argument("--defaults-only", action="store_true", help="leave out RUN_DIR's two grammar-first backends")
    paired.add_argument("--size", default="0.5b", choices=["0.5b", "1.5b"])
    row = sub.add_parser("_row")  # one baseline run in a child process (internal): seed episodes size directory row_file
    row.add_argument("seed", type=int)
    row.add_argument("episodes", type=int)
    row.add_argument("size")
    row.add_argument("directory")
    row.add_argument("row_file")
    args = parser.parse_args(argv)
    if args.command == "_row":
        result = run_embedded(args.seed, False, args.episodes, args.size, Path(args.directory))
        Path(args.row_file).write_text(json.dumps({**result, "replies": {}}))
        return
    {"shares": shares_main, "compare": compare_main, "paired": paired_main}[args.command](args)


if __name__ == "__main__":
    main()
