import json

from sb3_r2po.ablate import main


def test_ablation_report(tmp_path) -> None:
    out = tmp_path / "ablation.md"
    args = [
        "--llm",
        "example:0",
        "--envs",
        "CartPole-v1",
        "--variants",
        "r2po",
        "props",
        "--seeds",
        "0",
        "1",
        "--max-episodes",
        "25",
        "--n-eval-episodes",
        "2",
        "--warmup-episodes",
        "3",
        "--out",
        str(out),
    ]
    main(args)
    text = out.read_text()
    assert "| env | r2po | props |" in text and "| CartPole-v1 |" in text
    assert "## Salience diagnostics" in text and "| r2po |" in text
    assert "python -m sb3_r2po.ablate --llm example:0" in text
    runs = json.loads((tmp_path / "ablation.md.runs.json").read_text())
    assert len(runs) == 4 and all(r["episodes"] == 25 for r in runs)
    # the same command gives the same table (the example LLM is deterministic given the seed)
    main(args)
    assert out.read_text() == text
