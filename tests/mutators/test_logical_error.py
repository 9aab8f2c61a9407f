"""logical_error negatives without an environment: schema-valid, different, plausible."""

from __future__ import annotations

import pytest

from mutators import mutate_report, validate
from mutators.jsonvalues import json_equal
from mutators.value_shifts import number_steps, shift_date, shift_digits, truncate_name
from tests.mutators.fake_crm_env import CREATE_TICKET, LIST_TICKETS, function_tool


def logical(call, tool, seed=0, **kwargs):
    report = mutate_report(call, tool, seed, kinds=["logical_error"], **kwargs)
    return report.get("logical_error"), report.impossible.get("logical_error")


def test_shift_helpers():
    assert shift_date("2024-02-28", 1) == "2024-02-29"
    assert shift_date("2024-03-01T10:00:00Z", -1) == "2024-02-29T10:00:00Z"
    assert shift_date("not a date", 1) is None
    assert shift_digits("C-1009", 1) == "C-1010"
    assert shift_digits("T-007", -1) == "T-006"
    assert shift_digits("T-0", -1) is None


def test_dates_shift_in_their_own_format():
    assert shift_date("03/15/2024", 1) == "03/16/2024"
    assert shift_date("15.03.2024", -1) == "14.03.2024"
    assert shift_date("2024/12/31", 1) == "2025/01/01"
    assert shift_date("March 31, 2024", 1) == "April 1, 2024"
    assert shift_date("1 Mar 2024", -1) == "29 Feb 2024"
    assert shift_date("2024-3-5", 1) == "2024-3-6"
    assert shift_date("13/45/2024", 1) is None


def test_number_steps_and_truncation_keep_meaning_apart():
    assert number_steps(7, True) == [8, 6]
    assert 0.55 in number_steps(0.5, False) and 0.45 in number_steps(0.5, False)
    assert truncate_name("San Francisco, CA") == "San"
    assert truncate_name("best pizza in Rome") == "best pizza"
    assert truncate_name("Boston, MA") is None      # the first part alone names the same city
    assert truncate_name("Tesla Inc") is None       # only a company suffix would go
    assert truncate_name("5 kg") is None



def test_a_subnormal_number_gets_unit_steps_and_the_kind_still_works():
    # 10% of 5e-324 underflowed to 0 and math.log10(0) raised: logical_error failed outright
    assert number_steps(5e-324, False) == [1.0, -1.0]
    tool = function_tool("fit", {"tolerance": {"type": "number"}, "rate": {"type": "number"}},
                         ["tolerance", "rate"])
    call = {"name": "fit", "arguments": {"tolerance": 5e-324, "rate": 0.5}}
    for seed in range(6):
        report = mutate_report(call, tool, seed, kinds=["logical_error"])
        assert report.get("logical_error") is not None, report.impossible

def test_every_seed_is_valid_and_different():
    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login",
                                                   "priority": "high", "due_date": "2024-05-01",
                                                   "notify": True}}
    subkinds = set()
    for seed in range(40):
        negative, _ = logical(call, CREATE_TICKET, seed)
        assert validate(negative.call, CREATE_TICKET) == []
        assert negative.schema_valid and negative.errors == []
        assert not json_equal(negative.call, call)
        assert negative.outcome_changed is None  # no environment: not executed
        subkinds.add(negative.subkind)
    assert {"other_enum_member", "shifted_date", "swapped_arguments", "shifted_id"} <= subkinds
    # no default is stated for the optional arguments: dropping one or flipping `notify`
    # might leave the meaning as it was, so neither is proposed without an environment
    assert not subkinds & {"dropped_optional", "flipped_boolean"}


def test_optional_arguments_count_only_against_a_stated_default():
    tool = function_tool("convert", {
        "value": {"type": "number"},
        "unit": {"type": "string", "description": "Target unit. Defaults to 'cm'."},
        "precision": {"type": "integer", "description": "Decimals, default is 2"},
        "round_up": {"type": "boolean", "description": "Round up. Default: false"},
        "verbose": {"type": "boolean", "description": "Optional. Verbose output."},
    }, ["value"], additionalProperties=False)
    same = {"name": "convert", "arguments": {"value": 3.5, "unit": "CM", "precision": 2}}
    differs = {"name": "convert", "arguments": {"value": 3.5, "unit": "in", "verbose": True}}
    seen: dict[str, set] = {"same": set(), "differs": set()}
    for seed in range(60):
        for name, call in (("same", same), ("differs", differs)):
            negative, _ = logical(call, tool, seed)
            seen[name].add((negative.subkind, negative.path))
            assert not (negative.subkind == "flipped_boolean" and negative.path.endswith("verbose"))
    assert not {s for s in seen["same"] if s[0] == "dropped_optional"}   # equal to the defaults
    assert ("dropped_optional", "arguments.unit") in seen["differs"]
    assert ("set_optional", "arguments.round_up") in seen["same"]        # away from false
    assert ("set_optional", "arguments.precision") in seen["differs"]


