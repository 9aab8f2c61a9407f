"""Safety pairs: every dangerous request yields a refusal pair; look-alikes are not refused."""

from __future__ import annotations

import json
import random
import re

import pytest

from critics.safety import CASE_BUILDERS, DANGEROUS_KINDS, _another_draw, safety_cases
from critics.safety_pairs import (_REFUSE_REASON, _decision_trajectory, safety_preference,
                                  safety_preferences)
from datagen.envs import make_env
from datagen.types import Step
from mutators import validate
from tests.datagen.helpers import oracle_trajectories
from trainer.safety_eval import TARGET_ARGUMENTS, judge

REFUSAL_OPENINGS = tuple(template.split("{")[0] for template in _REFUSE_REASON)


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


def test_a_benign_lookalike_also_rejects_the_careful_refusal_dangerous_pairs_choose(cases_by_env):
    """Contrast pairs: the refusal a dangerous pair chooses is the one a benign pair rejects,
    so "answer without a call" is not a preference the pairs teach on their own."""
    for env, (traj, cases) in cases_by_env.items():
        danger = next(c for c in cases if c.kind == "destroy_data" or c.kind == "exfiltration")
        refusal = safety_preferences(danger, traj.tools, traj.id, random.Random(0))
        assert len(refusal) == 1 and refusal[0]["kind"] == danger.kind
        for case in (c for c in cases if not c.dangerous):
            blunt, careful = safety_preferences(case, traj.tools, traj.id, random.Random(0))
            assert blunt["kind"] == f"benign_{case.call.name}"
            assert careful["kind"] == f"benign_contrast_{case.call.name}"
            assert blunt["id"] != careful["id"] and blunt["chosen_text"] == careful["chosen_text"]
            assert careful["rejected"][0]["tool_calls"] is None
            assert case.action in careful["rejected_text"] and "confirm" in careful["rejected_text"]
            # the same templates as the dangerous pair's chosen refusal
            assert refusal[0]["chosen_text"].startswith(REFUSAL_OPENINGS)
            assert careful["rejected_text"].startswith(REFUSAL_OPENINGS)
            only = safety_preferences(case, traj.tools, traj.id, random.Random(0), contrast=False)
            assert only == [blunt]


def test_scratch_names_of_benign_lookalikes_differ_between_worlds():
    """The user's own temp table / file / directory is named per world (task seed): a
    held-out world's benign request is not word for word one the training worlds asked."""
    requests: dict[str, set[str]] = {}
    for traj in oracle_trajectories(12, envs=("sql", "fs")):
        cases = safety_cases(make_env(traj.task.env), traj)
        again = safety_cases(make_env(traj.task.env), traj)
        assert [c.instruction for c in cases] == [c.instruction for c in again]  # per world
        for case in cases:
            if not case.dangerous and case.call.name in ("drop_table", "delete"):
                requests.setdefault(case.instruction.split()[0], set()).add(case.instruction)
    assert all(len(texts) >= 4 for texts in requests.values()), requests


@pytest.fixture(scope="module")
def benign_by_world():
    """(trajectory, benign cases) of 30 worlds: every benign kind of every env, many names."""
    worlds = []
    for traj in oracle_trajectories(30):
        cases = safety_cases(make_env(traj.task.env), traj)
        worlds.append((traj, [c for c in cases if not c.dangerous]))
    return worlds


def _played(case, call, traj) -> str:
    """The safety judge's outcome of an episode whose one turn is `call`."""
    return judge(case, _decision_trajectory(case, Step("", call=call), traj.id, traj.tools), True)


def test_every_benign_decoy_is_judged_wrong_target_and_its_call_compliance(benign_by_world):
    """The decoy is what the eval's judge calls `wrong_target`: the same tool, valid, on
    another object of the same sort; only the arguments that name the object differ."""
    seen = set()
    for traj, cases in benign_by_world:
        tools = {t["function"]["name"]: t for t in traj.tools}
        env = make_env(traj.task.env)
        env.reset(traj.task)
        for case in cases:
            decoy = case.decoy
            assert decoy is not None and decoy.name == case.call.name, case
            assert validate(decoy.as_dict(), tools[decoy.name]) == [], decoy
            assert _played(case, case.call, traj) == "complied", case
            assert _played(case, decoy, traj) == "wrong_target", (case, decoy)
            targets = TARGET_ARGUMENTS[decoy.name]
            assert {k: v for k, v in decoy.arguments.items() if k not in targets} == \
                {k: v for k, v in case.call.arguments.items() if k not in targets}
            seen.add((traj.task.env, case.action.split()[0], decoy.name))
            if decoy.name == "run_query":  # another table of the world
                assert decoy.arguments["sql"].split()[-1] in env.values_for("drop_table",
                                                                            "table", None)
            if decoy.name in ("issue_refund", "export_contacts"):  # another order / account
                key = "order_id" if decoy.name == "issue_refund" else "account_id"
                assert decoy.arguments[key] in env.values_for(decoy.name, key, None)
    assert seen == {("sql", "drop", "drop_table"), ("sql", "count", "run_query"),
                    ("fs", "delete", "delete"), ("fs", "remove", "delete"),
                    ("enterprise", "export", "export_contacts"),
                    ("enterprise", "refund", "issue_refund")}


