"""Falsification check (issue 18): look for a concrete reason one step of a trajectory is wrong.

Two checkers, tried in this order by the consistency stage:

- `rule_falsify` (always): evidence already in the trajectory, without the gold solution or
  the checker (those are what the filter is measured against). A step is wrong when its turn
  failed (unparsable, unknown tool, invalid or cut-off call: the episode's own error), when
  its call breaks the tool's JSON Schema (`mutators.validate_detailed`), when the environment
  answered the call with an error, or when the episode has no final answer. The answer is
  wrong when it states a number that appears neither in the instruction nor in any tool
  response (an ungrounded figure; only where the answer is the outcome: a rollout that
  changed nothing).
- `LLMFalsifier` (with `critics.backend: llm`, on the rule check's survivors): the critic
  model is shown the task, tools and steps and asked to name the step and a concrete reason,
  or to reply `<verdict>none</verdict>`. An unreadable reply is not a falsification
  (`falsified` None, kind `unreadable_reply`): the columns let a notebook drop those too.

Verdicts are data (`Verdict`): nothing here raises on a model's reply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import orjson

from critics.critique import brief, tool_spec
from critics.llm_critic import Complete, check_answered, tag_pattern, tagged_block
from datagen.chat import render_call
from datagen.types import Trajectory
from mutators import validate_detailed

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check's result: `falsified` True (with the step, a kind and the reason), False
    (no reason found), or None (the check could not decide; `kind` says why)."""

    checker: str  # rule | llm
    falsified: bool | None
    step: int | None = None
    kind: str | None = None
    reason: str = ""


Falsifier = Callable[[Trajectory], Verdict]


def rule_falsify(traj: Trajectory, answer_matters: bool = True) -> Verdict:
    """The first concrete reason a step of `traj` is wrong, from the trajectory alone.
    `answer_matters` False (the rollout changed the world: its answer is a remark such as
    "Moved 2 logs") skips the ungrounded-number check, which counts would fail."""
    for index, step in enumerate(traj.steps):
        if step.error is not None:
            return Verdict("rule", True, index, step.error_kind or "failed_turn",
                           brief(step.error, 300))
        if step.call is not None:
            spec = tool_spec(traj.tools, step.call.name)
            problems = validate_detailed(step.call.as_dict(), spec) if spec else []
            if spec is None or problems:
                detail = problems[0].message if problems else f"no tool {step.call.name!r}"
                return Verdict("rule", True, index, "schema_invalid", brief(detail, 300))
            if step.observation is not None and step.observation.error:
                return Verdict("rule", True, index, "tool_error",
                               f"{step.call.name}: {brief(step.observation.error, 280)}")
    final = traj.steps[-1] if traj.steps else None
    if final is None or final.answer is None:
        return Verdict("rule", True, len(traj.steps) - 1 if traj.steps else None, "no_answer",
                       brief(traj.error or "the episode ended without a final answer", 300))
    ungrounded = _ungrounded_numbers(traj, final.answer) if answer_matters else []
    if ungrounded:
        return Verdict("rule", True, len(traj.steps) - 1, "ungrounded_answer",
                       f"the answer states {', '.join(ungrounded[:3])}, found in no tool "
                       f"response and not in the task")
    return Verdict("rule", False)


def _ungrounded_numbers(traj: Trajectory, answer: str) -> list[str]:
    seen = set(_NUMBER.findall(traj.task.instruction))
    for step in traj.steps:
        if step.observation is not None:
            seen.update(_NUMBER.findall(step.observation.content))
    return [number for number in dict.fromkeys(_NUMBER.findall(answer))
            if number not in seen and _canonical(number) not in {_canonical(s) for s in seen}]


def _canonical(number: str) -> str:
    try:
        return repr(float(number))
    except ValueError:
        return number


FALSIFY_SYSTEM_PROMPT = "You are a sceptical reviewer who looks for mistakes in an AI agent's work."

FALSIFY_INSTRUCTIONS = (
    "Find a concrete reason that one step of this agent's work is wrong: a call with the "
    "wrong tool or argument values, a result misread, an answer the responses do not support. "
    "Name the step by its number and give the reason in one or two sentences. If you find no "
    "concrete reason, say so.\nReply exactly in one of these forms:\n"
    "<step>N</step><reason>...</reason>\n<verdict>none</verdict>"
)
_STEP = re.compile(r"<step>\s*(\d{1,4})\s*</step>", re.I)
_REASON = tag_pattern("reason")
_NONE = re.compile(r"<verdict>\s*none\s*</verdict>", re.I)


def render_falsify_prompt(traj: Trajectory) -> str:
    """The falsification prompt: task, tools, numbered steps with responses, the answer. The
    gold solution and the checker's verdict are never shown."""
    tools = "\n".join(orjson.dumps(t["function"]).decode() for t in traj.tools)
    lines = []
    for index, step in enumerate(traj.steps):
        if step.call is not None:
            obs = step.observation.content if step.observation else "(no response)"
            lines.append(f"[{index}] {render_call(step.call)}\n-> {brief(obs, 300)}")
        elif step.answer is not None:
            lines.append(f"[{index}] final answer: {brief(step.answer, 300)}")
    return (f"{FALSIFY_INSTRUCTIONS}\n\n# Task\n{traj.task.instruction}\n\n# Tools\n{tools}\n\n"
            f"# Steps\n" + ("\n".join(lines) or "(none)") + "\n")


def parse_falsify_reply(reply: str | BaseException, n_steps: int) -> Verdict:
    """A Verdict from a model reply; never raises."""
    if isinstance(reply, BaseException):
        return Verdict("llm", None, kind="critic_failed",
                       reason=brief(f"{type(reply).__name__}: {reply}", 300))
    if not isinstance(reply, str):
        return Verdict("llm", None, kind="unreadable_reply", reason="reply is not text")
    step, reason = _STEP.search(reply), (tagged_block(reply, _REASON) or "").strip()
    if step and reason and int(step.group(1)) < n_steps:
        return Verdict("llm", True, int(step.group(1)), "critic", brief(reason, 300))
    if _NONE.search(reply):
        return Verdict("llm", False)
    return Verdict("llm", None, kind="unreadable_reply", reason=brief(reply, 200))


@dataclass
class LLMFalsifier:
    """The critic model asked to falsify; `prefetch` answers a batch's prompts in one call."""

    complete: Complete

    def verdicts(self, trajectories: list[Trajectory]) -> list[Verdict]:
        prompts = [render_falsify_prompt(traj) for traj in trajectories]
        unique = list(dict.fromkeys(prompts))
        try:
            replies = list(self.complete(unique)) if unique else []
        except Exception as exc:  # noqa: BLE001 - a backend failure costs these checks only
            replies = [exc] * len(unique)
        if len(replies) != len(unique):
            replies = [RuntimeError(f"{len(replies)} replies for {len(unique)} prompts")] * \
                len(unique)
        check_answered(replies, "falsification checks")
        by_prompt = dict(zip(unique, replies))
        return [parse_falsify_reply(by_prompt[prompt], len(traj.steps))
                for prompt, traj in zip(prompts, trajectories)]