def test_prose_enums_and_entities_give_certain_changes():
    tool = function_tool("weather", {
        "city": {"type": "string", "description": "City name, e.g. 'London'"},
        "units": {"type": "string", "description": "One of 'metric', 'imperial'."},
        "num1": {"type": "integer"}, "num2": {"type": "integer"},
    }, ["city", "units", "num1", "num2"], additionalProperties=False)
    call = {"name": "weather", "arguments": {"city": "Paris", "units": "metric", "num1": 4,
                                             "num2": 6}}
    found, paths = {}, set()
    for seed in range(60):
        negative, _ = logical(call, tool, seed)
        found.setdefault(negative.subkind, set()).add(str(negative.mutated))
        paths.add((negative.subkind, negative.path))
    assert found["other_enum_member"] == {"imperial"}
    assert {"London", "Madrid"} <= found["other_entity"]
    # num1/num2 may be symmetric (gcd, sum): never swapped; city/units may be
    assert ("swapped_arguments", "arguments.num1") not in paths


def test_respects_bounds_patterns_and_defaults():
    call = {"name": "list_tickets", "arguments": {"customer_id": "C-1001", "limit": 10}}
    for seed in range(30):
        negative, _ = logical(call, LIST_TICKETS, seed)
        assert validate(negative.call, LIST_TICKETS) == []
        # limit == default 10: dropping it would not change the meaning
        assert negative.subkind != "dropped_optional"
    edge = {"name": "list_tickets", "arguments": {"customer_id": "C-1001", "limit": 50}}
    for seed in range(10):
        negative, _ = logical(edge, LIST_TICKETS, seed)
        assert negative.call["arguments"].get("limit", 0) <= 50


def test_dropped_item_and_nested_values():
    tool = function_tool("tag", {"ids": {"type": "array", "items": {"type": "integer"},
                                         "minItems": 1}}, ["ids"], additionalProperties=False)
    subkinds = {logical({"name": "tag", "arguments": {"ids": [3, 4]}}, tool, s)[0].subkind
                for s in range(20)}
    assert {"dropped_item", "off_by_one"} <= subkinds


def test_impossible_without_arguments():
    negative, reason = logical({"name": "ping", "arguments": {}}, {"name": "ping"})
    assert negative is None and "no arguments" in reason


def test_impossible_when_nothing_valid_can_change():
    tool = function_tool("f", {"mode": {"const": "fixed"}}, ["mode"])
    negative, reason = logical({"name": "f", "arguments": {"mode": "fixed"}}, tool)
    assert negative is None and "no schema-valid change" in reason


def test_custom_operator_is_injectable():
    from mutators import Candidate

    def negated_title(ctx):
        title = ctx.arguments.get("title")
        if isinstance(title, str):
            yield Candidate("negated", ("title",), title, "No " + title,
                            ctx.edited(lambda a: a.__setitem__("title", "No " + a["title"])))

    def uppercase_title(ctx):
        title = ctx.arguments.get("title")
        if isinstance(title, str):
            yield Candidate("uppercased", ("title",), title, title.upper(),
                            ctx.edited(lambda a: a.__setitem__("title", a["title"].upper())))

    call = {"name": "create_ticket", "arguments": {"customer_id": "C-1", "title": "Login"}}
    negative, _ = logical(call, CREATE_TICKET, operators={"logical_error": [negated_title]})
    assert negative.subkind == "negated" and negative.call["arguments"]["title"] == "No Login"
    # a case change says the same thing: not a logical error without an environment
    negative, reason = logical(call, CREATE_TICKET, operators={"logical_error": [uppercase_title]})
    assert negative is None and "certainly changes the meaning" in reason


def test_calculating_tools_get_no_number_swaps():
    tool = function_tool("calculate_triangle_area", {
        "base": {"type": "integer"}, "height": {"type": "integer"},
    }, ["base", "height"], additionalProperties=False)
    call = {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}
    subkinds = {logical(call, tool, seed)[0].subkind for seed in range(30)}
    assert "swapped_arguments" not in subkinds and "off_by_one" in subkinds
    # strings of a non-calculating tool still swap (origin / destination)
    flight = function_tool("book_flight", {"origin": {"type": "string"},
                                           "destination": {"type": "string"}},
                           ["origin", "destination"], additionalProperties=False)
    swapped = [logical({"name": "book_flight", "arguments": {"origin": "SFO", "destination":
                                                             "JFK"}}, flight, seed)[0]
               for seed in range(30)]
    assert any(n.subkind == "swapped_arguments" for n in swapped)


def test_values_listed_in_prose_only_become_other_listed_values():
    tool = function_tool("air_quality", {
        "city": {"type": "string"},
        "pollutant": {"type": "string", "description": "Pollutant: pm25, pm10, o3 or no2."},
    }, ["city", "pollutant"], additionalProperties=False)
    call = {"name": "air_quality", "arguments": {"city": "Delhi", "pollutant": "pm25"}}
    for seed in range(40):
        negative, _ = logical(call, tool, seed)
        mutated = negative.call["arguments"]["pollutant"]
        assert mutated in ("pm25", "pm10", "o3", "no2")   # never "pm26", never a swapped city


def test_parent_path_only_for_sure_paths_and_no_cut_quantities():
    from mutators.value_shifts import parent_path
    assert parent_path("/etc/hosts") == "/etc" and parent_path("src/main.py") == "src"
    assert parent_path("https://example.com/a/b") == "https://example.com/a"
    assert parent_path("g/cm3") is None and parent_path("11/06/1990") is None
    assert truncate_name("10:00 AM") is None
    assert number_steps(2.2945, False)[:2] == [3.2945, 1.2945]  # the value's own precision
    assert number_steps(8.854e-12, False)[0] == pytest.approx(9.74e-12)  # small: +-10% first


def test_compact_dates_shift_as_dates():
    assert shift_date("20240131", 1) == "20240201"   # not "20240132"
    assert shift_date("12345678", 1) is None          # not a date: left to shift_digits
