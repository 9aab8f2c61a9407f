"""Qwen2.5 tool-calling chat format: render trajectories to text with spans, parse model turns.

The template is Qwen2.5's, written out here (nothing is downloaded): tools are declared in the
system turn inside `<tools>`, calls are `<tool_call>{"name": .., "arguments": ..}</tool_call>`
blocks, and observations come back in the following user turn inside `<tool_response>`.

Rendering and span labelling happen in one pass, so the spans tile the text exactly:
- PROMPT: system and user turns, and each `<|im_start|>assistant\\n` header (given, not generated);
- REASON: the assistant's reasoning text;
- ACT: what the assistant commits to: `\\n<tool_call>...</tool_call><|im_end|>\\n`, or
  `Final answer: ...<|im_end|>\\n`;
- OBS: the tool-response turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from datagen.types import Span, Step, ToolCall, Trajectory

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_PREFIX = "Final answer: "

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful agent that solves the user's task with the tools provided. Before each "
    "action, explain briefly what you know and why you take the next step. Call exactly one "
    "tool per turn. When the task is done, reply with 'Final answer:' followed by the answer."
)

_TOOLS_HEADER = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


# json.dumps builds a new encoder on every call with non-default arguments; this one is built
# once (same output: the settings are those of json.dumps(value, ensure_ascii=False)).
_TOJSON = json.JSONEncoder(ensure_ascii=False)


def tojson(value: Any) -> str:
    """JSON exactly as the Hugging Face chat template's `tojson` filter writes it
    (", " and ": " separators, non-ASCII kept)."""
    return _TOJSON.encode(value)


@lru_cache(maxsize=64)
def _system_turn(system_prompt: str, tools_json: str) -> str:
    tools = orjson.loads(tools_json)
    lines = "".join("\n" + tojson(tool) for tool in tools)
    return f"{IM_START}system\n{system_prompt}{_TOOLS_HEADER}{lines}{_TOOLS_FOOTER}{IM_END}\n"


# System turns by tool-list object. Environments hand every task the same spec list and never
# mutate it (see ToolEnvironment.tools), so the identity of the list stands for its content
# and the JSON key of `_system_turn` (13 us per trajectory for the built-in lists) is skipped.
# The entry keeps its list alive, so an id is never reused by another list while cached.
_SYSTEM_BY_LIST: dict[tuple[int, str], tuple[list, str]] = {}


def system_turn(tools: list[dict[str, Any]], system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> str:
    """The rendered system turn (cached: every task of an environment shares it)."""
    key = (id(tools), system_prompt)
    cached = _SYSTEM_BY_LIST.get(key)
    if cached is not None and cached[0] is tools:
        return cached[1]
    text = _system_turn(system_prompt, orjson.dumps(tools).decode())
    if len(_SYSTEM_BY_LIST) >= 64:  # lists of rows read back: keep the cache small
        _SYSTEM_BY_LIST.clear()
    _SYSTEM_BY_LIST[key] = (tools, text)
    return text


def render_call(call: ToolCall) -> str:
    # The name goes in unescaped, as Qwen2.5's template does it.
    return (f'{TOOL_CALL_OPEN}\n{{"name": "{call.name}", "arguments": {tojson(call.arguments)}}}'
            f"\n{TOOL_CALL_CLOSE}")


def generation_prompt() -> str:
    """What precedes each assistant turn; a generating model continues from here."""
    return f"{IM_START}assistant\n"


class _SpanWriter:
    """Accumulates text pieces with their span kind, merging adjacent pieces of one kind."""

    __slots__ = ("pieces", "spans", "length")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.spans: list[Span] = []
        self.length = 0

    def add(self, kind: str, text: str, step: int) -> None:
        if not text:
            return
        end = self.length + len(text)
        last = self.spans[-1] if self.spans else None
        if last is not None and last.kind == kind and last.step == step:
            last.end = end
        else:
            self.spans.append(Span(kind, self.length, end, step))
        self.pieces.append(text)
        self.length = end

    def text(self) -> str:
        return "".join(self.pieces)


def render_trajectory(traj: Trajectory,
                      system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> tuple[str, list[Span]]:
    """Render a trajectory with the Qwen2.5 template; return the text and its spans."""
    out = _SpanWriter()
    out.add("PROMPT", system_turn(traj.tools, system_prompt), -1)
    out.add("PROMPT", f"{IM_START}user\n{traj.task.instruction}{IM_END}\n", -1)
    for index, step in enumerate(traj.steps):
        if step.raw is not None:  # LLM turn: the text exactly as generated
            _add_raw_turn(out, step, index)
            continue
        if step.call is None and step.answer is None and not step.reasoning:
            continue
        out.add("PROMPT", f"{IM_START}assistant" + ("\n" if step.reasoning or step.call is None else ""), index)
        out.add("REASON", step.reasoning, index)
        out.add("ACT", act_text(step), index)
        if step.call is not None and step.observation is not None:
            out.add("OBS", f"{IM_START}user\n<tool_response>\n{step.observation.content}"
                           f"\n</tool_response>{IM_END}\n", index)
    return out.text(), out.spans


def user_turn(instruction: str) -> str:
    """The user turn that states the task."""
    return f"{IM_START}user\n{instruction}{IM_END}\n"


def observation_turn(content: str) -> str:
    """The turn that shows a tool's response to the model."""
    return f"{IM_START}user\n<tool_response>\n{content}\n</tool_response>{IM_END}\n"


