"""IRR harness: reproducible, per env and per kind, any policy."""

from __future__ import annotations

from critics.irr import evaluate_irr, oracle_policy
from datagen.pipeline.cli import main
from datagen.types import Step


def test_same_seed_same_numbers_and_breakdowns():
    first = evaluate_irr(num_tasks=24, seed=5).summary()
    assert first == evaluate_irr(num_tasks=24, seed=5).summary()
    assert set(first["per_env"]) == {"sql", "fs", "enterprise"}
    assert sum(row["n"] for row in first["per_kind"].values()) == first["overall"]["n"] >= 20
    assert first["overall"]["irr"] >= 0.8  # the oracle recovers almost always
    assert evaluate_irr(num_tasks=24, seed=6).episodes != evaluate_irr(num_tasks=24,
                                                                       seed=5).episodes


def test_a_policy_that_never_recovers_scores_zero_and_errors_are_data():
    def give_up(task, tools, steps, rng):
        return Step("I give up.", answer="unknown")

    def crashes(task, tools, steps, rng):
        raise RuntimeError("agent crashed")

    assert evaluate_irr(give_up, num_tasks=9, seed=1).summary()["overall"]["irr"] == 0.0
    report = evaluate_irr(crashes, num_tasks=6, seed=1)
    assert all(not e.recovered and "agent crashed" in e.error for e in report.episodes)


def test_extra_turns_bound_the_recovery():
    def dawdle(task, tools, steps, rng):  # wastes turns before acting like the oracle
        if len([s for s in steps if s.reasoning == "thinking"]) < 3:
            return Step("thinking", call=steps[0].call)
        return oracle_policy(task, tools, steps, rng)

    assert evaluate_irr(dawdle, num_tasks=9, seed=2, extra_turns=2).summary()["overall"]["irr"] \
        < evaluate_irr(dawdle, num_tasks=9, seed=2, extra_turns=5).summary()["overall"]["irr"]


def test_cli(tmp_path, capsys):
    out = tmp_path / "irr.json"
    assert main(["eval", "irr", "--num-tasks", "6", "--seed", "3", "--json", str(out)]) == 0
    assert "IRR overall" in capsys.readouterr().out and out.exists()
