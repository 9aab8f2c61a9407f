"""Injected-error repairs and failed-rollout repairs: checker, spans, critiques."""

from __future__ import annotations

import random

import pytest

from critics.critique import Critique
from critics.inject import inject_error
from critics.repair import (ERROR_SPAN, first_faulty_step, repair_failed, repair_injection,
                            repair_preference, repair_row, repair_spans)
from critics.rule_critic import rule_critic
from datagen.chat import act_text
from datagen.envs import make_env
from datagen.spans import check_tiling
from datagen.types import Step, ToolCall
from mutators import ALL_KINDS, Rejected
from tests.datagen.helpers import oracle_trajectories


@pytest.fixture(scope="module")
def trajectories():
    return oracle_trajectories(45)


@pytest.fixture(scope="module")
def repairs(trajectories):
    envs = {name: make_env(name) for name in ("sql", "fs", "enterprise")}
    made = []
    for index, traj in enumerate(trajectories):
        env = envs[traj.task.env]
        injection = inject_error(traj, env, seed=index)
        if isinstance(injection, Rejected):
            continue
        repair = repair_injection(env, injection, rule_critic, random.Random(index))
        if not isinstance(repair, Rejected):
            made.append((injection, repair))
    return made


def test_repairs_cover_every_kind_and_env_and_pass_the_checker(repairs):
    assert len(repairs) >= 35
    assert {inj.kind for inj, _ in repairs} == set(ALL_KINDS)
    assert {r.traj.task.env for _, r in repairs} == {"sql", "fs", "enterprise"}
    for _, repair in repairs:  # re-execute the repaired trajectory from scratch
        env = make_env(repair.traj.task.env)
        env.reset(repair.traj.task)
        for step in repair.traj.steps:
            if step.call is not None:
                env.step(step.call.as_dict())
        assert env.check(repair.traj.task, repair.traj.steps[-1].answer)
        assert repair.traj.success


def test_spans_tile_and_error_span_is_exactly_the_wrong_call(repairs):
    for injection, repair in repairs:
        text, spans = repair_spans(repair)
        assert check_tiling(text, spans) is None
        errors = [s for s in spans if s.kind == ERROR_SPAN]
        assert len(errors) == 1 and errors[0].step == injection.step
        wrong = Step("", call=injection.wrong_call)
        assert text[errors[0].start:errors[0].end] == act_text(wrong)
        critique = [s for s in spans if s.step == injection.step + 1 and s.kind == "REASON"]
        assert text[critique[0].start:critique[0].end] == repair.critique
        fixed = [s for s in spans if s.step == injection.step + 1 and s.kind == "ACT"]
        assert len(fixed) == 1


def test_observation_is_what_the_env_really_returned(repairs):
    for injection, repair in repairs:
        wrong_step = repair.traj.steps[injection.step]
        assert wrong_step.call == injection.wrong_call
        assert wrong_step.observation == injection.observation
        if not injection.negative.schema_valid and injection.kind != "wrong_function":
            assert injection.observation.error, injection.negative


def test_critique_mentions_the_failing_argument(repairs):
    for injection, repair in repairs:
        negative = injection.negative
        if negative.path == "name":
            assert negative.call["name"] in repair.critique
            continue
        where = negative.path.removeprefix("arguments.")
        assert where in repair.critique, (negative.kind, where, repair.critique)
        if negative.kind == "hallucinated_key":
            assert str(negative.mutated) in repair.critique


def test_critique_wording_varies(repairs):
    openings = {r.critique.split(".")[0].split(" `")[0] for _, r in repairs}
    assert len(openings) >= 3


def test_rows_and_preferences(repairs):
    injection, repair = repairs[0]
    row = repair_row(repair)
    assert row["source_id"] != row["id"] and row["error_step"] == injection.step
    assert row["error_kind"] == injection.kind and row["critique"] == repair.critique
    pair = repair_preference(repair, random.Random(0))
    assert pair["source"] == "repair" and pair["kind"] == injection.kind
    assert repair.critique in pair["chosen_text"]
    assert act_text(Step("", call=injection.wrong_call)).strip() in pair["rejected_text"]
    assert "<tool_response>" in pair["prompt_text"].rsplit("<|im_start|>assistant", 1)[0]


def _break(traj, index: int, call: ToolCall):
    """A failed copy of `traj`: the gold prefix, then `call` at step `index`, then nothing."""
    steps = [Step(s.reasoning, s.call, s.observation, s.answer) for s in traj.steps[:index]]
    return type(traj)(id=traj.id, task=traj.task, tools=traj.tools,
                      steps=steps + [Step("Trying this.", call=call)],
                      success=False, reward=0.0, teacher=traj.teacher)


def test_failed_rollout_is_repaired_from_its_first_faulty_step(trajectories):
    done = 0
    for traj in trajectories[:12]:
        index = min(1, len(traj.task.gold) - 1)
        gold = traj.task.gold[index].call
        wrong = ToolCall(gold.name, {**gold.arguments, "bogus_flag": True})
        failed = _break(traj, index, wrong)
        assert first_faulty_step(failed) == index
        repair = repair_failed(make_env(traj.task.env), failed, rule_critic, random.Random(0))
        assert not isinstance(repair, Rejected), repair
        assert repair.error_kind == "failed_rollout" and repair.error_step == index
        assert "bogus_flag" in repair.critique
        assert repair.traj.steps[index].observation.error  # re-executed: the real rejection
        text, spans = repair_spans(repair)
        assert check_tiling(text, spans) is None
        done += 1
    assert done == 12


def test_repair_not_emitted_when_the_correction_fails(repairs, trajectories):
    def useless_critic(request, rng):
        return Critique("I will try something else.", ToolCall("no_such_tool", {}))

    traj = trajectories[0]
    env = make_env(traj.task.env)
    injection = inject_error(traj, env, seed=0)
    failed = repair_injection(env, injection, useless_critic, random.Random(0))
    assert failed.kind == "corrected_call_failed" and "no_such_tool" in failed.detail
    silent = repair_injection(env, inject_error(traj, env, seed=0),
                              lambda r, g: Critique("hmm", None, "gave up"), random.Random(0))
    assert silent.kind == "critic_gave_no_call" and "gave up" in silent.detail


def test_premature_answer_is_the_faulty_step_and_is_critiqued(trajectories):
    traj = trajectories[1]
    failed = _break(traj, 1, ToolCall("unused", {}))
    failed.steps[-1] = Step("That should be it.", answer="forty-two")
    assert first_faulty_step(failed) == 1
    repair = repair_failed(make_env(traj.task.env), failed, rule_critic, random.Random(0))
    assert not isinstance(repair, Rejected), repair
    assert "forty-two" in repair.critique and traj.task.gold[1].purpose in repair.critique
    text, spans = repair_spans(repair)
    error = next(s for s in spans if s.kind == ERROR_SPAN)
    assert "Final answer: forty-two" in text[error.start:error.end]
