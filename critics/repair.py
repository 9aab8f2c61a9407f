"""Repairs: a wrong step, its real observation, a critique, the corrected call, and the rollout
continued through the environment to success.

Two sources: an injected error (`repair_injection`, the environment is already in the state
right after the wrong call) and a failed rollout (`repair_failed`: the first faulty step is
located by comparing with the gold solution, and the prefix is re-executed). Either way the
repaired trajectory must pass the environment's checker, otherwise nothing is emitted: a repair
that does not reach success would teach the model a recovery that does not work.

Span labels: the wrong call's ACT span becomes `ERROR` (kept in the text so the model sees the
mistake in context, excluded from the loss); the critique is REASON and the corrected call ACT.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from critics.critique import Critic, Critique, build_request
from critics.inject import Injection, replay
from datagen.chat import act_text, render_trajectory
from datagen.envs import Environment
from datagen.preferences import TrajectoryView, call_message, preference_row, text_message
from datagen.rows import trajectory_row
from datagen.teachers.phrasing import final_reasoning, step_reasoning
from datagen.types import Span, Step, ToolCall, Trajectory, stable_hash
from mutators import Rejected

ERROR_SPAN = "ERROR"
_RETRY = ("Let me try that again.", "I'll run the same call once more.",
          "That should have worked; retrying.")


@dataclass(slots=True)
class Repair:
    """A repaired trajectory and where its fault was."""

    traj: Trajectory
    source_id: str
    error_step: int
    error_kind: str
    critique: str
    wrong_call: ToolCall | None
    wrong_answer: str | None = None


def continue_gold(env: Environment, traj: Trajectory, steps: list[Step], next_gold: int,
                  rng: random.Random) -> tuple[bool, str | None]:
    """Append the gold steps from `next_gold` on (executed in `env`) and the final answer;
    return (checker verdict, error)."""
    task = traj.task
    last = steps[-1]
    previous = (last.call, last.observation) if last.call and last.observation else None
    for gold in task.gold[next_gold:]:
        step = Step(step_reasoning(rng, gold, previous), call=gold.call)
        step.observation = env.step(gold.call.as_dict())
        steps.append(step)
        previous = (gold.call, step.observation)
    answer = task.answer or "Done."
    steps.append(Step(final_reasoning(rng, previous), answer=answer))
    return env.check(task, answer), None


def build_repair(env: Environment, traj: Trajectory, prefix: list[Step], wrong: Step,
                 critic: Critic, rng: random.Random, error_kind: str, negative: Any = None
                 ) -> Repair | Rejected:
    """Critique `wrong` (already executed in `env`), run the corrected call and the rest of
    the gold solution; a Repair when the checker accepts, else why not."""
    index = len(prefix)
    steps = prefix + [wrong]
    reference = traj.task.gold[index].call if index < len(traj.task.gold) else None
    request = build_request(traj.task, traj.tools, steps, index, reference, error_kind, negative)
    critique: Critique = critic(request, rng)
    if critique.call is None:
        return Rejected("critic_gave_no_call", f"critic gave no corrected call: {critique.error}")
    fixed = Step(critique.text, call=critique.call)
    fixed.observation = env.step(critique.call.as_dict())
    steps.append(fixed)
    if fixed.observation.error:
        return Rejected("corrected_call_failed", "the corrected call failed: "
                        f"{fixed.observation.error}")
    success, _ = continue_gold(env, traj, steps, index + 1, rng)
    if not success:
        return Rejected("checker_rejected", "checker rejected the repaired trajectory")
    repaired = Trajectory(id=stable_hash(traj.id, "repair", index, error_kind), task=traj.task,
                          tools=traj.tools, steps=steps, success=True, reward=1.0,
                          teacher=f"{traj.teacher}+critic", round=traj.round)
    return Repair(repaired, traj.id, index, error_kind, critique.text, wrong.call, wrong.answer)


def repair_injection(env: Environment, injection: Injection, critic: Critic,
                     rng: random.Random) -> Repair | Rejected:
    """Repair an injected error; `env` must be in the state right after the wrong call."""
    traj, index = injection.traj, injection.step
    wrong = Step(traj.steps[index].reasoning, call=injection.wrong_call,
                 observation=injection.observation)
    return build_repair(env, traj, list(traj.steps[:index]), wrong, critic, rng,
                        injection.kind, injection.negative)


def first_faulty_step(traj: Trajectory) -> int | None:
    """The first step that departs from the gold solution (a different call, a failed call, or
    an answer given before the gold steps are done / a wrong final answer)."""
    gold = traj.task.gold
    for index, step in enumerate(traj.steps):
        if index >= len(gold):
            return index if step.call is not None or step.answer != traj.task.answer else None
        if step.call is None or step.call.as_dict() != gold[index].call.as_dict():
            return index
        if step.observation is not None and step.observation.error:
            return index
    return None


def repair_failed(env: Environment, traj: Trajectory, critic: Critic,
                  rng: random.Random) -> Repair | Rejected:
    """Repair a failed rollout from its first faulty step, re-executing the prefix."""
    index = first_faulty_step(traj)
    if index is None or index >= len(traj.task.gold):
        return Rejected("no_faulty_step", "no faulty step found before the end of the gold "
                        "solution")
    replay(env, traj, index)
    original = traj.steps[index]
    # An LLM's turn keeps its raw text and turn error, so the repair shows (as its ERROR span)
    # what the model really wrote - a malformed call included - not a re-rendering of it.
    wrong = Step(original.reasoning, call=original.call, answer=original.answer,
                 error=original.error, error_kind=original.error_kind, raw=original.raw)
    if original.call is not None:  # re-execute: the observation is what the env says now
        wrong.observation = env.step(original.call.as_dict())
    elif original.error is not None:  # a malformed turn: the error the model was shown
        wrong.observation = original.observation
    return build_repair(env, traj, list(traj.steps[:index]), wrong, critic, rng,
                        "failed_rollout")


def repair_spans(repair: Repair, rendered: tuple[str, list[Span]] | None = None
                 ) -> tuple[str, list[Span]]:
    """Text and spans of a repaired trajectory, the wrong call's ACT span relabelled ERROR
    (and its REASON too when the turn is a model's raw text; `rendered`: the trajectory's own
    text and spans, left as they are)."""
    text, spans = rendered or render_trajectory(repair.traj)
    # A model's own failed turn (raw text: a student's rollout) is wrong as a whole - a
    # malformed turn has no call to isolate, and the reasoning led to the mistake - so its
    # REASON is no training target either; a scripted teacher's reasoning before an injected
    # call is sound and stays trained.
    wrong = ("ACT", "REASON") if repair.traj.steps[repair.error_step].raw is not None else ("ACT",)
    return text, [Span(ERROR_SPAN, span.start, span.end, span.step)
                  if span.kind in wrong and span.step == repair.error_step else span
                  for span in spans]


def repair_view(repair: Repair) -> TrajectoryView:
    """The repaired trajectory rendered once, for its row and its preference pair."""
    return TrajectoryView(repair.traj)


def repair_row(repair: Repair, view: TrajectoryView | None = None) -> dict[str, Any]:
    """A `repairs` row: trajectory columns + source_id, error_step, error_kind, critique."""
    view = view or repair_view(repair)
    text, spans = repair_spans(repair, (view.text, view.spans))
    row = trajectory_row(repair.traj, text, spans, view.tools_json)
    row.update(source_id=repair.source_id, error_step=repair.error_step,
               error_kind=repair.error_kind, critique=repair.critique)
    return row


def repair_preference(repair: Repair, rng: random.Random,
                      view: TrajectoryView | None = None) -> dict[str, Any]:
    """After the error: chosen = critique + corrected call; rejected = a blind retry of the
    same wrong action (the failure mode a model without reflection falls into)."""
    view = view or repair_view(repair)
    reasoning = rng.choice(_RETRY)
    retry = Step(reasoning, call=repair.wrong_call, answer=repair.wrong_answer)
    message = (call_message(reasoning, repair.wrong_call.as_dict()) if repair.wrong_call
               else text_message(reasoning + act_text(retry)))
    return preference_row(view, repair.error_step + 1, message, reasoning + act_text(retry),
                          "repair", repair.error_kind)


__all__ = ["Repair", "ERROR_SPAN", "repair_injection", "repair_failed", "first_faulty_step",
           "repair_row", "repair_spans", "repair_preference", "repair_view"]
