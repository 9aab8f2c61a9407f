"""Hostile and careless input to `mutators` (issue 12): backtracking patterns, integers past
Python's int-str limit, bad seeds and kinds. Nothing hangs, nothing raises, messages stay short."""

from __future__ import annotations

import re
import signal
import time
from contextlib import contextmanager

import pytest

from mutators import ALL_KINDS, KINDS, mutate_report, schema_warnings, validate
from mutators import formats, prose, safe_regex
from mutators.safe_regex import UNDECIDED, compile_safe, new_call

PATHOLOGICAL = ["(a+)+$", "((a)+)+$", "(a|a)*$", "(a|a?)+$", "(?:a|a)+b", "(x+x+)+y",
                "^(([a-z])+.)+[A-Z]([a-z])+$"]


def tool_with(schema: dict) -> dict:
    return {"name": "t", "parameters": {"type": "object", "properties": {"x": schema}}}


def check(tool: dict, value) -> tuple[list[str], float]:
    start = time.perf_counter()
    errors = validate({"name": "t", "arguments": {"x": value}}, tool)
    return errors, time.perf_counter() - start


@pytest.mark.parametrize("pattern", PATHOLOGICAL)
def test_backtracking_patterns_validate_in_linear_time(pattern):
    # (a+)+$ against 26 a's and a "!" took 4.7 s with Python's re; 40 a's ran past 60 s
    tool = tool_with({"type": "string", "pattern": pattern})
    for subject in ("a" * 5000 + "!", "x" * 5000, "ab" * 2500 + "Abc!"):
        errors, seconds = check(tool, subject)
        assert seconds < 0.1, (pattern, seconds)
        short = subject[:10] + subject[-4:]  # small enough for Python's re
        assert (errors == []) is (re.search(pattern, short) is not None), (pattern, errors)


def test_pattern_properties_use_the_same_engine():
    tool = {"name": "t", "parameters": {"type": "object", "additionalProperties": False,
                                        "patternProperties": {"(a+)+$": {"type": "integer"}}}}
    start = time.perf_counter()
    errors = validate({"name": "t", "arguments": {"a" * 3000 + "!": 1, "aa": "x"}}, tool)
    assert time.perf_counter() - start < 0.1
    assert len(errors) == 2 and "unknown key" in errors[0]
    assert errors[1] == "arguments.aa: expected integer, got string"


def test_engines_and_ecma_semantics():
    assert compile_safe("^C-[0-9]{4}$").engine == "re"          # bounded: Python's re, fast
    assert compile_safe("[a-z]+@").engine == "re2"              # everything else RE2 reads
    assert compile_safe("^(?=.*\\d).{8,}$").engine == "regex"   # lookaround: time-budgeted
    cases = [("^[A-Z]{2}-\\d{3}$", "AB-123", True), ("^[A-Z]{2}-\\d{3}$", "AB-123\n", False),
             ("\\d", "ab1", True), ("^\\d+$", "\u0661\u0662", False),   # ASCII \d, as ECMA
             ("(?<year>\\d{4})", "in 2024", True), ("\\u0041", "A", True),
             ("^(?=.*\\d).{8,}$", "abcdefg1", True), ("^(?=.*\\d).{8,}$", "abcdefgh", False),
             ("(a)\\1", "xaa", True), ("[$]", "a$", True), ("a$", "ab", False)]
    for pattern, subject, expected in cases:
        tool = tool_with({"type": "string", "pattern": pattern})
        assert (check(tool, subject)[0] == []) is expected, (pattern, subject)


def test_a_backtracking_lookaround_is_reported_not_hung():
    tool = tool_with({"type": "string", "pattern": "(a|a)*$(?=b)"})
    errors, seconds = check(tool, "a" * 40 + "!")
    assert seconds < 1.5 and "could not be checked against pattern" in errors[0], errors
    errors, seconds = check(tool, "a" * 40 + "?")  # once timed out, never run again
    assert seconds < 0.01 and "could not be checked" in errors[0]


def test_a_call_spends_a_bounded_time_on_slow_patterns(monkeypatch):
    # many values each just under the per-search timeout: the per-call budget caps the sum
    monkeypatch.setattr(safe_regex, "MATCH_TIMEOUT_S", 10.0)
    monkeypatch.setattr(safe_regex, "CALL_BUDGET_S", 0.2)
    pattern = compile_safe("(b|b)*!(?=\\d)")
    assert pattern.engine == "regex"
    new_call()
    start = time.perf_counter()
    results = [pattern.search("b" * 30 + "!") for _ in range(5)]
    assert time.perf_counter() - start < 2 and results[-1] is UNDECIDED
    assert not pattern.timed_out  # the call's budget ran out, not the pattern's own timeout
    new_call()
    assert pattern.search("bb!1") is not None  # the next call has a fresh budget


@pytest.mark.parametrize("pattern", ["(?:a{1000}){1000}", "(", "x" * 20_000])
def test_unusable_patterns_are_ignored_with_a_warning(pattern):
    tool = tool_with({"type": "string", "pattern": pattern})
    start = time.perf_counter()
    assert check(tool, "anything")[0] == [] and schema_warnings(tool)
    assert time.perf_counter() - start < 0.5


