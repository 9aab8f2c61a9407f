"""Differential test: the compiled validator against jsonschema (Draft 2020-12, with its
format checker) on random schemas and random instances, not only calls and their negatives.

Schemas use allOf, anyOf, oneOf, not, const, enum, uniqueItems, multipleOf, if/then/else,
dependentRequired, dependentSchemas, contains/minContains/maxContains, propertyNames,
unevaluatedProperties and unevaluatedItems; `schema_generator.py` lists the project's
intentional deviations that the generated schemas avoid. Valid/invalid must agree.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutators import compile_schema
from mutators.compile import clear_cache
from mutators.safe_regex import new_call
from tests.mutators.schema_generator import Draws, instance, schema

# MUTATORS_EXAMPLES=5000 for a longer hunt; the default keeps this test to a few seconds.
EXAMPLES = int(os.environ.get("MUTATORS_EXAMPLES", "200"))
INSTANCES_PER_SCHEMA = 6
KEYWORDS = ("allOf", "anyOf", "oneOf", "not", "const", "enum", "uniqueItems", "multipleOf",
            "then", "else", "dependentRequired", "dependentSchemas", "contains", "minContains",
            "maxContains", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
            "format", "pattern", "additionalProperties", "required", "type")


def reference(raw, check_schema: bool = False) -> jsonschema.Draft202012Validator:
    """jsonschema's validator for `raw`; `check_schema` also validates `raw` against the
    metaschema (40 ms a schema: done for the fixed sample, which shows the generator sound)."""
    if check_schema:
        jsonschema.Draft202012Validator.check_schema(raw)
    return jsonschema.Draft202012Validator(
        raw, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def ours(raw, value) -> bool:
    compiled = compile_schema(raw)
    assert compiled.warnings == (), compiled.warnings  # nothing misread or ignored
    if compiled.time_budgeted:
        new_call()
    return compiled.check(value) is None


def assert_agree(validator, raw, value) -> bool:
    expected = validator.is_valid(value)
    assert ours(raw, value) == expected, (raw, value, expected)
    return expected


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_valid_and_invalid_agree_with_jsonschema(data):
    d = Draws(data=data)
    raw = schema(d)
    validator = reference(raw)
    for _ in range(INSTANCES_PER_SCHEMA):
        assert_agree(validator, raw, instance(d, raw))


def failing_keywords(validator, value) -> set[str]:
    """Keywords on the schema paths of jsonschema's errors for `value` (allOf, then, ...
    included), nested (anyOf...) errors too."""
    found, stack = set(), list(validator.iter_errors(value))
    while stack:
        error = stack.pop()
        found.update(part for part in error.absolute_schema_path if isinstance(part, str))
        if isinstance(error.validator, str):  # minContains/maxContains sit under `contains`
            found.add(error.validator)
        stack.extend(error.context or ())
    return found


def test_generated_cases_exercise_every_keyword():
    """The generator is not vacuous: over a fixed sample, both verdicts are common and each
    keyword is the reason some instance fails (so the agreement above covers it)."""
    rng, verdicts, failed_by = random.Random(7), Counter(), Counter()
    clear_cache()
    for _ in range(400):
        d = Draws(rng=rng)
        raw = schema(d)
        validator = reference(raw, check_schema=True)
        for _ in range(INSTANCES_PER_SCHEMA):
            value = instance(d, raw)
            verdicts[assert_agree(validator, raw, value)] += 1
            failed_by.update(failing_keywords(validator, value))
    total = verdicts[True] + verdicts[False]
    assert 0.2 < verdicts[True] / total < 0.8, verdicts
    print(sorted(failed_by.items()))
    missing = [keyword for keyword in KEYWORDS if failed_by[keyword] < 3]
    assert not missing, (missing, failed_by)
