"""Negatives on real-world-like tool specs (issue 14, section 3): the three targets on the
corpus under `tests/mutators/realworld/`, and the checker that judges them shown able to
fail on negatives that are not what their kind says."""

from __future__ import annotations

import copy

import pytest

from mutators import Negative, mutate_report
from tests.mutators.realworld.checker import check
from tests.mutators.realworld.corpus import Case, load_cases, load_entries, unannotated_defaults
from tests.mutators.realworld.measure import corpus_set, measure

MIN_ALL_THREE = 0.97      # calls (with at least one argument) that get all three kinds
MAX_WRONG = 0.005         # negatives that are not what their kind says


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return load_cases()


@pytest.fixture(scope="module")
def figures(cases):
    # held-out set 2 is measured by the benchmark, not gated here: a target asserted on it
    # would make it a set to tune on
    return measure([c for c in cases if corpus_set(c) != "heldout2"], seeds=range(2))


def test_corpus_is_large_varied_and_annotated(cases):
    entries = load_entries()
    assert len(entries) >= 140 and len(cases) >= 3 * 270
    assert {c.origin.rsplit("(", 1)[1] for c in cases} == {
        "as-written)", "respelled-types)", "prose-defaults)"}
    # a description that speaks of a default must have it recorded in the truth, or the
    # checker would misjudge dropping that argument
    assert {where: unannotated_defaults(entry) for where, entry in entries
            if unannotated_defaults(entry)} == {}


def test_the_held_out_part_is_large_and_kept_apart(cases):
    parts = {corpus_set(c) for c in cases}
    written = [c for c in cases if corpus_set(c) == "heldout" and "(as-written)" in c.origin]
    assert parts == {"tuned", "untuned", "heldout", "heldout2"} and len(written) >= 100
    # MCP's `inputSchema` is read as the parameters (the loader and the validator agree)
    assert any("inputSchema" in c.tool for c in written)


def test_the_second_held_out_set_loads_as_its_own_part(cases):
    written = [c for c in cases if corpus_set(c) == "heldout2" and "(as-written)" in c.origin]
    specs = {c.origin.split(" call ")[0] for c in written}
    assert len(written) >= 100 and len(specs) >= 45
    assert all(c.origin.startswith("specs_heldout2[") for c in written)
    # every call's arguments are those written in the file, in all three variants
    variants = [c for c in cases if corpus_set(c) == "heldout2"]
    assert len(variants) == 3 * len(written)
    # the styles it was written in: OpenAI (strict too), MCP with $defs, Anthropic, BFCL dict
    tools = [c.tool for c in written]
    assert any(t.get("function", {}).get("strict") for t in tools)
    assert any("$defs" in t.get("inputSchema", {}) for t in tools)
    assert any("input_schema" in t for t in tools)
    assert any(c.parameters.get("type") == "dict" for c in written)
    # no tool name of an earlier part is reused: the set is new specs, not copies
    earlier = {c.call["name"] for c in cases if corpus_set(c) != "heldout2"}
    assert not {c.call["name"] for c in written} & earlier


def test_no_false_positives_on_gold_calls(figures):
    assert figures.false_positives == []


def test_all_three_kinds_for_nearly_every_call(figures):
    assert figures.calls >= 800
    assert figures.coverage >= MIN_ALL_THREE, figures.missing_examples[:10]


def test_negatives_are_what_their_kind_says(figures):
    assert figures.negatives >= 3 * figures.all_three
    assert figures.wrong_rate <= MAX_WRONG, figures.wrong[:10]


def test_logical_errors_use_many_certain_changes(figures):
    subkinds = {sub for kind, sub in figures.subkinds if kind == "logical_error"}
    assert {"swapped_arguments", "off_by_one", "shifted_date", "other_enum_member",
            "other_entity", "dropped_optional", "set_optional", "flipped_boolean"} <= subkinds


# ---- the checker can fail ---------------------------------------------------------------

def _case(origin_part: str) -> Case:
    return next(c for c in load_cases() if origin_part in c.origin)


def _negative(case: Case, kind: str, subkind: str, arguments: dict, path: str) -> Negative:
    return Negative(kind, subkind, {"name": case.call["name"], "arguments": arguments}, path,
                    None, None, [], True)


def test_checker_rejects_a_dropped_argument_equal_to_the_prose_default():
    case = _case("specs_apps[0] call 2 (as-written)")      # precision 2, "[default: 2]"
    arguments = copy.deepcopy(case.call["arguments"])
    del arguments["precision"]
    why = check(_negative(case, "logical_error", "dropped_optional", arguments,
                          "arguments.precision"), case)
    assert why is not None and "stated default" in why


def test_checker_rejects_a_value_that_says_the_same():
    case = _case("specs_apps[1] call 0 (as-written)")      # file_format "csv"
    arguments = dict(case.call["arguments"], file_format="CSV")
    why = check(_negative(case, "logical_error", "other_enum_member", arguments,
                          "arguments.file_format"), case)
    assert why is not None and "says the same" in why


def test_checker_rejects_a_swap_of_symmetric_arguments_and_values_off_the_list():
    case = _case("specs_apps[8] call 0 (as-written)")      # rectangle length x width
    arguments = dict(case.call["arguments"], length=4, width=12.5)
    assert "symmetric" in check(_negative(case, "logical_error", "swapped_arguments", arguments,
                                          "arguments.length"), case)
    case = _case("specs_apps[5] call 1 (as-written)")      # pollutant "o3"
    arguments = dict(case.call["arguments"], pollutant="o4")
    assert "not one of the listed" in check(_negative(case, "logical_error", "shifted_id",
                                                      arguments, "arguments.pollutant"), case)


def test_checker_rejects_type_and_key_negatives_that_are_not():
    case = _case("specs_apps[0] call 0 (as-written)")
    arguments = dict(case.call["arguments"], value=41)        # an integer is a number
    assert "allows" in check(_negative(case, "type_error", "integer_for_number", arguments,
                                       "arguments.value"), case)
    arguments = dict(case.call["arguments"], to_unit="km")    # a declared key, changed value
    assert check(_negative(case, "hallucinated_key", "synonym", arguments,
                           "arguments.to_unit"), case) is not None


def test_cosmetic_and_undefaulted_booleans_are_not_flipped():
    case = _case("specs_apps[1] call 1 (as-written)")      # landscape: cosmetic
    for seed in range(30):
        report = mutate_report(case.call, case.tool, seed, kinds=["logical_error"])
        negative = report.get("logical_error")
        assert negative is not None and negative.path != "arguments.landscape"
        assert check(negative, case) is None