def turn_act_offset(step: Step) -> int:
    """Where ACT starts in `step.raw`: at the whitespace before `<tool_call>` or the last
    `Final answer:`; at 0 for a plain reply accepted as the answer; otherwise at the end (a
    failed turn without an action is all REASON, its closing <|im_end|> is ACT)."""
    raw = step.raw or ""
    at = raw.find(TOOL_CALL_OPEN)
    if at < 0:
        at = raw.lower().rfind(ANSWER_PREFIX.strip().lower())
    if at < 0:
        return 0 if step.answer is not None else len(raw)
    return len(raw[:at].rstrip())


def _add_raw_turn(out: _SpanWriter, step: Step, index: int) -> None:
    raw, at = step.raw or "", turn_act_offset(step)
    out.add("PROMPT", generation_prompt(), index)
    out.add("REASON", raw[:at], index)
    out.add("ACT", f"{raw[at:]}{IM_END}\n", index)
    if step.observation is not None:  # a tool response, or the error shown after a failed turn
        out.add("OBS", observation_turn(step.observation.content), index)


def _failed_raw(step: Step) -> bool:
    """A failed LLM turn: its message shows the raw text (there is no valid call to show)."""
    return step.raw is not None and step.error is not None and step.call is None


def act_text(step: Step) -> str:
    """The ACT part of an assistant turn: the tool-call block or the final answer, through
    `<|im_end|>\n`."""
    if step.call is not None:
        return f"\n{render_call(step.call)}{IM_END}\n"
    separator = "\n\n" if step.reasoning else ""
    return f"{separator}{ANSWER_PREFIX}{step.answer or ''}{IM_END}\n"


def message_index(steps: list[Step], step: int) -> int:
    """Index in `to_messages(...)` of the assistant message of turn `step`."""
    index = 2
    for earlier in steps[:step]:
        if earlier.call is not None or _failed_raw(earlier):
            index += 1 + (earlier.observation is not None)
        elif earlier.answer is not None or earlier.reasoning:
            index += 1
    return index


