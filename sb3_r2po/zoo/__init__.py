"""RL Zoo integration: ``python -m sb3_r2po.zoo train|enjoy|plot_train|plot_from_file|all_plots ...`` runs the zoo's
scripts with R2PO registered (:func:`register_r2po`), our hyperparameter files for ``train`` and ``-e/--env`` ids as the
zoo's folder names for the plots (the RL Zoo page of the documentation). Nothing here imports ``rl_zoo3`` at import time."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sb3_r2po.zoo.settings import read_entries

ALGO_NAME = "r2po"  # R2PO's zoo --algo name
SCRIPTS = ("train", "enjoy", "plot_train", "plot_from_file", "all_plots")  # rl_zoo3.<name> or rl_zoo3.plots.<name>
PLOT_SCRIPTS = ("plot_train", "all_plots")  # their -e/--env values are matched against log folder names
USAGE = (
    f"usage: python -m sb3_r2po.zoo {{{'|'.join(SCRIPTS)}}} [zoo arguments ...]\n"
    "(see the RL Zoo page of the sb3_r2po documentation; python -m sb3_r2po.zoo train -h)"
)
CONFIG_DIR_ENV = "SB3_R2PO_ZOO_CONFIGS"  # a directory of zoo hyperparameter files that replaces ours
#: The R2PO hyperparameters -optimize samples and their choices (the paper's among them); the rest: r2po.yml, --hyperparams
SEARCH_SPACE: dict[str, list[Any]] = {
    "step_size": [0.1, 0.25, 0.5, 1.0, 2.0],
    "n_eval_episodes": [5, 10, 20],
    "temperature": [0.0, 0.3, 0.7, 1.0],
    "max_trajectory_steps": [20, 40, 80, None],
    "reply_style": ["indexed", "list"],
}


def config_dir() -> Path:
    """The first directory holding ``r2po.yml`` of ``$SB3_R2PO_ZOO_CONFIGS``, the checkout's ``zoo_configs`` (beside the
    package) and ``sb3_r2po/zoo/configs/`` (a wheel's package data); ``FileNotFoundError`` when none does."""
    here = Path(__file__).resolve().parent
    override = os.environ.get(CONFIG_DIR_ENV)
    candidates = [*([Path(override).expanduser()] if override else []), here.parent.parent / "zoo_configs", here / "configs"]
    for candidate in candidates:
        if (candidate / f"{ALGO_NAME}.yml").is_file():
            return candidate
    searched = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"sb3_r2po zoo configs not found (searched: {searched}); set {CONFIG_DIR_ENV} to their directory")


def config_file(algo: str) -> Path | None:
    """Our hyperparameter file for ``algo`` (``<algo>.yml`` in :func:`config_dir`), or ``None`` when we ship none."""
    path = config_dir() / f"{algo}.yml"
    return path if path.is_file() else None


def config_env_ids(algo: str) -> set[str]:
    """The env ids with an explicit entry (``default`` excluded) in our hyperparameter file for ``algo``."""
    path = config_file(algo)
    return set() if path is None else {str(key) for key in read_entries(path) if key != "default"}


def register_r2po(name: str = ALGO_NAME) -> list[str]:
    """Register :class:`sb3_r2po.R2PO` as ``--algo <name>`` in every ``ALGOS`` dict of the loaded zoo modules, with
    R2PO's Optuna sampler, the final evaluation of a trial (``-optimize``) and the per-variant settings (these three
    skipped without ``optuna``).

    :param name: The algorithm name in the zoo.
    :return: The zoo modules whose ``ALGOS`` holds the entry (``rl_zoo3.utils`` first).
    """
    from sb3_r2po import R2PO

    importlib.import_module("rl_zoo3.utils")  # ALGOS' own module
    try:  # first: the zoo modules these import are patched below
        import rl_zoo3.exp_manager
        from rl_zoo3.hyperparams_opt import HYPERPARAMS_SAMPLER
    except ImportError:  # optuna missing: -optimize and train (the ExperimentManager) cannot run anyway
        pass
    else:
        from sb3_r2po.zoo.optimize import FinalTrialEvalCallback
        from sb3_r2po.zoo.settings import install_variant_settings

        HYPERPARAMS_SAMPLER[name] = sample_r2po_params
        if not issubclass(rl_zoo3.exp_manager.TrialEvalCallback, FinalTrialEvalCallback):
            rl_zoo3.exp_manager.TrialEvalCallback = FinalTrialEvalCallback  # type: ignore[misc]
        install_variant_settings(R2PO)
    patched: list[str] = []
    for module_name in ["rl_zoo3.utils", *sorted(key for key in list(sys.modules) if key.startswith("rl_zoo3"))]:
        algos = getattr(sys.modules.get(module_name), "ALGOS", None)
        if isinstance(algos, dict):
            algos[name] = R2PO
            patched.append(module_name)
    return list(dict.fromkeys(patched))


