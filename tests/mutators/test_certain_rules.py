"""Rules that give a logical error without an environment more certain changes to pick from:
a bare default word that is one of the listed values, and entity classes of codes, teams,
drugs and packages (each only where the value or the argument's name says the class)."""

from __future__ import annotations

from mutators import mutate_report
from mutators.entities import siblings
from tests.mutators.fake_crm_env import function_tool


def _logical_subkinds(call: dict, tool: dict, seeds: int = 40) -> set[tuple[str, str, str]]:
    found = set()
    for seed in range(seeds):
        negative = mutate_report(call, tool, seed, kinds=["logical_error"]).get("logical_error")
        if negative is not None:
            found.add((negative.subkind, negative.path, repr(negative.mutated)))
    return found


def test_a_bare_default_word_counts_when_it_is_a_listed_value():
    tool = function_tool("check_interaction", {
        "drug_1": {"type": "string"}, "drug_2": {"type": "string"},
        "severity": {"type": "string", "enum": ["minor", "moderate", "major"],
                     "description": "Lowest severity reported; default minor."},
        "category": {"type": "string",
                     "description": "Category: standard, reduced, zero. Default standard."},
        "mode": {"type": "string", "description": "Matching mode; default behaviour."},
    }, ["drug_1", "drug_2"], additionalProperties=False)
    call = {"name": "check_interaction", "arguments": {"drug_1": "sertraline",
                                                       "drug_2": "tramadol"}}
    found = _logical_subkinds(call, tool)
    set_values = {(path, value) for subkind, path, value in found if subkind == "set_optional"}
    assert ("arguments.severity", "'moderate'") in set_values
    assert ("arguments.category", "'reduced'") in set_values
    # "default behaviour" names no listed value: `mode` has no known default, so it is not set
    assert not any(path == "arguments.mode" for path, _ in set_values)
    # and the restated default is never a change
    assert ("arguments.severity", "'minor'") not in set_values


def test_codes_teams_drugs_and_packages_have_siblings_of_their_own_class():
    assert "EGLL" in siblings("KJFK") and "JFK" not in siblings("KJFK")
    assert siblings("JFK", "code") == []                  # three letters: only when the name
    assert "LHR" in siblings("JFK", "origin_airport")     # says it is an airport
    team = siblings("Lakers", "team")
    assert "Celtics" in team and "Los Angeles Lakers" not in team   # the same team, longer
    assert "ibuprofen" in siblings("warfarin")
    assert "acetaminophen" not in siblings("paracetamol")           # one drug, two names
    assert "pandas" in siblings("numpy", "package_name")
    # "requests" is a package and a common word: only under a package-like name
    assert siblings("requests", "metric") == [] and siblings("numpy", "query") == []


def test_a_single_code_argument_gets_another_entity():
    tool = function_tool("airport_info", {
        "code": {"type": "string", "description": "IATA (3 letters) or ICAO (4 letters) code."},
    }, ["code"], additionalProperties=False)
    found = _logical_subkinds({"name": "airport_info", "arguments": {"code": "KJFK"}}, tool)
    assert found and {subkind for subkind, _, _ in found} == {"other_entity"}
    assert all(len(value.strip("'")) == 4 for _, _, value in found)


def test_display_switches_are_left_alone():
    tool = function_tool("post_message", {
        "channel": {"type": "string"}, "text": {"type": "string"},
        "mrkdwn": {"type": "boolean", "description": "Format text as markdown. Defaults to true."},
        "unfurl_links": {"type": "boolean", "default": True},
        "refresh": {"type": "boolean", "default": True},
    }, ["channel", "text"], additionalProperties=False)
    call = {"name": "post_message", "arguments": {"channel": "#ops", "text": "Deployed v2",
                                                  "unfurl_links": False}}
    paths = {path for _, path, _ in _logical_subkinds(call, tool)}
    assert paths and not paths & {"arguments.mrkdwn", "arguments.unfurl_links",
                                  "arguments.refresh"}


def test_a_list_the_sentence_goes_on_about_is_a_listed_set():
    tool = function_tool("forecast", {
        "q": {"type": "string", "description": "City name and country code, e.g. 'London,uk'."},
        "units": {"type": "string", "description": "standard, metric and imperial units are "
                  "available. If you do not use the units parameter, standard units will be "
                  "applied by default."},
        "lang": {"type": "string"},
    }, ["q"], additionalProperties=False)
    call = {"name": "forecast", "arguments": {"q": "Austin,TX,US", "units": "metric",
                                              "lang": "es"}}
    found = _logical_subkinds(call, tool, seeds=60)
    units = {value for _, path, value in found if path == "arguments.units"}
    assert units and units <= {"'standard'", "'imperial'"}      # never the city or 'es'
    assert not any(sub == "swapped_arguments" and "units" in path for sub, path, _ in found)


def _set_optional_values(given: tuple[str, str], absent: tuple[str, str]) -> set[str]:
    """The values set_optional gives the absent string argument `absent` (name, description)
    of a tool whose one required argument is `given` (name, value)."""
    tool = function_tool("tool", {given[0]: {"type": "string"},
                                  absent[0]: {"type": "string", "description": absent[1]}},
                         [given[0]], additionalProperties=False)
    found = _logical_subkinds({"name": "tool", "arguments": {given[0]: given[1]}}, tool)
    return {value for sub, path, value in found if sub == "set_optional"}


def test_an_absent_argument_is_set_to_another_entity_than_its_default():
    values = _set_optional_values(("word", "serendipity"),
                                  ("language", "Language of the entry. Defaults to 'English'."))
    assert values and "'English'" not in values and "'French'" in values


def test_a_listed_word_default_is_that_member_not_null():
    values = _set_optional_values(("title", "Pay rent"),
                                  ("repeat", "none, daily, weekly or monthly (default none)"))
    assert values and values <= {"'daily'", "'weekly'", "'monthly'"}
