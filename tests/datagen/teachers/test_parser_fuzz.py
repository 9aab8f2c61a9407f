"""Fuzzing what a model can say: random and adversarial assistant texts (truncated JSON, two
tool calls, unknown tools, huge outputs, unicode) never raise in the parser, the turn judge, the
renderer or the token trace, and always end as a valid step or a failed one with a reason."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datagen.chat import parse_assistant, render_trajectory, turn_act_offset
from datagen.spans import check_tiling, span_at
from datagen.teachers import EnvPool
from datagen.teachers.episode import Generation, judge_turn
from datagen.teachers.trace import TraceBuilder, decode
from datagen.types import SPAN_KIND_ID, Observation, Task, Trajectory

FRAGMENTS = ["<tool_call>", "</tool_call>", "{", "}", "[", "]", '"name"', '"arguments"', ": ",
             ", ", '"run_query"', '"list_tables"', '"nosuch_tool"', '{"sql": "SELECT 1"}',
             '"{\\"sql\\": 1}"', "null", "1e999", "Final answer:", "final ANSWER:", "<|im_end|>",
             "<|im_start|>", "<tool_response>", "\n", " ", "\\", '"', "é", "你好", "🙂", "\x00",
             "\ud7ff", "Ω≈ç√", "\u202e", "<tool_call><tool_call>", "</tool_call></tool_call>"]
adversarial = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=40).map("".join)
any_text = st.text(max_size=300) | adversarial

SQL_TOOLS = {tool["function"]["name"]: tool for tool in EnvPool().get("sql").tools()}
FINISH = st.sampled_from(["stop", "length"])


def _trajectory(step) -> Trajectory:
    task = Task(id="t", env="sql", seed=0, instruction="Count the rows.", gold=[])
    return Trajectory(id="x", task=task, tools=list(SQL_TOOLS.values()), steps=[step],
                      success=False, reward=0.0, teacher="fuzz")


@settings(max_examples=400, deadline=None)
@given(text=any_text, finish=FINISH)
def test_any_turn_is_judged_without_raising(text, finish):
    parsed = parse_assistant(text)
    if parsed.error is None:
        assert (parsed.call is None) != (parsed.answer is None)
    step = judge_turn(Generation(text=text, finish_reason=finish), SQL_TOOLS, 24)
    assert step.raw == text
    if step.error is not None:
        assert step.call is None and step.error.split(":")[0] in {
            "truncated", "invalid_json", "invalid_call", "unterminated_call", "multiple_calls",
            "unknown_tool", "invalid_arguments", "internal", "not_text"}
    else:
        assert finish == "stop" and (step.call is None) != (step.answer is None)
        assert step.call is None or step.call.name in SQL_TOOLS
    if step.error is not None:
        step.observation = Observation(content=f"Error: {step.error}", error=step.error)
    text_out, spans = render_trajectory(_trajectory(step))
    assert check_tiling(text_out, spans) is None
    assert 0 <= turn_act_offset(step) <= len(text)


@pytest.mark.parametrize("text, kind", [
    ('<tool_call>\n{"name": "run_query", "arguments": {"sql": "SELECT 1"', "unterminated_call"),
    ('<tool_call>\n{"name": "run_query", "arguments": {"sql": </tool_call>', "invalid_json"),
    ('<tool_call>{"name": "run_query", "arguments": {"sql": "SELECT 1"}}</tool_call>'
     '<tool_call>{"name": "list_tables", "arguments": {}}</tool_call>', "multiple_calls"),
    ('<tool_call>{"name": "drop_everything", "arguments": {}}</tool_call>', "unknown_tool"),
    ('<tool_call>{"name": "run_query", "arguments": {"sql": 7}}</tool_call>', "invalid_arguments"),
    ('<tool_call>{"name": "run_query", "arguments": {"query": "x"}}</tool_call>',
     "invalid_arguments"),
    ('<tool_call>{"arguments": {}}</tool_call>', "invalid_call"),
    ('<tool_call>["run_query"]</tool_call>', "invalid_call"),
    ("I think </tool_call> is how it ends", "unterminated_call"),
])
def test_each_kind_of_bad_turn_is_named(text, kind):
    step = judge_turn(Generation(text=text), SQL_TOOLS, 24)
    assert step.error is not None and step.error.startswith(f"{kind}:"), step.error
    assert step.call is None and step.error_kind == kind


def test_a_valid_call_and_an_answer_pass():
    call = judge_turn(Generation(text='Look.\n<tool_call>\n{"name": "list_tables", '
                                      '"arguments": {}}\n</tool_call>'), SQL_TOOLS, 24)
    assert call.error is None and call.call.name == "list_tables" and call.reasoning == "Look."
    answer = judge_turn(Generation(text="Done.\n\nFinal answer: 42"), SQL_TOOLS, 24)
    assert answer.error is None and answer.answer == "42"


def test_huge_outputs_are_fast_and_safe():
    huge = ("é🙂 " * 100_000) + "<tool_call>" + '{"name": "run_query", "arguments": {' * 2000
    started = time.perf_counter()
    step = judge_turn(Generation(text=huge, finish_reason="length"), SQL_TOOLS, 4096)
    many_calls = judge_turn(Generation(text='<tool_call>{"name": "x"}</tool_call>' * 20_000),
                            SQL_TOOLS, 4096)
    assert step.error.startswith("truncated") and many_calls.error.startswith("multiple_calls")
    assert time.perf_counter() - started < 2.0


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text, closed=st.booleans())
def test_token_trace_matches_rendered_text_for_any_turn(tokenizer, text, closed):
    """Whatever the model said, the trace decodes to the row's text and each token's span id is
    the span its first character falls in (ids here stand in for generated ones)."""
    text = text.replace("\x00", "")
    step = judge_turn(Generation(text=text), SQL_TOOLS, 24)
    traj = _trajectory(step)
    rendered, spans = render_trajectory(traj)
    builder = TraceBuilder(tokenizer, "tiny", {})
    builder.add_template(rendered[:spans[0].end], "PROMPT")  # system + user turns
    builder.add_template("<|im_start|>assistant\n", "PROMPT")
    turn_starts = len(builder.ids)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if decode(tokenizer, ids) != text or im_end in ids:
        return  # not a generated turn: lone surrogates, or an <|im_end|> (generation stops there)
    ids += [im_end] if closed else []
    builder.add_generated(ids, None, None, turn_act_offset(step))
    trace = builder.trace
    assert decode(tokenizer, trace.ids) == rendered
    assert len(trace.span_ids) == len(trace.ids) == len(trace.topk_counts)
    for i in range(turn_starts, len(trace.ids)):  # the prompt is covered by the tests above
        start = len(decode(tokenizer, trace.ids[:i]))
        if start < len(rendered):
            assert trace.span_ids[i] == SPAN_KIND_ID[span_at(spans, start).kind]
