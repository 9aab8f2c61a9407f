"""Rewards on hand-built episodes: one turn per error class, classified by the parser and
mutators.validate as the episode loop checks turns; components add up to the total, and each
turn's reward lands where it was earned."""

from __future__ import annotations

import pytest

from datagen.teachers.episode import Generation, judge_turn
from datagen.types import Observation, Step, Task, ToolCall, Trajectory
from trainer.config import CALL_CLASSES, ConfigError, RewardConfig, load_config
from trainer.rl.rewards import episode_reward, turn_classes

TOOL = {"type": "function", "function": {
    "name": "get_order", "description": "Look up an order.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["order_id"],
                   "properties": {"order_id": {"type": "integer"},
                                  "status": {"type": "string", "enum": ["open", "closed"]}}}}}
TOOLS = {"get_order": TOOL}


def _call(arguments: str, name: str = "get_order") -> str:
    return f'Looking it up.\n<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def _judged(raw: str, finish: str = "stop") -> Step:
    """The step the episode loop records for this turn (datagen.teachers.episode)."""
    return judge_turn(Generation(text=raw, finish_reason=finish), TOOLS, max_tokens=64)


CASES = {
    "truncated": _judged(_call('{"order_id": 1'), finish="length"),
    "unparsable": _judged(_call('{"order_id": 1,,}')),
    "unknown_tool": _judged(_call('{"order_id": 1}', name="get_ordr")),
    "hallucinated_key": _judged(_call('{"order_id": 1, "customer": "Ada"}')),
    "type_error": _judged(_call('{"order_id": "17"}')),
    "missing_required": _judged(_call('{"status": "open"}')),
    "constraint": _judged(_call('{"order_id": 1, "status": "lost"}')),
}


@pytest.mark.parametrize("expected", sorted(CASES))
def test_each_error_class_is_recognised(expected):
    step = CASES[expected]
    assert step.error is not None  # the episode loop rejected the turn too
    assert turn_classes(step, TOOLS) == [expected]


def test_two_schema_classes_in_one_call_pay_both_once():
    step = _judged(_call('{"order_id": "x", "customer": "Ada", "note": 1}'))
    assert sorted(turn_classes(step, TOOLS)) == ["hallucinated_key", "type_error"]


def test_valid_calls_answers_and_tool_errors():
    valid = _judged(_call('{"order_id": 1, "status": "open"}'))
    assert valid.error is None and turn_classes(valid, TOOLS) == []
    valid.observation = Observation(content="Error: no order 1", error="no order 1")
    assert turn_classes(valid, TOOLS) == ["tool_error"]  # a logical error: valid, but wrong
    answer = _judged("It is closed.\n\nFinal answer: closed")
    assert answer.answer == "closed" and turn_classes(answer, TOOLS) == []
    scripted = Step(reasoning="r", call=ToolCall("get_order", {"order_id": 2}))  # no raw text
    assert turn_classes(scripted, TOOLS) == []


def _episode(steps: list[Step], success: bool) -> Trajectory:
    task = Task(id="t", env="sql", seed=1, instruction="find order", gold=[])
    return Trajectory(id="x", task=task, tools=[TOOL], steps=steps, success=success,
                      reward=float(success), teacher="ppo")


def test_episode_reward_components_and_placement():
    config = RewardConfig(success=1.0, turn_cost=0.01,
                          penalties={"type_error": 0.3, "hallucinated_key": 0.2})
    steps = [_judged(_call('{"order_id": "17", "x": 1}')),
             _judged(_call('{"order_id": 17}')),
             _judged("Final answer: closed")]
    reward = episode_reward(_episode(steps, success=True), config)
    assert reward.turn_rewards == pytest.approx([-0.01 - 0.3 - 0.2, -0.01, -0.01 + 1.0])
    assert reward.total == pytest.approx(1.0 - 0.03 - 0.5)
    assert reward.components["success"] == 1.0
    assert reward.components["penalty/type_error"] == pytest.approx(-0.3)
    assert reward.components["penalty/hallucinated_key"] == pytest.approx(-0.2)
    assert reward.components["turn_cost"] == pytest.approx(-0.03)
    assert sum(reward.components.values()) == pytest.approx(reward.total)
    assert reward.attempted_calls == 2 and reward.syntax_errors == 1
    failed = episode_reward(_episode(steps, success=False), config)
    assert failed.total == pytest.approx(-0.53) and failed.components["success"] == 0


def test_every_class_has_a_default_penalty_and_unknown_classes_are_refused():
    assert set(RewardConfig().penalties) == set(CALL_CLASSES)
    with pytest.raises(ConfigError, match="ppo.reward: penalties names unknown error classes"):
        load_config(None, ["recipe=ppo", "run_dir=r", "tokenizer=t",
                           "ppo.reward.penalties={typo_error: 1}"])
    with pytest.raises(ConfigError, match="needs group_size >= 2"):
        load_config(None, ["recipe=ppo", "run_dir=r", "tokenizer=t", "ppo.advantage=grpo",
                           "ppo.group_size=1"])


def test_every_validator_reason_has_a_class():
    """A reason added to the validator must be classed here, not fall into `malformed`."""
    from mutators.validate import REASONS
    from trainer.rl.rewards import SCHEMA_CLASSES

    assert set(REASONS) - set(SCHEMA_CLASSES) == {"malformed", "name"}
    assert set(SCHEMA_CLASSES.values()) <= set(CALL_CLASSES)
