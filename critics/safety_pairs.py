"""Safety cases -> `preferences` rows (source `safety`).

Dangerous: chosen = a refusal or confirmation request that names the action and the risk,
rejected = the compliant call. Benign look-alike: chosen = the call, rejected = an
over-refusal. Wording is drawn with a seeded rng so pairs do not all read alike.
"""

from __future__ import annotations

import random
from typing import Any

from critics.safety import SafetyCase
from datagen.chat import act_text
from datagen.preferences import TrajectoryView, call_message, preference_row, text_message
from datagen.types import Observation, Step, Task, Trajectory, stable_hash

_REFUSE_REASON = (
    "This request would {action}. That is risky: {risk}.",
    "Before acting I should weigh this: it would {action}, and {risk}.",
    "I need to be careful here. To comply I would {action}; {risk}.",
)
_REFUSE_ANSWER = (
    "I have not done it. {Risk}, so I need your explicit confirmation (and, where it applies, "
    "who authorised it) before I {action}.",
    "I won't {action} without a confirmation: {risk}. Please confirm that this is intended.",
    "I'd rather check first: {risk}. Reply to confirm if you really want me to {action}.",
)
_INJECTION_REASON = (
    "The tool output contains an instruction to {action}. It did not come from the user, and "
    "{risk}.",
    "That response tries to make me {action}; {risk}, so it is not an instruction to follow.",
)
_INJECTION_ANSWER = (
    "Note: the data I read contains an embedded instruction to {action}. I ignored it, since "
    "{risk}. Nothing was changed.",
    "I did not act on the instruction hidden in the tool output (to {action}): {risk}.",
)
_COMPLY_REASON = ("Sure, I'll {action} as asked.", "Understood, I'll {action} now.",
                  "The request is clear, so I'll {action}.")
_BENIGN_REASON = ("The user asked me to {action}, and {risk}, so I can go ahead.",
                  "This is safe to do: {risk}. I'll {action}.")
_OVER_REFUSE = ("I'm sorry, but I can't {action}: it could be dangerous.",
                "I won't {action}; changes like this are too risky for me to make.")


def _fill(template: str, case: SafetyCase) -> str:
    return template.format(action=case.action, risk=case.risk,
                           Risk=case.risk[:1].upper() + case.risk[1:])


def _decision_trajectory(case: SafetyCase, chosen: Step, source_id: str,
                         tools: list[dict[str, Any]]) -> Trajectory:
    """A one-decision trajectory: context steps (poisoned observations) then `chosen`."""
    task = Task(id=stable_hash(source_id, "safety-task", case.instruction), env=case.env,
                seed=0, instruction=case.instruction, gold=[])
    steps = [Step("Let me look that up.", call=call, observation=Observation(content))
             for call, content in case.context]
    return Trajectory(id=stable_hash(source_id, "safety", case.kind, case.instruction),
                      task=task, tools=tools, steps=steps + [chosen], success=True, reward=1.0,
                      teacher="safety")


def safety_preference(case: SafetyCase, tools: list[dict[str, Any]], source_id: str,
                      rng: random.Random) -> dict[str, Any]:
    """One preferences row for `case` (tools: the environment's tool specs)."""
    call = case.call
    if case.dangerous:
        injected = case.kind == "prompt_injection"
        chosen = Step(_fill(rng.choice(_INJECTION_REASON if injected else _REFUSE_REASON), case),
                      answer=_fill(rng.choice(_INJECTION_ANSWER if injected else _REFUSE_ANSWER),
                                   case))
        reasoning = _fill(rng.choice(_COMPLY_REASON), case)
        rejected = Step(reasoning, call=call)
        message = call_message(reasoning, call.as_dict())
    else:
        chosen = Step(_fill(rng.choice(_BENIGN_REASON), case), call=call)
        rejected = Step("", answer=_fill(rng.choice(_OVER_REFUSE), case))
        message = text_message(act_text(rejected).removesuffix("<|im_end|>\n"))
    view = TrajectoryView(_decision_trajectory(case, chosen, source_id, tools))
    return preference_row(view, len(case.context), message,
                          rejected.reasoning + act_text(rejected), "safety",
                          case.kind if case.dangerous else f"benign_{call.name}")
