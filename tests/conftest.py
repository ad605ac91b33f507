"""Shared fixtures. ``make_r2po`` is the one way tests build an R2PO model; ``helpers.UNTIL_BUDGET`` trains it to its
episode budget (``model.learn(UNTIL_BUDGET)``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fault_server import Action, FaultServer

    from sb3_r2po import R2PO

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


HEAVY_FIRST = (
    "test_zoo.py",
    "test_hostile_replies.py",
    "test_prefix_reuse.py",
    "test_hostile_run_dirs.py",
    "test_ray_executor.py",
    "test_resume.py",
    "test_scaling.py",
    "test_experiments.py",
    "test_backend_faults.py",
    "test_llm_embedded.py",
    "test_sample_efficiency.py",
    "test_hostile_servers.py",
    "test_llm_openai.py",
    "test_embedded_run.py",
)
"""The test files of most seconds (measured on 2 cores, slowest first), run before the others: ``--dist loadfile``
hands whole files to the workers in collection order (``--no-loadscope-reorder``), so a long file started last no
longer keeps one worker busy while the other idles."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`HEAVY_FIRST` first, in its order, then the others as collected; each file's tests keep
    their order."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))


def _build_r2po(
    env: Any = "CartPole-v1",
    *,
    policy: str = "MlpLinear",
    llm: Any = "example",
    seed: int | None = 0,
    n_eval_episodes: int = 2,
    warmup_episodes: int = 2,
    max_episodes: int | None = 10,
    **settings: Any,
) -> R2PO:
    from sb3_r2po import R2PO  # here, not at the top: a broken sb3_r2po fails the tests that build models, not collection

    return R2PO(
        policy,
        env,
        llm=llm,
        seed=seed,
        n_eval_episodes=n_eval_episodes,
        warmup_episodes=warmup_episodes,
        max_episodes=max_episodes,
        **settings,
    )


@pytest.fixture(scope="session")
def make_r2po() -> Callable[..., R2PO]:
    """
    Build an R2PO model: ``make_r2po(env="CartPole-v1", *, policy="MlpLinear", **settings)``.

    Test-sized defaults, each overridable by keyword: ``llm="example"`` (the deterministic stand-in LLM), ``seed=0``,
    ``n_eval_episodes=2`` (K), ``warmup_episodes=2`` and ``max_episodes=10`` (the warm-up, then two iterations of a
    Search candidate and a revision of K episodes each). Any other keyword goes to :class:`R2PO` unchanged. A test
    states at the call site every setting its assertions depend on, even where it equals a default.

    Train to the budget with ``model.learn(UNTIL_BUDGET)`` (from ``helpers``); for a run that a step count or a
    callback ends instead, pass ``max_episodes=None``. Tests of R2PO's own defaults or constructor errors call
    ``R2PO(...)`` directly.
    """
    return _build_r2po


@pytest.fixture
def time_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail (rather than hang) a test that runs longer than its module's ``TEST_LIMIT_S`` (60 s by default)."""
    limit = int(getattr(request.module, "TEST_LIMIT_S", 60))

    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"test ran longer than {limit} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[..., FaultServer]]:
    """
    Start fault servers on loopback (``serve(script, default=...)``, see tests/fault_server.py); every one is stopped
    after the test. Their per-connection limit is the module's ``HANDLER_LIMIT_S`` (5 s by default), their lifetime
    its ``TEST_LIMIT_S`` (60 s by default).
    """
    from fault_server import FaultServer

    servers: list[FaultServer] = []
    handler_limit = float(getattr(request.module, "HANDLER_LIMIT_S", 5.0))
    lifetime = float(getattr(request.module, "TEST_LIMIT_S", 60))

    def start(script: list[Action] | tuple[Action, ...] = (), **kwargs: Any) -> FaultServer:
        kwargs.setdefault("handler_limit", handler_limit)
        kwargs.setdefault("lifetime", lifetime)
        server = FaultServer(script, **kwargs)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache directory holding the joined 0.5B embedded model, for one test module (deleted afterwards: it is
    491 MB)."""
    from sb3_r2po.llm.embedded import ensure_model_file

    directory = tmp_path_factory.mktemp("embedded_cache")
    ensure_model_file("0.5b", directory)
    yield directory
    for file in directory.iterdir():
        file.unlink()
