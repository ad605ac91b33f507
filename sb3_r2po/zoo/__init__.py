"""
RL Zoo integration: ``python -m sb3_r2po.zoo train|enjoy|plot_train|plot_from_file|all_plots ...``.

RL Baselines3 Zoo has no plug-in mechanism: its algorithms live in one fixed dict, ``rl_zoo3.utils.ALGOS``,
which every zoo module imports by name (``from rl_zoo3.utils import ALGOS`` in ``train.py``,
``exp_manager.py``, ``record_video.py``, ``record_training.py``; ``from rl_zoo3 import ALGOS`` in
``enjoy.py``, ``push_to_hub.py``, ``load_from_hub.py``). They all share the *same* dict object, so adding a key
to it in place registers an algorithm everywhere; :func:`register_r2po` does that (and also patches any
zoo module that holds a different ``ALGOS`` object, in case a future zoo copies the dict).

The entry point then:

1. imports :mod:`sb3_r2po` (registers ``R2PO/Nim-v0``, ``R2PO/Pong-v0`` and ``R2PO/Maze3x3-v0``);
2. for ``train`` without ``-conf``/``--conf-file``: ``--algo r2po`` reads our ``r2po.yml`` (:func:`config_dir`;
   installed: ``sb3_r2po/zoo/configs/``), and any other algorithm reads our ``<algo>.yml`` when that file has an entry
   for the ``--env`` id (our custom envs, FrozenLake-v1 and the ``-v5`` MuJoCo tasks, which the zoo's own files
   lack); everything else keeps the zoo's own hyperparameter files. The options are read as the zoo's parser reads
   them, abbreviations (``--alg r2po``) and ``--option=value`` included. An R2PO env entry's ``variants:`` mapping
   gives each of the paper's baselines and ablations (``--hyperparams variant:"'props'"``) the reference's own
   settings for that env (:mod:`sb3_r2po.zoo.settings`; the keys given with ``--hyperparams`` win);
3. for ``plot_train``/``all_plots``: rewrites ``-e/--env`` ids to the zoo's folder names (``R2PO/Nim-v0`` ->
   ``R2PO-Nim-v0``), which the zoo's plot scripts match as plain substrings;
4. passes every argument to the zoo's script unchanged otherwise.

For ``-optimize`` (RL Zoo's Optuna search), :func:`register_r2po` also adds our sampler
(:mod:`sb3_r2po.zoo.sampler`) and makes the zoo's trial evaluation score an R2PO run when it ends
(:mod:`sb3_r2po.zoo.optimize`): R2PO stops at its ``max_episodes`` budget, usually long before the first of the
evaluations the zoo schedules every ``n_timesteps // n_evaluations`` steps.

Nothing here imports ``rl_zoo3`` at import time; it is an optional dependency (``pip install sb3-r2po[zoo]``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ALGO_NAME = "r2po"
"""The name of R2PO in the zoo's ``--algo`` choices."""

SCRIPTS: dict[str, tuple[str, str]] = {
    "train": ("rl_zoo3.train", "train"),
    "enjoy": ("rl_zoo3.enjoy", "enjoy"),
    "plot_train": ("rl_zoo3.plots.plot_train", "plot_train"),
    "plot_from_file": ("rl_zoo3.plots.plot_from_file", "plot_from_file"),
    "all_plots": ("rl_zoo3.plots.all_plots", "all_plots"),
}
"""The zoo scripts this entry point runs (the same set as the zoo's own ``python -m rl_zoo3.cli``)."""

PLOT_SCRIPTS = ("plot_train", "all_plots")
"""Scripts whose ``-e/--env`` values are matched against log folder names (slashes replaced by dashes)."""

CONFIG_DIR_ENV = "SB3_R2PO_ZOO_CONFIGS"
"""Environment variable naming a directory of zoo hyperparameter files that replaces ours (:func:`config_dir`)."""

_CONF_FLAGS = ("-conf", "--conf-file")


def config_dir_candidates() -> list[Path]:
    """
    The directories searched for the hyperparameter files, in order: ``$SB3_R2PO_ZOO_CONFIGS`` when set, then
    the ``zoo_configs`` directory next to the ``sb3_r2po`` package (a source checkout or an editable install: the repository
    root is the parent of ``sb3_r2po/``), then ``sb3_r2po/zoo/configs/`` (an installed wheel that ships them as
    package data).
    """
    here = Path(__file__).resolve().parent
    candidates = [here.parent.parent / "zoo_configs", here / "configs"]
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        candidates.insert(0, Path(override).expanduser())
    return candidates


