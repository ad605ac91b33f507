"""R2PO.load never imports a module named in the file it loads, unless the user gives ``llm=`` or confirms it."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest
from helpers import UNTIL_BUDGET

from sb3_r2po import R2PO


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module ``trust_probe`` whose import writes a marker file; it defines an example LLM."""
    (tmp_path / "trust_probe.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path
            Path(__file__).with_name("imported").write_text("yes")
            from sb3_r2po.llm.example import ExampleLLM
            LLM = ExampleLLM(0)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "trust_probe", raising=False)
    return tmp_path / "imported"


def _saved(tmp_path: Path, make_r2po) -> Path:
    model = make_r2po(llm="trust_probe:LLM", n_eval_episodes=2, warmup_episodes=2, max_episodes=6)
    model.learn(UNTIL_BUDGET)
    model.save(tmp_path / "model.zip")
    return tmp_path / "model.zip"


def test_a_stored_import_string_is_not_imported_without_consent(tmp_path: Path, probe: Path, make_r2po) -> None:
    path = _saved(tmp_path, make_r2po)
    probe.unlink()
    del sys.modules["trust_probe"]
    model = R2PO.load(path, env=gym.make("CartPole-v1"))
    assert model.llm == "trust_probe:LLM"  # kept, so the user sees what the file asks for
    with pytest.raises(ValueError, match="imports a module named in the saved file"):
        model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert not probe.exists() and "trust_probe" not in sys.modules


@pytest.mark.parametrize("consent", ["llm=", "set_llm"])
def test_consent_lets_the_stored_string_be_used(tmp_path: Path, probe: Path, make_r2po, consent: str) -> None:
    path = _saved(tmp_path, make_r2po)
    if consent == "llm=":
        model = R2PO.load(path, env=gym.make("CartPole-v1"), llm="trust_probe:LLM")
    else:
        model = R2PO.load(path, env=gym.make("CartPole-v1"))
        model.set_llm(model.llm)
    model.settings = dataclasses.replace(model.settings, max_episodes=10)
    model.learn(UNTIL_BUDGET, reset_num_timesteps=False)
    assert model.iteration >= 1


@pytest.mark.parametrize("llm", ["example", "example:3", "embedded:0.5b", "http://127.0.0.1:9/v1"])
def test_other_stored_strings_need_no_consent(tmp_path: Path, make_r2po, llm: str) -> None:
    make_r2po(llm=llm).save(tmp_path / "m.zip")
    assert R2PO.load(tmp_path / "m.zip").llm_confirmed
