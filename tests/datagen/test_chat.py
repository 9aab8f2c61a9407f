"""Chat rendering, span tiling and the never-raising assistant parser."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datagen.chat import parse_assistant, render_trajectory, to_messages
from datagen.spans import check_tiling
from datagen.types import Observation, Step, Task, ToolCall, Trajectory
from tests.datagen.helpers import oracle_trajectories

TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look up a customer.",
    "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                   "required": ["name"], "additionalProperties": False}}}]


def _trajectory(reasoning: str = "I need the id.") -> Trajectory:
    task = Task(id="t-1", env="toy", seed=1, instruction="Find Ada's id. Ünïcode ok?", gold=[])
    steps = [Step(reasoning, ToolCall("lookup", {"name": "Ada Lovelace"}),
                  Observation('{"id":"C-7"}')),
             Step("", ToolCall("lookup", {"name": "Bob"}), Observation("Error: no such", "no such")),
             Step("The id is C-7.", answer="C-7")]
    return Trajectory("x", task, TOOLS, steps, True, 1.0, "oracle")


def _hf_messages(traj: Trajectory) -> list[dict]:
    """Our messages in the shape `apply_chat_template` expects (arguments as dicts)."""
    messages = []
    for message in to_messages(traj):
        message = {k: v for k, v in message.items() if v is not None}
        if "tool_calls" in message:
            message["tool_calls"] = orjson.loads(message["tool_calls"])
        messages.append(message)
    return messages


def test_render_equals_the_qwen25_jinja_template(tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer_dir)
    for traj in [_trajectory(), _trajectory(reasoning="")] + oracle_trajectories(30):
        text, _ = render_trajectory(traj)
        expected = tokenizer.apply_chat_template(_hf_messages(traj), tools=traj.tools,
                                                 tokenize=False)
        assert text == expected


def test_spans_tile_the_text_and_label_each_part():
    text, spans = render_trajectory(_trajectory())
    assert check_tiling(text, spans) is None
    by_kind = {}
    for span in spans:
        by_kind.setdefault(span.kind, []).append(text[span.start:span.end])
    assert by_kind["REASON"] == ["I need the id.", "The id is C-7."]
    assert by_kind["OBS"][0].startswith("<|im_start|>user\n<tool_response>\n{\"id\":\"C-7\"}")
    assert by_kind["ACT"][-1] == "\n\nFinal answer: C-7<|im_end|>\n"
    assert text[spans[0].start:spans[0].end].startswith("<|im_start|>system\n")
    assert [s.step for s in spans if s.kind == "ACT"] == [0, 1, 2]


def test_every_act_span_of_oracle_trajectories_parses_back_to_the_executed_call():
    for traj in oracle_trajectories(60):
        text, spans = render_trajectory(traj)
        assert check_tiling(text, spans) is None
        acts = [text[s.start:s.end] for s in spans if s.kind == "ACT"]
        assert len(acts) == len(traj.steps)
        for act, step in zip(acts, traj.steps):
            parsed = parse_assistant(act)
            assert parsed.error is None, act
            if step.call is not None:
                assert parsed.call == step.call
            else:
                assert parsed.answer == step.answer


@pytest.mark.parametrize("text, kind", [
    ("thinking <tool_call>{not json}</tool_call>", "invalid_json"),
    ("<tool_call>[1, 2]</tool_call>", "invalid_call"),
    ('<tool_call>{"arguments": {}}</tool_call>', "invalid_call"),
    ('<tool_call>{"name": "a", "arguments": 3}</tool_call>', "invalid_call"),
    ('<tool_call>{"name": "a", "arguments": {}}', "unterminated_call"),
    ('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}</tool_call>', "multiple_calls"),
    ("oops </tool_call>", "unterminated_call"),
    (None, "not_text"),
])
def test_parser_reports_garbage_with_a_kind(text, kind):
    parsed = parse_assistant(text)
    assert parsed.error_kind == kind and parsed.error and parsed.call is None


def test_parser_reads_calls_answers_and_string_arguments():
    parsed = parse_assistant('Let me look.\n<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}'
                             "\n</tool_call><|im_end|>")
    assert parsed.reasoning == "Let me look." and parsed.call == ToolCall("f", {"a": 1})
    parsed = parse_assistant("All done.\n\nFinal answer: 42")
    assert (parsed.reasoning, parsed.answer) == ("All done.", "42")
    assert parse_assistant("just text").answer == "just text"


_fragments = st.sampled_from(["<tool_call>", "</tool_call>", "{", "}", '"name"', ":", '"arguments"',
                              "Final answer:", "<|im_end|>", "\n", "null", "[", "]", "\\", '"'])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_fragments, st.text(max_size=20)), max_size=30))
def test_parser_never_raises(pieces):
    parsed = parse_assistant("".join(pieces))
    assert (parsed.error is None) == (parsed.error_kind is None)
    if parsed.error is None:
        assert (parsed.call is None) != (parsed.answer is None)


def test_parser_survives_huge_input():
    parsed = parse_assistant("<tool_call>" + '{"name": "x", "arguments": {"a": "' + "y" * 2_000_000)
    assert parsed.error_kind == "unterminated_call"


def test_system_turn_is_cached_per_list_and_equals_a_fresh_render():
    from datagen.chat import system_turn

    copy = orjson.loads(orjson.dumps(TOOLS))  # equal content, another list object
    assert system_turn(TOOLS) is system_turn(TOOLS)
    assert system_turn(copy) == system_turn(TOOLS)
    assert system_turn(TOOLS, "Other prompt.") != system_turn(TOOLS)
    assert "Other prompt." in system_turn(TOOLS, "Other prompt.")
