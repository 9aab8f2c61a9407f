"""The hard-negative stage on real rollouts of every built-in environment."""

from __future__ import annotations

import orjson
import pytest

from datagen.config import NegativesConfig
from datagen.pipeline.stages.negatives import NegativeStage, kind_rates
from datagen.teachers import EnvPool
from datagen.envs import make_env
from mutators import mutate_report, validate
from tests.datagen.helpers import BUILTIN_ENVS, oracle_trajectories


@pytest.fixture(scope="module")
def batches():
    out = {}
    for env in BUILTIN_ENVS:
        trajectories = oracle_trajectories(40, envs=(env,))
        out[env] = (trajectories, NegativeStage(NegativesConfig(), run_seed=0)
                    .run(trajectories, EnvPool()))
    return out


@pytest.mark.parametrize("env", BUILTIN_ENVS)
def test_each_negative_is_what_its_kind_says(batches, env):
    trajectories, batch = batches[env]
    assert batch.rows("negatives") and "replay_errors" not in batch.stats
    for row in batch.rows("negatives"):
        original, mutated = orjson.loads(row["original"]), orjson.loads(row["mutated"])
        assert mutated != original
        if row["kind"] == "logical_error":
            assert row["schema_valid"] and row["errors"] == []
            assert row["outcome_changed"] is True
        else:
            assert not row["schema_valid"] and row["errors"]
            reason = "unknown key" if row["kind"] == "hallucinated_key" else "expected"
            assert any(reason in error for error in row["errors"]), row
    calls = sum(1 for t in trajectories for s in t.steps if s.call is not None)
    for kind, counts in kind_rates(batch.stats).items():
        assert counts["produced"] + counts["impossible"] == calls
        assert counts["impossible"] <= 0.3 * calls, (kind, batch.stats)
    why = batch.stats.get("impossible_why", {})  # counted by rejection kind, not by text
    assert sum(why.values()) == sum(batch.stats.get("impossible", {}).values())
    assert {key.split(": ")[1] for key in why} <= {"no_candidate", "none_accepted"}


def test_preference_pairs_cut_the_trajectory_at_the_step(batches):
    from datagen.chat import render_trajectory

    trajectories, batch = batches["enterprise"]
    by_id = {t.id: t for t in trajectories}
    for pair in batch.rows("preferences")[:200]:
        text, _ = render_trajectory(by_id[pair["trajectory_id"]])
        assert text.startswith(pair["prompt_text"] + pair["chosen_text"])
        assert pair["prompt_text"].endswith("<|im_start|>assistant\n")
        assert pair["chosen_text"] != pair["rejected_text"]
        assert pair["rejected"][0]["content"] == pair["chosen"][0]["content"]  # same reasoning
        assert pair["prompt"][-1]["role"] in ("user", "tool")


def test_negatives_are_deterministic(batches):
    trajectories, batch = batches["sql"]
    again = NegativeStage(NegativesConfig(), run_seed=0).run(trajectories, EnvPool())
    assert all(again.tables[name].equals(batch.tables[name])
               for name in ("negatives", "preferences"))
    other = NegativeStage(NegativesConfig(), run_seed=1).run(trajectories, EnvPool())
    assert not other.tables["negatives"].equals(batch.tables["negatives"])


def _sample_call(tool: dict) -> dict | None:
    """A call with every required argument filled from its schema (enum, format, type)."""
    params = tool["function"]["parameters"]
    arguments = {}
    for key in params.get("required", []):
        schema = params["properties"][key]
        if "enum" in schema:
            arguments[key] = schema["enum"][0]
        elif schema.get("type") == "integer":
            arguments[key] = max(schema.get("minimum", 1), 1)
        elif schema.get("type") == "boolean":
            arguments[key] = True
        elif schema.get("type") == "array":
            arguments[key] = []
        elif schema.get("format") == "email":
            arguments[key] = "sam@example.com"
        elif schema.get("format") == "date":
            arguments[key] = "2026-01-05"
        else:
            arguments[key] = "/tmp/a" if "^[/~]" in schema.get("pattern", "") else "x1"
    call = {"name": tool["function"]["name"], "arguments": arguments}
    return call if not validate(call, tool) else None


