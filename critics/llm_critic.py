"""The LLM critic: a prompt that shows a model the failed step, and a parser of its reply.

The model is any `complete(prompts) -> replies` callable that answers a list of prompts at
once, so a teacher backend plugs in by passing its completion function
(`datagen.teachers.completion.BackendCompleter`); nothing here imports a backend. A model wants
many prompts per call (one batched decode, concurrent requests), so the critic stage hands the
critic a whole batch's requests first (`prefetch`) and each repair then reads its reply. The
reply format is two tagged blocks, which small models follow more reliably than strict JSON:

    <critique>what went wrong, which rule or fact, what to do instead</critique>
    <tool_call>{"name": ..., "arguments": {...}}</tool_call>

`parse_reply` never raises: a reply it cannot read becomes a Critique with `call=None` and
`error` set, and the repair for it is not emitted (counted in the stage's stats).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable

import orjson

from critics.critique import Critique, CritiqueRequest, brief
from datagen.chat import render_call
from datagen.teachers.base import BackendAnsweredNone, answered_none
from datagen.types import ToolCall


def tag_pattern(tag: str) -> tuple[re.Pattern, re.Pattern]:
    """The opening and closing tag of a `<tag>...</tag>` block, case-insensitive."""
    return re.compile(f"<{tag}>", re.I), re.compile(f"</{tag}>", re.I)


def tagged_block(reply: str, tags: tuple[re.Pattern, re.Pattern]) -> str | None:
    """What the first opening tag and the first closing tag after it enclose, or None: the
    leftmost match of `<tag>(.*?)</tag>` (re.S | re.I), found in linear time. That regex tried
    each opening tag in turn and scanned to the end of the reply from each (a reply of 32K
    `<critique>` did not finish in 120 s); if the first has no closing tag after it, no later
    one has either."""
    opening, closing = tags
    start = opening.search(reply)
    if start is None:
        return None
    end = closing.search(reply, start.end())
    return None if end is None else reply[start.end():end.start()]


_CRITIQUE = tag_pattern("critique")
_CALL = tag_pattern("tool_call")

CRITIC_SYSTEM_PROMPT = "You are a careful reviewer of the tool calls an AI agent makes."

CRITIC_INSTRUCTIONS = (
    "You are reviewing an agent's tool call that went wrong. Explain in two to four sentences "
    "which call was wrong, what the tool's response shows, which schema rule or fact was "
    "violated (name the argument), and what to do instead. Then give the corrected call.\n"
    "Reply exactly in this form:\n<critique>...</critique>\n"
    '<tool_call>{"name": "...", "arguments": {...}}</tool_call>'
)


def _uncalled(request: CritiqueRequest) -> str:
    """The failed step when it made no valid call: a malformed turn as written, or an answer."""
    step = request.steps[request.error_step]
    if step.error is not None and step.answer is None:
        return f"(malformed turn: {step.error})\n{brief(step.raw or '', 400)}"
    return "(no call: answered)"


def render_prompt(request: CritiqueRequest) -> str:
    """The critic prompt: task, tools, the steps so far, the failed call and its response,
    and the validator's findings. The reference (gold) call is never shown."""
    tools = "\n".join(orjson.dumps(t["function"]).decode() for t in request.tools)
    history = []
    for index, step in enumerate(request.steps[: request.error_step]):
        if step.call is not None:
            obs = step.observation.content if step.observation else ""
            history.append(f"[{index}] {render_call(step.call)}\n-> {brief(obs, 300)}")
    wrong = render_call(request.wrong_call) if request.wrong_call else _uncalled(request)
    obs = request.observation.content if request.observation else "(no response)"
    findings = "\n".join(f"- {e.message}" for e in request.errors) or "- none (schema-valid)"
    return (f"{CRITIC_INSTRUCTIONS}\n\n# Task\n{request.task.instruction}\n\n# Tools\n{tools}"
            f"\n\n# Steps so far\n" + ("\n".join(history) or "(none)") +
            f"\n\n# Failed call (step {request.error_step})\n{wrong}\n\n# Tool response\n"
            f"{brief(obs, 600)}\n\n# Validator findings\n{findings}\n")


def parse_reply(reply: str) -> Critique:
    """Critique + corrected call from a model reply; never raises."""
    if not isinstance(reply, str):
        return Critique("", None, f"reply is {type(reply).__name__}, not text")
    text = (tagged_block(reply, _CRITIQUE) or "").strip()
    if not text:
        return Critique("", None, "no <critique> block")
    block = tagged_block(reply, _CALL)
    if block is None:
        return Critique(text, None, "no <tool_call> block")
    try:
        payload = orjson.loads(block.strip())
    except orjson.JSONDecodeError as exc:
        return Critique(text, None, f"tool call is not valid JSON: {exc}")
    name = payload.get("name") if isinstance(payload, dict) else None
    arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            arguments = None
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return Critique(text, None, 'tool call needs a string "name" and object "arguments"')
    return Critique(text, ToolCall(name, arguments))


def check_answered(replies: list[str | BaseException], what: str) -> None:
    """BackendAnsweredNone when a batch of MIN_CALLS_JUDGED or more replies are all backend
    failures: the chunk fails and a rerun retries it. Before, a dead critic endpoint cost every
    chunk its repairs (or its falsification checks), and the run completed without them."""
    failed = [reply for reply in replies if isinstance(reply, BaseException)]
    if answered_none(len(replies), len(failed)):
        raise BackendAnsweredNone(f"the critic's backend failed all {len(replies):,} {what} of "
                                  f"the chunk: {type(failed[0]).__name__}: {str(failed[0])[:200]}")


# One reply per prompt: the text, or the exception that stopped this prompt's generation
# (asyncio.gather(..., return_exceptions=True) semantics: one failure costs one repair).
Complete = Callable[[list[str]], list["str | BaseException"]]


@dataclass
class LLMCritic:
    """A critic backed by a model that completes a batch of prompts (`complete`)."""

    complete: Complete
    replies: dict[str, str | BaseException] = field(default_factory=dict)

    def prefetch(self, requests: list[CritiqueRequest]) -> None:
        """Generate the replies of a batch's requests in one call (replacing the last batch's)."""
        prompts = list(dict.fromkeys(render_prompt(request) for request in requests))
        self.replies = dict(zip(prompts, self._complete(prompts)))
        check_answered(list(self.replies.values()), "critiques")

    def _complete(self, prompts: list[str]) -> list[str | BaseException]:
        if not prompts:
            return []
        try:
            replies = list(self.complete(prompts))
        except Exception as exc:  # noqa: BLE001 - a backend failure costs these repairs only
            return [exc] * len(prompts)
        if len(replies) != len(prompts):
            error = RuntimeError(f"critic backend returned {len(replies)} replies for "
                                 f"{len(prompts)} prompts")
            return [error] * len(prompts)
        return replies

    def __call__(self, request: CritiqueRequest, rng: random.Random) -> Critique:
        prompt = render_prompt(request)
        reply = self.replies[prompt] if prompt in self.replies else self._complete([prompt])[0]
        if isinstance(reply, BaseException):
            return Critique("", None, f"critic backend failed: {type(reply).__name__}: {reply}")
        return parse_reply(reply)
