"""Mutation testing of the core modules, each against its own test files (docs/mutation.md).

``python benchmarks/mutation.py rollouts parameters --timeout 600`` copies the checkout (``sb3_r2po``, ``tests``,
``benchmarks``, ``pyproject.toml``) to a temporary directory, narrows ``[tool.mutmut]`` there to one module and its test files
(:data:`MODULES`), runs ``mutmut run`` under a wall-clock bound and prints, per module, the mutants generated, killed,
survived and timed out, then the diff of every survivor. The checkout itself is never mutated (mutmut writes its
``mutants/`` copy inside the temporary directory). ``--keep DIR`` keeps the copy (``cd DIR && mutmut show NAME``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent

MODULES: dict[str, tuple[str, list[str]]] = {
    "run_state": (  # the records (the former records.py) and the run directory
        "sb3_r2po/r2po/run_state.py",
        [
            "tests/test_mutation_records.py",
            "tests/test_mutation_gaps.py",
            "tests/test_mutation_run_state.py",
            "tests/test_run.py",
            "tests/test_prompts.py",
            "tests/test_prefix_reuse.py",
            "tests/test_save_load.py",
            "tests/test_hostile_run_dirs.py",
            "tests/test_resume.py",
            "tests/test_honest_runs.py",
        ],
    ),
    "rollouts": (  # the rollouts and the evidence package (the former evidence.py)
        "sb3_r2po/common/rollouts.py",
        [
            "tests/test_mutation_evidence.py",
            "tests/test_evidence.py",
            "tests/test_reference_prompts.py",
            "tests/test_prompts.py",
            "tests/test_rollouts.py",
            "tests/test_racing.py",
        ],
    ),
    "parameters": (  # the parameter space and reply parsing (the former parsing.py)
        "sb3_r2po/common/parameters.py",
        ["tests/test_mutation_parsing.py", "tests/test_parsing.py", "tests/test_llm_harmony.py"],
    ),
    "reporting": (
        "sb3_r2po/r2po/reporting.py",
        [
            "tests/test_mutation_reporting.py",
            "tests/test_logging.py",
            "tests/test_honest_runs.py",
            "tests/test_callbacks.py",
        ],
    ),
}
"""Module name -> (its source file, the test files that claim to guard it)."""


def _toml_section(settings: dict[str, object]) -> str:
    """``[tool.mutmut]`` with ``settings`` (strings, numbers, booleans and lists of strings: JSON spells them as TOML)."""
    return "[tool.mutmut]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())


def prepare(workdir: Path, module: str) -> None:
    """Copy the checkout to ``workdir`` with ``[tool.mutmut]`` narrowed to ``module`` and its test files.

    :param workdir: an empty directory
    :param module: a key of :data:`MODULES`
    """
    source, tests = MODULES[module]
    for directory in ("sb3_r2po", "tests", "benchmarks"):
        shutil.copytree(ROOT / directory, workdir / directory, ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "pyproject.toml").read_text()
    settings = tomllib.loads(text)["tool"]["mutmut"]
    settings.update(only_mutate=[source], pytest_add_cli_args_test_selection=tests)
    text = re.sub(r"\[tool\.mutmut\]\n(?:[^\[\n].*\n|\n)*", "", text)  # the section up to the next table
    (workdir / "pyproject.toml").write_text(text + "\n" + _toml_section(settings))


def run(module: str, timeout: float, keep: Path | None) -> dict[str, object]:
    """Run mutmut on ``module`` for at most ``timeout`` seconds; its counts, survivors and seconds.

    :param module: a key of :data:`MODULES`
    :param timeout: the wall-clock bound of ``mutmut run``, in seconds; unfinished mutants count as ``not_checked``
    :param keep: where to keep the copy (``None``: a temporary directory, removed)
    """
    workdir = Path(tempfile.mkdtemp(prefix=f"mutation-{module}-")) if keep is None else keep / module
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        prepare(workdir, module)
        start = time.monotonic()
        log = (workdir / "mutmut-run.log").open("w")  # a failing clean run ("failed to collect stats") shows there
        process = subprocess.Popen(
            ["mutmut", "run", "--max-children", "1"],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the bound ends mutmut and its forked mutant runs
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
        seconds = time.monotonic() - start
        subprocess.run(["mutmut", "export-cicd-stats"], cwd=workdir, capture_output=True)
        stats_file = workdir / "mutants" / "mutmut-cicd-stats.json"
        stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        if stats:  # mutmut's stats leave out the mutants the bound stopped before
            done = ("killed", "survived", "timeout", "no_tests", "skipped", "suspicious", "segfault")
            stats["not_checked"] = stats["total"] - sum(stats.get(key, 0) for key in done)
        results = subprocess.run(["mutmut", "results"], cwd=workdir, capture_output=True, text=True).stdout
        survivors = [line.split(":")[0].strip() for line in results.splitlines() if line.strip().endswith(": survived")]
        diffs = {
            name: subprocess.run(["mutmut", "show", name], cwd=workdir, capture_output=True, text=True).stdout
            for name in survivors
        }
        return {"module": module, "seconds": round(seconds), "stats": stats, "survivors": diffs}
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per module (default 600)")
    parser.add_argument("--keep", type=Path, default=None, help="keep each module's copy under this directory")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    unknown = set(args.modules) - set(MODULES)
    if unknown:
        parser.error(f"unknown modules {sorted(unknown)}; known: {', '.join(MODULES)}")
    reports = []
    for module in args.modules or list(MODULES):
        report = run(module, args.timeout, args.keep)
        reports.append(report)
        stats = report["stats"]
        assert isinstance(stats, dict)
        counts = ", ".join(f"{key} {stats.get(key, '?')}" for key in ("total", "killed", "survived", "timeout", "not_checked"))
        print(f"{module} ({MODULES[module][0]}, {report['seconds']} s): {counts}", flush=True)
        survivors = report["survivors"]
        assert isinstance(survivors, dict)
        for diff in survivors.values():
            print(diff, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