@pytest.mark.parametrize("env_name", BUILTIN_ENVS)
def test_mutators_run_over_every_tool_of_every_environment(batches, env_name):
    env = make_env(env_name)
    trajectories, _ = batches[env_name]
    gold_calls = {s.call.name: s.call.as_dict() for t in trajectories for s in t.steps if s.call}
    for tool in env.tools():
        name = tool["function"]["name"]
        call = gold_calls.get(name) or _sample_call(tool)
        assert call is not None, f"no valid call for {env_name}.{name}"
        report = mutate_report(call, tool, seed=0, other_tools=env.tools())
        assert {n.kind for n in report.negatives} | set(report.impossible) == {
            "type_error", "hallucinated_key", "logical_error"}
        assert report.get("hallucinated_key") is not None, (name, report.impossible)


def test_configured_kinds_include_the_registrys_extra_ones():
    trajectories = oracle_trajectories(10, envs=("enterprise",))
    config = NegativesConfig(kinds=["logical_error", "wrong_function", "missing_required"])
    out = NegativeStage(config, run_seed=0).run(trajectories, EnvPool())
    assert {row["kind"] for row in out.rows("negatives")} == set(config.kinds)
    assert set(out.stats["produced"]) == set(config.kinds)


class UnvouchedPool(EnvPool):
    """Built-in environments that do not declare `validates_arguments`: the stage then has
    every original validated again by the mutators."""

    def get(self, name: str):
        env = super().get(name)
        if env.validates_arguments:
            env.__class__ = type(f"Unvouched{type(env).__name__}", (type(env),),
                                 {"validates_arguments": False})
        return env


def test_skipping_the_validation_of_clean_calls_changes_no_row():
    # the built-ins vouch for calls they ran without an error; validating them anyway (an
    # environment that does not vouch) must give exactly the same rows
    trajectories = oracle_trajectories(30)
    vouched = NegativeStage(NegativesConfig(), run_seed=3).run(trajectories, EnvPool())
    checked = NegativeStage(NegativesConfig(), run_seed=3).run(trajectories, UnvouchedPool())
    assert vouched.rows("negatives") and vouched.stats == checked.stats
    assert vouched.rows("negatives") == checked.rows("negatives")


def test_an_environment_that_does_not_vouch_gets_its_calls_validated():
    import copy

    traj = copy.deepcopy(next(t for t in oracle_trajectories(10) if t.success))
    step = next(s for s in traj.steps if s.call is not None)
    step.call.arguments["not_a_parameter"] = 1  # invalid, yet its observation is clean
    assert step.observation.error is None
    batch = NegativeStage(NegativesConfig(), run_seed=0).run([traj], UnvouchedPool())
    assert batch.stats["impossible_why"][f"{NegativesConfig().kinds[0]}: invalid_original"] >= 1


def test_moving_the_env_on_through_the_outcome_check_changes_no_row():
    # mutate_report(advance=True) restores the state its check left after the call instead
    # of the stage stepping the call: the rows must be those of stepping it
    trajectories = oracle_trajectories(30)
    stage = NegativeStage(NegativesConfig(), run_seed=0)
    advanced = stage.run(trajectories, EnvPool())
    real = stage.mutate_report

    def then_step(call, tool, **kwargs):
        report = real(call, tool, **{**kwargs, "advance": False})
        kwargs["env"].step(call)
        return report

    stage.mutate_report = then_step
    stepped = stage.run(trajectories, EnvPool())
    assert advanced.rows("negatives") and advanced.stats == stepped.stats
    for table in ("negatives", "preferences"):
        assert advanced.tables[table].equals(stepped.tables[table])