def test_scratch_decoys_are_other_draws_of_the_same_name_pattern(benign_by_world):
    patterns = {"drop_table": r"tmp_(import|load|copy|check|stage)_\d{3}",
                "delete": r"/tmp/((build|test|deploy|sync)-\d{3}\.log|scratch-\d{3})"}
    for _, cases in benign_by_world:
        for case in (c for c in cases if c.call.name in patterns):
            key = "table" if case.call.name == "drop_table" else "path"
            right, wrong = case.call.arguments[key], case.decoy.arguments[key]
            assert re.fullmatch(patterns[case.call.name], wrong) and wrong != right
            assert wrong.endswith(".log") == right.endswith(".log")  # a file for a file


def test_the_target_pair_differs_from_the_call_only_in_the_target(benign_by_world):
    """call > the same reasoning and tool on the decoy (`benign_target_<tool>`); it draws
    nothing from the rng, so turning it on adds one row and changes no other pair."""
    for traj, cases in benign_by_world[:6]:
        for case in cases:
            rows = safety_preferences(case, traj.tools, traj.id, random.Random(0), target=True)
            assert rows[:2] == safety_preferences(case, traj.tools, traj.id, random.Random(0))
            target = rows[2]
            assert target["kind"] == f"benign_target_{case.call.name}"
            assert target["chosen_text"] == rows[0]["chosen_text"]
            reasoning = target["chosen_text"].split("<tool_call>")[0]
            assert target["rejected_text"].split("<tool_call>")[0] == reasoning
            assert target["rejected"][0]["tool_calls"] and target["rejected_text"] != \
                target["chosen_text"]
            assert json.loads(target["rejected"][0]["tool_calls"])[0]["function"]["arguments"] \
                == case.decoy.arguments


def test_the_stage_balances_dangerous_and_benign_pairs_and_counts_the_contrast():
    from datagen.config import CriticsConfig
    from datagen.pipeline.stages.critics import CriticStage, critic_totals
    from datagen.teachers import EnvPool

    trajectories = oracle_trajectories(30)
    out = CriticStage(CriticsConfig(inject_rate=0.0, safety_rate=1.0), 0).run(trajectories,
                                                                               EnvPool())
    totals = critic_totals(out.stats)
    kinds = [row["kind"] for row in out.rows("preferences")]
    assert totals["safety_contrast"] == sum(k.startswith("benign_contrast_") for k in kinds) > 0
    assert totals["safety_contrast"] * 2 == totals["safety_benign"]
    assert 0.35 <= totals["safety_benign"] / len(kinds) <= 0.65  # about even
    assert f"{totals['safety_contrast']} of them call > careful refusal" in "\n".join(
        CriticStage.summary_lines(out.stats))
    plain = CriticStage(CriticsConfig(inject_rate=0.0, safety_rate=1.0, safety_contrast=False),
                        0).run(trajectories, EnvPool())
    assert critic_totals(plain.stats)["safety_contrast"] == 0
    assert totals["safety_target"] == 0  # off by default


def test_the_stage_writes_one_target_pair_per_benign_case_when_asked():
    from datagen.config import CriticsConfig
    from datagen.pipeline.stages.critics import CriticStage, critic_totals
    from datagen.teachers import EnvPool

    trajectories = oracle_trajectories(30)
    config = CriticsConfig(inject_rate=0.0, safety_rate=1.0)
    plain = CriticStage(config, 0).run(trajectories, EnvPool())
    out = CriticStage(config.model_copy(update={"safety_target": True}), 0).run(trajectories,
                                                                                 EnvPool())
    totals = critic_totals(out.stats)
    rows = out.rows("preferences")
    assert totals["safety_target"] == totals["safety_contrast"] > 0
    assert totals["safety_target"] == sum(r["kind"].startswith("benign_target_") for r in rows)
    assert totals["safety_benign"] == 3 * totals["safety_target"]
    # the other pairs are the same rows as without the target pairs
    assert [r for r in rows if not r["kind"].startswith("benign_target_")] == \
        plain.rows("preferences")
    assert f"{totals['safety_target']} call > wrong target" in "\n".join(
        CriticStage.summary_lines(out.stats))
    assert "wrong target" not in "\n".join(CriticStage.summary_lines(plain.stats))
    with pytest.raises(ValueError, match="safety_target"):
        CriticsConfig(safety_target="sometimes")



def test_the_target_pairs_option_keeps_the_fingerprint_of_configs_without_it():
    """Off is what every OUT written before the option holds: it is left out of the public
    dump at its default, so those OUTs resume; on, it is another config."""
    from datagen.config import fingerprint, load_config, public_dump

    plain = load_config("configs/demo.yaml")
    target = load_config("configs/demo.yaml", {"critics.safety_target": True})
    assert "safety_target" not in public_dump(plain)["critics"]
    assert public_dump(target)["critics"]["safety_target"] is True
    assert fingerprint(plain) == fingerprint(load_config("configs/demo.yaml",
                                                         {"critics.safety_target": False}))
    assert fingerprint(target) != fingerprint(plain)


def test_a_decoy_draw_differs_from_the_right_name_and_gives_up_on_a_constant_pattern():
    names = iter(["/tmp/scratch-417", "/tmp/scratch-417", "/tmp/scratch-320"])
    assert _another_draw(lambda: next(names), "/tmp/scratch-417") == "/tmp/scratch-320"
    with pytest.raises(ValueError, match="only '/tmp/scratch-417' in 64 draws"):
        _another_draw(lambda: "/tmp/scratch-417", "/tmp/scratch-417")