def sample_r2po_params(trial: Any, n_actions: int, n_envs: int, additional_args: dict[str, Any]) -> dict[str, Any]:
    """R2PO constructor arguments for one Optuna ``trial`` (RL Zoo's sampler signature; the other arguments unused)."""
    return {name: trial.suggest_categorical(name, choices) for name, choices in SEARCH_SPACE.items()}


def resolve_train_args(argv: Sequence[str]) -> list[str]:
    """Add ``--conf-file`` to the zoo's ``train`` arguments: our ``r2po.yml`` for ``--algo r2po``, our ``<algo>.yml`` when it
    has an entry for the ``--env`` id; an explicit ``-conf``/``--conf-file`` is kept.

    :param argv: The ``train`` arguments (without the script name).
    :return: The arguments to pass to the zoo.
    """
    argv = list(argv)
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)  # the zoo's options we read, its defaults
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("-conf", "--conf-file")
    try:
        given = parser.parse_known_args(argv)[0]
    except argparse.ArgumentError:  # e.g. --algo without a value: the zoo's parser says so
        return argv
    if given.conf_file is not None:
        return argv
    conf = config_file(given.algo) if given.algo == ALGO_NAME or given.env in config_env_ids(given.algo) else None
    return argv if conf is None else ["--conf-file", str(conf), *argv]


def normalize_plot_env_args(argv: Sequence[str]) -> list[str]:
    """Replace ``/`` by ``-`` in the ``-e/--env`` values of the plot scripts (the zoo's log folder naming)."""
    out: list[str] = []
    in_env = False
    for token in argv:
        if token.startswith("--env=") or (in_env and not token.startswith("-")):
            token = token.replace("/", "-")
        out.append(token)
        in_env = token in ("-e", "--env") or (in_env and not token.startswith("-"))
    return out


def load_script(name: str) -> Callable[[], Any]:
    """Import the zoo script ``name`` and return its entry function (R2PO is registered first)."""
    module_name = f"rl_zoo3.{name}" if name in ("train", "enjoy") else f"rl_zoo3.plots.{name}"
    try:
        register_r2po()
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] == "rl_zoo3":
            raise SystemExit(f"the RL Zoo is not installed ({error}): pip install 'sb3-r2po[zoo]'") from error
        if module_name.startswith("rl_zoo3.plots"):
            raise SystemExit(f"{name} needs the zoo's plotting extras ({error}): pip install 'rl_zoo3[plots]'") from error
        raise
    register_r2po()  # modules imported just now: patch any copy of ALGOS they hold
    return getattr(module, name)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a zoo script with R2PO registered: ``main(["train", "--algo", "r2po", "--env", "CartPole-v1"])``; ``argv``
    (the script name and its arguments) defaults to ``sys.argv[1:]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    script, args = argv[0], argv[1:]
    if script not in SCRIPTS:
        print(f"unknown script {script!r}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    if script == "train":
        args = resolve_train_args(args)
    elif script in PLOT_SCRIPTS:
        args = normalize_plot_env_args(args)
    func = load_script(script)
    sys.argv = [f"python -m sb3_r2po.zoo {script}", *args]  # argv[0] is argparse's prog name
    func()