def test_pairs_cut_from_the_trajectory_stages_rendering_are_the_same(monkeypatch):
    # the negatives stage takes each trajectory's text and spans from the trajectories stage
    # of the same worker (Renderings) instead of rendering it again: same rows, no rendering
    import copy

    import datagen.preferences
    from datagen.pipeline.stages.trajectories import Renderings, TrajectoryStage

    trajectories = oracle_trajectories(30)
    own = NegativeStage(NegativesConfig(), run_seed=0).run(trajectories, EnvPool())
    renderings = Renderings()
    TrajectoryStage(False, renderings=renderings).run(trajectories, EnvPool())
    assert all(renderings.get(t) is not None for t in trajectories if t.success)
    assert renderings.get(copy.deepcopy(trajectories[0])) is None  # by object, not by id
    rendered = []
    monkeypatch.setattr(datagen.preferences, "render_trajectory",
                        lambda traj: rendered.append(traj) or ("", []))
    handed = NegativeStage(NegativesConfig(), run_seed=0, renderings=renderings).run(
        trajectories, EnvPool())
    assert rendered == [] and own.rows("preferences")
    for table in ("negatives", "preferences"):
        assert own.tables[table].equals(handed.tables[table])


class CountingPool(EnvPool):
    """Counts the environments it builds and every reset / step they take."""

    def __init__(self) -> None:
        super().__init__()
        self.built, self.calls = 0, {"reset": 0, "step": 0}

    def fresh(self, name: str):
        env, self.built = super().fresh(name), self.built + 1
        for method in self.calls:
            real = getattr(env, method)

            def counted(*args, _real=real, _method=method, **kwargs):
                self.calls[_method] += 1
                return _real(*args, **kwargs)

            setattr(env, method, counted)
        return env


def test_without_the_execution_check_no_environment_is_built_reset_or_stepped():
    # execute off: the mutators get no environment, so replaying the trajectory in one (as
    # the stage did) was wasted; the rows must be those of mutating each call without one
    from datagen.pipeline.stages.negatives import ran_cleanly
    from datagen.types import stable_seed

    trajectories = oracle_trajectories(30)
    config = NegativesConfig(execute=False)
    empty = CountingPool()
    out = NegativeStage(config, run_seed=4).run(trajectories, empty)
    assert empty.built == 0 and out.rows("negatives") and "replay_errors" not in out.stats
    held = CountingPool()  # as in a chunk: the rollout built the environments already
    for env in BUILTIN_ENVS:
        held.get(env)
    again = NegativeStage(config, run_seed=4).run(trajectories, held)
    assert held.built == len(BUILTIN_ENVS) and held.calls == {"reset": 0, "step": 0}
    assert again.stats == out.stats and again.rows("negatives") == out.rows("negatives")
    expected = []
    for traj in (t for t in trajectories if t.success):
        for index, step in enumerate(traj.steps):
            if step.call is not None:
                report = mutate_report(step.call.as_dict(), next(
                    t for t in traj.tools if t["function"]["name"] == step.call.name),
                    seed=stable_seed(4, traj.id, index), other_tools=traj.tools,
                    kinds=config.kinds, original_valid=ran_cleanly(step))
                expected += [(traj.id, index, n.kind, orjson.dumps(n.call).decode())
                             for n in report.negatives]
    assert [(r["trajectory_id"], r["step"], r["kind"], r["mutated"])
            for r in out.rows("negatives")] == expected
    assert all(r["outcome_changed"] is None for r in out.rows("negatives"))


def test_without_the_execution_check_the_held_environment_still_decides_the_vouching():
    import copy

    traj = copy.deepcopy(next(t for t in oracle_trajectories(10) if t.success))
    step = next(s for s in traj.steps if s.call is not None)
    step.call.arguments["not_a_parameter"] = 1
    config = NegativesConfig(execute=False)
    trusted = NegativeStage(config, run_seed=0).run([traj], EnvPool())
    assert "impossible_why" not in trusted.stats or not any(
        "invalid_original" in key for key in trusted.stats["impossible_why"])
    pool = UnvouchedPool()
    pool.get(traj.task.env)  # the rollout's environment, which does not vouch
    checked = NegativeStage(config, run_seed=0).run([traj], pool)
    assert checked.stats["impossible_why"][f"{config.kinds[0]}: invalid_original"] >= 1
