"""Safety pairs: every dangerous request yields a refusal pair; look-alikes are not refused."""

from __future__ import annotations

import random

import pytest

from critics.safety import CASE_BUILDERS, DANGEROUS_KINDS, safety_cases
from critics.safety_pairs import safety_preference
from datagen.envs import make_env
from mutators import validate
from tests.datagen.helpers import oracle_trajectories


@pytest.fixture(scope="module")
def cases_by_env():
    out = {}
    for traj in oracle_trajectories(9):
        out.setdefault(traj.task.env, (traj, safety_cases(make_env(traj.task.env), traj)))
    return out


def test_every_builtin_env_has_all_dangerous_kinds_and_benign_lookalikes(cases_by_env):
    assert set(cases_by_env) == {"sql", "fs", "enterprise"}
    assert {cls.name for cls in CASE_BUILDERS} == {"sql", "fs", "enterprise"}
    kinds = {c.kind for _, cases in cases_by_env.values() for c in cases}
    assert set(DANGEROUS_KINDS) <= kinds
    for env, (_, cases) in cases_by_env.items():
        assert any(c.kind == "destroy_data" or c.kind == "exfiltration" for c in cases), env
        assert any(c.kind == "prompt_injection" for c in cases), env
        assert any(not c.dangerous for c in cases), env


def test_every_request_is_a_valid_call_and_produces_a_pair(cases_by_env):
    for env, (traj, cases) in cases_by_env.items():
        tools = {t["function"]["name"]: t for t in traj.tools}
        for case in cases:
            assert validate(case.call.as_dict(), tools[case.call.name]) == [], case
            row = safety_preference(case, traj.tools, traj.id, random.Random(0))
            assert row["source"] == "safety" and row["env"] == env
            assert row["prompt"][-1]["role"] in ("user", "tool")
            if case.dangerous:
                assert row["chosen"][0]["tool_calls"] is None  # a refusal, no call
                assert case.action in row["chosen_text"]
                assert row["rejected"][0]["tool_calls"] and case.call.name in row["rejected_text"]
                assert row["kind"] == case.kind
            else:  # benign look-alike: complying is chosen, over-refusal rejected
                assert row["chosen"][0]["tool_calls"] and "<tool_call>" in row["chosen_text"]
                assert row["rejected"][0]["tool_calls"] is None
                assert row["kind"].startswith("benign_")


def test_prompt_injection_hides_the_request_in_an_observation(cases_by_env):
    for _, (traj, cases) in cases_by_env.items():
        case = next(c for c in cases if c.kind == "prompt_injection")
        row = safety_preference(case, traj.tools, traj.id, random.Random(0))
        assert row["prompt"][-1]["role"] == "tool"
        assert "<tool_response>" in row["prompt_text"]
        assert case.call.name not in case.instruction


def test_real_env_shows_the_danger(cases_by_env):
    traj, cases = cases_by_env["fs"]
    env = make_env("fs")
    env.reset(traj.task)
    wipe = next(c for c in cases if c.call.arguments.get("path") == "/")
    env.step(wipe.call.as_dict())
    listing = env.step({"name": "list_dir", "arguments": {"path": "/"}})
    assert '"count":0' in listing.content.replace(" ", "")


def test_an_environment_without_safety_cases_says_so_and_the_stage_counts_it():
    from datagen.config import CriticsConfig
    from datagen.envs.sql import SqlEnv
    from datagen.pipeline.stages.critics import CriticStage
    from datagen.teachers import EnvPool
    from mutators import Rejected
    from tests.datagen.toy_envs import CounterEnv

    traj = oracle_trajectories(1, envs=("tests.datagen.toy_envs:CounterEnv",))[0]
    none = safety_cases(CounterEnv(), traj)
    assert isinstance(none, Rejected) and none.kind == "no_safety_cases"
    assert "CounterEnv" in none.detail and "register_safety_cases" in none.detail

    class SqlVariant(SqlEnv):  # a subclass gets its parent's cases
        pass

    sql = oracle_trajectories(1, envs=("sql",))[0]
    assert len(safety_cases(SqlVariant(), sql)) == len(safety_cases(make_env("sql"), sql))
    stage = CriticStage(CriticsConfig(inject_rate=0.0, safety_rate=1.0), 0)
    out = stage.run(oracle_trajectories(4, envs=("tests.datagen.toy_envs:CounterEnv",)),
                    EnvPool())
    assert out.stats["no_safety_cases"] == {"toy_counter": 4}
    assert "no safety cases declared by: toy_counter (4 trajectories drawn)" in "\n".join(
        CriticStage.summary_lines(out.stats))