def to_messages(traj: Trajectory,
                system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> list[dict[str, Any]]:
    """OpenAI-style messages (tool_calls as a JSON string, so Arrow stores one flat struct)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt, "tool_calls": None, "name": None},
        {"role": "user", "content": traj.task.instruction, "tool_calls": None, "name": None},
    ]
    for step in traj.steps:
        if _failed_raw(step):
            messages.append({"role": "assistant", "content": step.raw, "tool_calls": None,
                             "name": None})
            if step.observation is not None:
                messages.append({"role": "tool", "content": step.observation.content,
                                 "tool_calls": None, "name": None})
        elif step.call is not None:
            calls = orjson.dumps([{"type": "function", "function": step.call.as_dict()}]).decode()
            messages.append({"role": "assistant", "content": step.reasoning,
                             "tool_calls": calls, "name": None})
            if step.observation is not None:
                messages.append({"role": "tool", "content": step.observation.content,
                                 "tool_calls": None, "name": step.call.name})
        elif step.answer is not None or step.reasoning:
            content = f"{step.reasoning}\n\n{ANSWER_PREFIX}{step.answer or ''}" if step.reasoning \
                else f"{ANSWER_PREFIX}{step.answer or ''}"
            messages.append({"role": "assistant", "content": content,
                             "tool_calls": None, "name": None})
    return messages


@dataclass(slots=True)
class ParsedTurn:
    """An assistant turn split into reasoning and action. Exactly one of `call` / `answer` is
    set when `error` is None; on error, `error_kind` names the problem and `error` explains it."""

    reasoning: str
    call: ToolCall | None = None
    answer: str | None = None
    error: str | None = None
    error_kind: str | None = None


def _fail(reasoning: str, kind: str, message: str) -> ParsedTurn:
    return ParsedTurn(reasoning=reasoning, error=message, error_kind=kind)


def _decode_call(body: str, reasoning: str) -> ParsedTurn:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _fail(reasoning, "invalid_json", f"tool call is not valid JSON: {exc}")
    if not isinstance(payload, dict):
        return _fail(reasoning, "invalid_call", "tool call JSON must be an object")
    name, arguments = payload.get("name"), payload.get("arguments", {})
    if not isinstance(name, str) or not name:
        return _fail(reasoning, "invalid_call", 'tool call needs a string "name"')
    if isinstance(arguments, str):  # some models emit arguments as a JSON string
        try:
            arguments = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError as exc:
            return _fail(reasoning, "invalid_json", f"arguments string is not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return _fail(reasoning, "invalid_call", '"arguments" must be a JSON object')
    return ParsedTurn(reasoning=reasoning, call=ToolCall(name, arguments))


def _parse(text: str) -> ParsedTurn:
    text = text.split(IM_END, 1)[0].strip()
    open_at = text.find(TOOL_CALL_OPEN)
    if open_at < 0:
        marker = text.lower().rfind(ANSWER_PREFIX.strip().lower())
        if marker < 0:
            if TOOL_CALL_CLOSE in text:
                return _fail(text, "unterminated_call", "found </tool_call> without <tool_call>")
            return ParsedTurn(reasoning="", answer=text)
        answer = text[marker + len(ANSWER_PREFIX.strip()):].strip()
        return ParsedTurn(reasoning=text[:marker].strip(), answer=answer)
    reasoning = text[:open_at].strip()
    close_at = text.find(TOOL_CALL_CLOSE, open_at)
    if close_at < 0:
        return _fail(reasoning, "unterminated_call", "<tool_call> is never closed")
    if text.find(TOOL_CALL_OPEN, close_at) >= 0:
        return _fail(reasoning, "multiple_calls", "more than one <tool_call> in one turn")
    return _decode_call(text[open_at + len(TOOL_CALL_OPEN):close_at].strip(), reasoning)


def parse_assistant(text: Any) -> ParsedTurn:
    """Split raw assistant text into reasoning + tool call (or final answer).

    Never raises: garbage in gives a ParsedTurn with `error_kind` set (invalid_json,
    invalid_call, unterminated_call, multiple_calls, not_text, internal)."""
    if not isinstance(text, str):
        return _fail("", "not_text", f"expected text, got {type(text).__name__}")
    try:
        return _parse(text)
    except Exception as exc:  # the parser reads untrusted model output: never let it escape
        return _fail("", "internal", f"parser failed: {type(exc).__name__}: {exc}")
