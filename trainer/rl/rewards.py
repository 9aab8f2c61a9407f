"""Rewards of an episode: success from the environment's checker, a penalty per malformed
call by error class, and a small cost per turn; every component kept apart so it is logged.

Error classes of one assistant turn (what the issue's taxonomy names, from the same checks the
episode loop runs: datagen's parser, then `mutators.validate_detailed` against the tool spec):

    truncated         the turn hit its token budget before it ended
    unparsable        <tool_call> that does not parse (bad JSON, no name, unterminated, two calls)
    unknown_tool      a call to a tool the environment does not offer
    hallucinated_key  an argument the schema does not have (validator reason unknown_key)
    type_error        an argument of the wrong JSON type (reason type)
    missing_required  a required argument left out (reason required)
    constraint        a value outside enum / const / format / range / length / pattern
    malformed         anything else the validator rejects (reason malformed, name, ...)
    tool_error        a schema-valid call the tool answered with an error (a logical error)

A turn with several schema errors of different classes pays each class once (a call with a
hallucinated key and a type error pays both); a turn of one class pays it once however many
arguments share it, so a long call is not punished more than a short one for one mistake.

Rewards are placed where they are earned: each turn's penalties and its turn cost at that
turn's last generated token, success at the episode's last generated token (PPO's GAE then
assigns credit; the group-baseline modes use the episode's total).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainer.config import CALL_CLASSES, RewardConfig

if TYPE_CHECKING:
    from datagen.types import Step, Trajectory

# Validator reasons (mutators.validate.REASONS) -> error class; other reasons are "malformed".
SCHEMA_CLASSES = {"unknown_key": "hallucinated_key", "type": "type_error",
                  "required": "missing_required", "enum": "constraint", "const": "constraint",
                  "format": "constraint", "range": "constraint", "length": "constraint",
                  "pattern": "constraint", "unique": "constraint", "contains": "constraint",
                  "property_name": "constraint", "not": "constraint", "forbidden": "constraint"}
__all__ = ["CALL_CLASSES", "RewardConfig", "EpisodeReward", "turn_classes", "episode_reward"]


@dataclass
class EpisodeReward:
    """One episode's reward: `turn_rewards[i]` is earned at the end of assistant turn i
    (success included in the last); `components` sums them by source."""

    total: float
    turn_rewards: list[float]
    components: dict[str, float]
    classes: Counter = field(default_factory=Counter)  # error classes seen, per turn
    turn_class_names: list[str] = field(default_factory=list)  # every turn's classes, in order
    attempted_calls: int = 0
    syntax_errors: int = 0


def turn_classes(step: "Step", tools: dict[str, dict[str, Any]]) -> list[str]:
    """Error classes of one assistant turn (empty for a valid call or a final answer)."""
    from datagen.chat import parse_assistant
    from mutators import validate_detailed

    if step.error_kind == "truncated":
        return ["truncated"]
    if step.raw is not None:
        parsed = parse_assistant(step.raw)
        if parsed.error is not None:
            return ["unparsable"]
        call = parsed.call
    else:  # a scripted teacher's step: its call is valid or the step says why not
        call = step.call
    if call is None:
        return []
    tool = tools.get(call.name)
    if tool is None:
        return ["unknown_tool"]
    errors = validate_detailed(call.as_dict(), tool)
    if errors:
        return list(dict.fromkeys(SCHEMA_CLASSES.get(e.reason, "malformed") for e in errors))
    if step.observation is not None and step.observation.error is not None:
        return ["tool_error"]
    return []


def episode_reward(traj: "Trajectory", config: RewardConfig) -> EpisodeReward:
    """The reward of a played episode, by turn and by component."""
    from trainer.eval import attempted_call, invalid_call

    tools = {t["function"]["name"]: t for t in traj.tools if "function" in t}
    turn_rewards, classes, names = [], Counter(), []
    components = {"success": 0.0, "turn_cost": 0.0, **{f"penalty/{c}": 0.0 for c in CALL_CLASSES}}
    for step in traj.steps:
        reward = -config.turn_cost
        components["turn_cost"] -= config.turn_cost
        for name in turn_classes(step, tools):
            classes[name] += 1
            names.append(name)
            penalty = config.penalties.get(name, 0.0)
            components[f"penalty/{name}"] -= penalty
            reward -= penalty
        turn_rewards.append(reward)
    if traj.success:
        components["success"] = config.success
        if turn_rewards:
            turn_rewards[-1] += config.success
    return EpisodeReward(total=sum(turn_rewards) if turn_rewards else components["success"],
                         turn_rewards=turn_rewards, components=components, classes=classes,
                         turn_class_names=names,
                         attempted_calls=sum(attempted_call(s) for s in traj.steps),
                         syntax_errors=sum(invalid_call(s) for s in traj.steps))
