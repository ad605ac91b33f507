"""The documentation's figures, drawn from result files in the repository (one command regenerates them all)::

    python benchmarks/docs_figures.py            # writes docs/_static/figures/*.png

- ``cartpole_sample_efficiency.png``: learning curves of R2PO (embedded 0.5B model, ``tight`` prompts), ARS and PPO on
  CartPole-v1, from ``benchmarks/results/sample_efficiency_cartpole_embedded_0.5b_tight.json`` (written by
  ``benchmarks/sample_efficiency.py --json``), drawn by the comparison's own plotting code
  (:func:`sb3_r2po.experiments.plots.plot_curves`).
- ``llm_seconds_per_iteration.png``: LLM seconds per iteration of the embedded 0.5B model per prompt setting, from
  ``benchmarks/results/prompt_settings_cartpole_embedded_0.5b.json`` (``benchmarks/prompt_settings.py --json``).
- ``prompt_tokens_per_iteration.png``: the Search and Critic prompts' sizes per iteration on CartPole-v1 for the
  ``full`` (R2PO's defaults), ``lean`` and ``tight`` prompt presets, from deterministic runs with ``ExampleLLM``
  (K = 20, 20 warm-up episodes) made by this script; tokens of the embedded model's tokenizer when its GGUF file is
  installed (the ``embedded`` extra), else characters / 4 (the axis says which).

The pages that show them (results.md, performance.md) state the date, commit and machine of the measurements.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sb3_r2po.experiments.plots import plot_curves

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = ROOT / "docs" / "_static" / "figures"


def sample_efficiency_figure(out: Path) -> None:
    data = json.loads((RESULTS / "sample_efficiency_cartpole_embedded_0.5b_tight.json").read_text())
    settings = data["settings"]
    runs = [{"method": run["method"], "returns": run["returns"]} for run in data["runs"]]
    plot_curves(runs, out, f"{settings['env']} ({settings['llm']} 0.5B, {settings['prompts']} prompts)", 20, 475.0, 400)


def llm_seconds_figure(out: Path) -> None:
    from matplotlib.figure import Figure

    rows = json.loads((RESULTS / "prompt_settings_cartpole_embedded_0.5b.json").read_text())
    names, means, spreads = [], [], []
    for row in rows:
        per_iteration = [run["seconds_per_call"] * run["calls"] / max(1, run["iterations"]) for run in row["runs"]]
        names.append(row["setting"])
        means.append(float(np.mean(per_iteration)))
        spreads.append(float(np.std(per_iteration)))
    fig = Figure(figsize=(9, 4), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    ax.bar(names, means, yerr=spreads, color="C0", alpha=0.8, capsize=4)
    ax.set_ylabel("LLM seconds per iteration")
    ax.set_title("Embedded Qwen2.5-Coder-0.5B, 2-core CPU, CartPole-v1: mean +- std over 3 seeds")
    ax.tick_params(axis="x", labelrotation=20)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(out)


def token_counter() -> tuple[Callable[[str], int], str]:
    """The embedded model's tokenizer (vocabulary only), else characters / 4."""
    try:
        from llama_cpp import Llama

        from sb3_r2po.llm.weights import ensure_model_file

        llama = Llama(model_path=str(ensure_model_file("0.5b")), vocab_only=True, verbose=False)
        return (lambda text: len(llama.tokenize(text.encode(), add_bos=False, special=True))), "tokens (Qwen2.5 tokenizer)"
    except Exception as exc:  # no llama-cpp-python or no model file: an estimate, and the axis says so
        warnings.warn(f"no tokenizer ({exc}); counting characters / 4", RuntimeWarning, stacklevel=2)
        return (lambda text: len(text) // 4), "characters / 4"


def prompt_sizes(preset: str, iterations: int, count: Callable[[str], int]) -> dict[str, list[int]]:
    """Search and Critic prompt sizes per iteration of a deterministic ExampleLLM run on CartPole-v1."""
    from sb3_r2po import R2PO
    from sb3_r2po.prompts import prompt_preset

    sizes: dict[str, list[int]] = {"search": [], "critic": []}

    def llm(messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        role = "search" if len(sizes["search"]) == len(sizes["critic"]) else "critic"
        sizes[role].append(count(text))
        return example.chat(messages).text

    from sb3_r2po.llm.example import ExampleLLM

    example = ExampleLLM(seed=0)
    model = R2PO("MlpLinear", "CartPole-v1", llm=llm, seed=0, max_episodes=20 + 40 * iterations, **prompt_preset(preset))
    model.learn(10**9)
    return sizes


def prompt_tokens_figure(out: Path, iterations: int) -> None:
    from matplotlib.figure import Figure

    count, unit = token_counter()
    fig = Figure(figsize=(9, 5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    for index, preset in enumerate(("full", "lean", "tight")):
        sizes = prompt_sizes(preset, iterations, count)
        for role, style in (("search", "--"), ("critic", "-")):
            values = sizes[role][:iterations]
            ax.plot(np.arange(1, len(values) + 1), values, style, color=f"C{index}", label=f"{preset}: {role}")
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"prompt size, {unit}")
    ax.set_title("CartPole-v1, K = 20, 20 warm-up episodes (ExampleLLM runs): prompt size per iteration")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", ncols=3)
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=FIGURES)
    parser.add_argument("--iterations", type=int, default=100, help="iterations of the prompt-size runs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {
        "cartpole_sample_efficiency.png": sample_efficiency_figure,
        "llm_seconds_per_iteration.png": llm_seconds_figure,
        "prompt_tokens_per_iteration.png": lambda path: prompt_tokens_figure(path, args.iterations),
    }
    for name, draw in figures.items():
        draw(args.out / name)
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