def test_integers_past_the_int_str_limit_get_range_errors():
    # before: "call: validator failed: ValueError: Exceeds the limit (4300 digits) ..."
    tool = {"name": "t", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer", "maximum": 10}, "m": {"type": "integer", "multipleOf": 3},
        "e": {"enum": [1, 2]}, "f": {"type": "number", "multipleOf": 0.1}}}}
    big = 10 ** 5000

    def errors(**arguments):
        return validate({"name": "t", "arguments": arguments}, tool)

    assert errors(n=big) == ["arguments.n: 1.000e+5000 (integer) is greater than the maximum 10"]
    assert errors(n=-big) == [] and errors(m=3 * big) == [] and errors(f=big) == []
    assert errors(m=big + 1) == ["arguments.m: 1.000e+5000 (integer) is not a multiple of 3"]
    assert errors(e=big) == ["arguments.e: expected one of 1, 2; got 1.000e+5000 (integer)"]
    assert errors(m=[big]) == ["arguments.m: expected integer, got array"]
    assert errors(**{"x": {"k": big}})[0].startswith("arguments.x: unknown key")


def test_mutate_report_takes_any_seed_and_reports_bad_kinds():
    tool = tool_with({"type": "integer"})
    call = {"name": "t", "arguments": {"x": 3}}
    huge = mutate_report(call, tool, seed=10 ** 5000)  # before: ValueError
    assert len(huge.negatives) == 3 and huge.negatives == mutate_report(call, tool,
                                                                       seed=10 ** 5000).negatives
    assert mutate_report(call, tool, seed=7).negatives != [] and \
        mutate_report(call, tool, seed="7").negatives == mutate_report(call, tool, 7).negatives
    report = mutate_report(call, tool, kinds=[["x"], "nope", "type_error"])  # before: TypeError
    assert set(report.impossible) == {"['x']", "nope"} and len(report.negatives) == 1
    assert "named by a string" in report.impossible["['x']"]
    report = mutate_report(call, tool, operators={"logical_error": 5}, kinds=ALL_KINDS)
    assert "logical_error mutator failed" in report.impossible["logical_error"]
    big = mutate_report({"name": "t", "arguments": {"x": 10 ** 5000}}, tool, kinds=KINDS)
    assert {n.kind for n in big.negatives} == set(KINDS), big.impossible


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": "type_error"}, "not a single string"), ({"kinds": None}, "list of kind names"),
    ({"operators": 5}, "operators must be a mapping")])
def test_arguments_of_the_wrong_shape_raise_a_clear_type_error(kwargs, message):
    with pytest.raises(TypeError, match=message):
        mutate_report({"name": "t", "arguments": {}}, tool_with({"type": "integer"}), **kwargs)


@contextmanager
def interrupted_after(seconds: float):
    """Raise TimeoutError in the block after `seconds`: Python's re checks for signals while it
    backtracks, so an exponential match fails the test instead of hanging the suite.
    pytest-timeout's own alarm is put back afterwards."""
    def expire(signum, frame):
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


# Repeated pieces of what the patterns look for, each run ending in characters that fail it:
# the near-misses that make a backtracking pattern retry every split of the run.
NEAR_MISS_UNITS = ("  ,", "  or ", " / ", "| and ", "a.", "a@", "a-", "a:", "1,", "12:",
                   "'a', ", "default ", "e.g. ", " ", "a", "1", "@", ".")


def near_misses(length: int) -> list[str]:
    return [(unit * (length // len(unit) + 1))[:length - 2] + tail
            for unit in NEAR_MISS_UNITS for tail in ("!", " \n")]


def slowest_match(pattern: re.Pattern, operations: tuple[str, ...], length: int,
                  limit: float) -> tuple[float, str]:
    """The longest time one of `operations` took on a near-miss of `length` characters (inf
    when interrupted at `limit`), and the subject's first characters."""
    worst, subject_head = 0.0, ""
    for subject in near_misses(length):
        for operation in operations:
            start = time.perf_counter()
            try:
                with interrupted_after(limit):
                    getattr(pattern, operation)(subject)
                seconds = time.perf_counter() - start
            except TimeoutError:
                seconds = float("inf")
            if seconds > worst:
                worst, subject_head = seconds, subject[:12]
    return worst, subject_head


# Each module's patterns, the way the module runs them, at the longest text they can get:
# descriptions are clipped to MAX_DESCRIPTION; format checks fullmatch argument values, which
# have no limit (1 MB stands for a long model output).
@pytest.mark.parametrize("module, operations, length", [
    (prose, ("match", "search"), prose.MAX_DESCRIPTION), (formats, ("fullmatch",), 1_000_000)])
def test_module_patterns_stay_fast_on_their_longest_inputs(module, operations, length):
    # prose._LIST_GLUE was ^(?:\s*(?:,|/|\||\bor\b|\band\b)\s*)+$: 73 characters of
    # "  ,  ,  , x" took 48 s; at 2,000 characters it would never end
    patterns = {name: value for name, value in vars(module).items()
                if isinstance(value, re.Pattern)}
    assert len(patterns) >= 7
    limit = 1.0
    slow = {name: slowest_match(pattern, operations, length, limit)
            for name, pattern in patterns.items()}
    assert all(seconds < limit for seconds, _ in slow.values()), slow