def config_dir() -> Path:
    """The directory of R2PO's zoo hyperparameter files (``r2po.yml``, ``ppo.yml``, ...).

    :raises FileNotFoundError: when none of :func:`config_dir_candidates` exists.
    """
    candidates = config_dir_candidates()
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
    if path is None:
        return set()
    import yaml

    with open(path) as file:
        entries = yaml.safe_load(file) or {}
    return {str(key) for key in entries if key != "default"}


def register_r2po(name: str = ALGO_NAME) -> list[str]:
    """
    Register :class:`sb3_r2po.R2PO` as ``--algo <name>`` in every ``ALGOS`` dict of the loaded zoo modules, make the
    zoo apply the per-variant settings of an R2PO entry (:func:`sb3_r2po.zoo.settings.install_variant_settings`), and
    prepare ``-optimize`` for it (:func:`_register_optimize`; both skipped when ``optuna`` is not installed).

    :param name: The algorithm name in the zoo.
    :return: The zoo modules whose ``ALGOS`` holds the entry (``rl_zoo3.utils`` first).
    """
    import rl_zoo3.utils

    from sb3_r2po import R2PO

    _register_optimize(name)  # first: the zoo modules it imports are patched below
    _register_variant_settings()
    patched: list[str] = []
    seen: set[int] = set()
    loaded = sorted((key, mod) for key, mod in list(sys.modules.items()) if key.startswith("rl_zoo3") and mod is not None)
    modules = [("rl_zoo3.utils", rl_zoo3.utils), *loaded]
    for mod_name, module in modules:
        algos = getattr(module, "ALGOS", None)
        if not isinstance(algos, dict):
            continue
        if id(algos) not in seen:
            algos[name] = R2PO
            seen.add(id(algos))
        patched.append(mod_name)
    return list(dict.fromkeys(patched))


def _register_optimize(name: str) -> None:
    """
    Prepare the zoo's ``-optimize`` for R2PO: add :func:`sb3_r2po.zoo.sampler.sample_r2po_params` to its Optuna
    samplers, and replace the trial evaluation callback of ``rl_zoo3.exp_manager`` with
    :class:`sb3_r2po.zoo.optimize.FinalTrialEvalCallback`, which also evaluates an R2PO run when it ends.
    """
    try:
        import rl_zoo3.exp_manager
        from rl_zoo3.hyperparams_opt import HYPERPARAMS_SAMPLER
    except ImportError:  # optuna missing: only -optimize needs it
        return
    from sb3_r2po.zoo.optimize import FinalTrialEvalCallback
    from sb3_r2po.zoo.sampler import sample_r2po_params

    HYPERPARAMS_SAMPLER[name] = sample_r2po_params
    if not issubclass(rl_zoo3.exp_manager.TrialEvalCallback, FinalTrialEvalCallback):
        rl_zoo3.exp_manager.TrialEvalCallback = FinalTrialEvalCallback  # type: ignore[misc]


def _register_variant_settings() -> None:
    """Make the zoo resolve the ``variants:`` of an R2PO entry (:mod:`sb3_r2po.zoo.settings`)."""
    try:
        import rl_zoo3.exp_manager  # noqa: F401  (needs optuna)
    except ImportError:  # only train needs the ExperimentManager, and it cannot run without it
        return
    from sb3_r2po.zoo.settings import install_variant_settings

    install_variant_settings(_is_r2po)


def _is_r2po(algo: str) -> bool:
    """Whether the zoo's ``--algo`` name is registered as R2PO (under any name)."""
    from rl_zoo3.utils import ALGOS

    from sb3_r2po import R2PO

    algo_class = ALGOS.get(algo)
    return isinstance(algo_class, type) and issubclass(algo_class, R2PO)


def _matches(token: str, flags: Sequence[str], long_flag: str) -> bool:
    """Whether ``token`` (without ``=value``) names the option: one of ``flags`` or a prefix of ``long_flag``."""
    return token in flags or (token.startswith("--") and len(token) >= 3 and long_flag.startswith(token))


def _given(argv: Sequence[str], flags: Sequence[str], long_flag: str) -> bool:
    """Whether an option is on the command line, counting ``--flag=value`` and argparse's long-option prefixes."""
    for token in argv:
        if token == "--":
            break
        if _matches(token.split("=", 1)[0], flags, long_flag):
            return True
    return False


