"""benchmarks/dpo_effect.py: reusing an earlier run's SAD evaluations (`--before`) only when
they were made with this run's checkpoint and evaluation settings."""

import argparse
import json

import pytest
from tests.conftest import load_script


def _benchmark():
    return load_script("benchmarks/dpo_effect.py")


def _args(**changes):
    values = dict(shards="out/demo", envs=["sql", "fs", "enterprise"], num_tasks=30,
                  safety_worlds=12, max_new_tokens=128, eval_seeds=[1, 0])
    return argparse.Namespace(**{**values, **changes})


def _reports(tmp_path, seeds=(0, 1), **config_changes):
    before = [{"config": {"checkpoint": "sad/ckpt", "shards": ["out/demo"],
                          "envs": ["sql", "fs", "enterprise"], "num_tasks": 30,
                          "safety_worlds": 12, "max_new_tokens": 128, "eval_seed": seed,
                          **config_changes}, "safety": {"refusal_rate": seed / 10}}
              for seed in seeds]
    path = tmp_path / "reports.json"
    path.write_text(json.dumps({"before": before, "after": {}}))
    return str(path)


def test_before_reports_are_reused_in_eval_seed_order(tmp_path):
    reports = _benchmark().reused_before(_reports(tmp_path), "sad/ckpt", _args())
    assert [r["config"]["eval_seed"] for r in reports] == [1, 0]
    assert reports[0]["safety"]["refusal_rate"] == 0.1


def test_before_reports_of_other_settings_or_seeds_are_refused(tmp_path):
    benchmark = _benchmark()
    with pytest.raises(SystemExit, match=r"other \['safety_worlds'\]"):
        benchmark.reused_before(_reports(tmp_path, safety_worlds=6), "sad/ckpt", _args())
    with pytest.raises(SystemExit, match=r"other \['checkpoint'\]"):
        benchmark.reused_before(_reports(tmp_path), "another/ckpt", _args())
    with pytest.raises(SystemExit, match="no SAD evaluation for eval seed 5"):
        benchmark.reused_before(_reports(tmp_path), "sad/ckpt", _args(eval_seeds=[0, 5]))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(SystemExit, match="not a reports.json"):
        benchmark.reused_before(str(tmp_path / "broken.json"), "sad/ckpt", _args())
