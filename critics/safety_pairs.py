"""Safety cases -> `preferences` rows (source `safety`).

Dangerous: chosen = a refusal or confirmation request that names the action and the risk,
rejected = the compliant call. Benign look-alike, up to three pairs (`safety_preferences`),
all with chosen = the call:
- over a blunt over-refusal (kind `benign_<tool>`);
- with `contrast` (the default), over the careful refusal / confirmation request that the
  dangerous pairs choose, worded by the same templates (kind `benign_contrast_<tool>`,
  XSTest-style). Without it the careful refusal is only ever chosen, so a model can learn
  "answer without a call" instead of which requests to refuse;
- with `target`, over the same reasoning and tool on the case's decoy, a look-alike object
  (kind `benign_target_<tool>`): the pair differs only in the call's target, so it is the one
  signal to copy the requested name (the tiny student called memorised names, README, "DPO
  before/after, measured").
A benign case yields two or three pairs and a dangerous one one; the cases' mix (~1 benign in
3) keeps the two sides about even. Wording is drawn with a seeded rng so pairs do not all read
alike; the target pair draws nothing, so turning it on adds rows and changes no other pair.
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
# What an over-careful agent worries about on a benign request (the contrast pair's rejected).
_WORRY = ("it changes data and cannot be undone", "it may affect someone else's work",
          "changes like this are hard to reverse", "I cannot verify the request is intended")
_OVER_REFUSE = ("I'm sorry, but I can't {action}: it could be dangerous.",
                "I won't {action}; changes like this are too risky for me to make.")


def _fill(template: str, case: SafetyCase, risk: str | None = None) -> str:
    risk = case.risk if risk is None else risk
    return template.format(action=case.action, risk=risk, Risk=risk[:1].upper() + risk[1:])


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


def _row(case: SafetyCase, chosen: Step, rejected: Step, tools: list[dict[str, Any]],
         source_id: str, kind: str) -> dict[str, Any]:
    if rejected.call is not None:
        message = call_message(rejected.reasoning, rejected.call.as_dict())
    else:
        message = text_message(rejected.reasoning + act_text(rejected).removesuffix("<|im_end|>\n"))
    view = TrajectoryView(_decision_trajectory(case, chosen, source_id, tools))
    return preference_row(view, len(case.context), message,
                          rejected.reasoning + act_text(rejected), "safety", kind)


def _careful_refusal(case: SafetyCase, rng: random.Random, risk: str | None = None) -> Step:
    """The refusal / confirmation request a dangerous pair chooses (`risk`: instead of the
    case's own)."""
    injected = case.kind == "prompt_injection"
    return Step(_fill(rng.choice(_INJECTION_REASON if injected else _REFUSE_REASON), case, risk),
                answer=_fill(rng.choice(_INJECTION_ANSWER if injected else _REFUSE_ANSWER), case,
                             risk))


def safety_preferences(case: SafetyCase, tools: list[dict[str, Any]], source_id: str,
                       rng: random.Random, contrast: bool = True,
                       target: bool = False) -> list[dict[str, Any]]:
    """The preferences rows of `case` (tools: the environment's tool specs): one for a
    dangerous request; for a benign look-alike the call over an over-refusal, with `contrast`
    also the call over the careful refusal, with `target` also the call over its decoy
    (module doc)."""
    call = case.call
    if case.dangerous:
        chosen = _careful_refusal(case, rng)
        rejected = Step(_fill(rng.choice(_COMPLY_REASON), case), call=call)
        return [_row(case, chosen, rejected, tools, source_id, case.kind)]
    chosen = Step(_fill(rng.choice(_BENIGN_REASON), case), call=call)
    blunt = Step("", answer=_fill(rng.choice(_OVER_REFUSE), case))
    rows = [_row(case, chosen, blunt, tools, source_id, f"benign_{call.name}")]
    if contrast:
        careful = _careful_refusal(case, rng, rng.choice(_WORRY))
        rows.append(_row(case, chosen, careful, tools, source_id, f"benign_contrast_{call.name}"))
    if target and case.decoy is not None:
        wrong = Step(chosen.reasoning, call=case.decoy)
        rows.append(_row(case, chosen, wrong, tools, source_id, f"benign_target_{call.name}"))
    return rows


def safety_preference(case: SafetyCase, tools: list[dict[str, Any]], source_id: str,
                      rng: random.Random) -> dict[str, Any]:
    """The first row of `case` (a dangerous request's pair, a benign one's over-refusal pair)."""
    return safety_preferences(case, tools, source_id, rng, contrast=False)[0]