def _value(argv: Sequence[str], flags: Sequence[str], long_flag: str, default: str) -> str:
    """
    The value of a one-argument option as the zoo's parser reads it: ``--flag value`` or ``--flag=value``, any
    long-option prefix argparse accepts (``--alg`` for ``--algo``), the last occurrence winning.

    A prefix that the zoo's parser finds ambiguous (``--en``: ``--env`` or ``--env-kwargs``) is read as the option
    too; the zoo then rejects the command line anyway.
    """
    value = default
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            break
        option, sep, inline = token.partition("=")
        if _matches(option, flags, long_flag):
            value = inline if sep else next(tokens, value)
    return value


def resolve_train_args(argv: Sequence[str]) -> list[str]:
    """
    Add ``--conf-file`` to the zoo's ``train`` arguments where R2PO ships the hyperparameters.

    ``--algo r2po`` without a config file gets our ``r2po.yml`` (:func:`config_file`); another algorithm gets our
    ``<algo>.yml`` when that file has an entry for the ``--env`` id. An explicit ``-conf``/
    ``--conf-file`` is never overridden. ``--algo`` and ``--env`` are read as the zoo's parser reads them:
    ``--algo=r2po`` and the abbreviations argparse accepts (``--alg r2po``) count, and the last occurrence wins.

    :param argv: The ``train`` arguments (without the script name).
    :return: The arguments to pass to the zoo.
    """
    argv = list(argv)
    if _given(argv, _CONF_FLAGS, "--conf-file"):
        return argv
    algo = _value(argv, ("--algo",), "--algo", "ppo")  # the zoo's defaults
    env_id = _value(argv, ("--env",), "--env", "CartPole-v1")
    conf: Path | None = None
    if algo == ALGO_NAME:
        conf = config_file(ALGO_NAME)
    elif env_id in config_env_ids(algo):
        conf = config_file(algo)
    if conf is None:
        return argv
    return ["--conf-file", str(conf), *argv]


def normalize_plot_env_args(argv: Sequence[str]) -> list[str]:
    """Replace ``/`` by ``-`` in the ``-e/--env`` values of the plot scripts (the zoo's log folder naming)."""
    out: list[str] = []
    in_env = False
    for token in argv:
        if token in ("-e", "--env"):
            in_env = True
            out.append(token)
            continue
        if token.startswith("--env="):
            out.append("--env=" + token[len("--env=") :].replace("/", "-"))
            in_env = False
            continue
        if token.startswith("-"):
            in_env = False
        out.append(token.replace("/", "-") if in_env else token)
    return out


def _usage() -> str:
    names = "|".join(SCRIPTS)
    return (
        f"usage: python -m sb3_r2po.zoo {{{names}}} [zoo arguments ...]\n"
        "(see the RL Zoo page of the sb3_r2po documentation; python -m sb3_r2po.zoo train -h)"
    )


def load_script(name: str) -> Callable[[], Any]:
    """Import the zoo script ``name`` and return its entry function (R2PO is registered first)."""
    module_name, func_name = SCRIPTS[name]
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
    return getattr(module, func_name)


def main(argv: Sequence[str] | None = None) -> None:
    """
    Run a zoo script with R2PO registered: ``main(["train", "--algo", "r2po", "--env", "CartPole-v1"])``.

    :param argv: The script name followed by its arguments; defaults to ``sys.argv[1:]``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        raise SystemExit(0 if argv else 2)
    script, args = argv[0], argv[1:]
    if script not in SCRIPTS:
        print(f"unknown script {script!r}\n{_usage()}", file=sys.stderr)
        raise SystemExit(2)

    import sb3_r2po  # noqa: F401  (registers the custom envs)

    if script == "train":
        args = resolve_train_args(args)
    elif script in PLOT_SCRIPTS:
        args = normalize_plot_env_args(args)
    func = load_script(script)
    sys.argv = [f"python -m sb3_r2po.zoo {script}", *args]  # argv[0] is argparse's prog name
    func()


__all__ = [
    "ALGO_NAME",
    "CONFIG_DIR_ENV",
    "SCRIPTS",
    "config_dir",
    "config_dir_candidates",
    "config_env_ids",
    "config_file",
    "load_script",
    "main",
    "normalize_plot_env_args",
    "register_r2po",
    "resolve_train_args",
]
