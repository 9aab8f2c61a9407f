"""Throughput of `mutators`: validations/s and mutations/s on one core, against jsonschema
(Draft 2020-12) and fastjsonschema when installed.

    .venv/bin/python benchmarks/bench_mutators.py [--seconds 1.0]

The target is >= 50,000 validations/s per core on a typical 5-8 property schema. Rates are
calls per CPU-second of the benchmark thread (robust on a shared machine), single-threaded,
and include what a caller pays: `validate(call, tool)` unwraps the tool
spec, finds the cached compiled schema and renders error messages. The reference validators
get the bare `parameters` schema, made strict the same way (closed objects), and are
compiled once outside the timed loop; jsonschema "errors" collects every error
(`iter_errors`), as `validate` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mutators import KINDS, mutate_report, validate  # noqa: E402

TYPICAL = {"type": "function", "function": {
    "name": "create_ticket", "description": "Open a support ticket for a customer.",
    "parameters": {
        "type": "object",
        "properties": {
            "customer_id": {"type": "string", "pattern": "^C-[0-9]{4}$"},
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "priority": {"type": "string", "enum": ["low", "medium", "high"]},
            "due_date": {"type": "string", "format": "date"},
            "assignee_id": {"type": "integer", "minimum": 1},
            "notify": {"type": "boolean", "default": True},
        },
        "required": ["customer_id", "title"],
        "additionalProperties": False,
    }}}
TYPICAL_CALLS = {
    "valid": {"customer_id": "C-1001", "title": "Login fails", "priority": "high",
              "due_date": "2024-05-01", "assignee_id": 7, "notify": True},
    "1 error": {"customer_id": "C-1001", "title": "Login fails", "priority": "high",
                "due_date": "2024-05-01", "assignee_id": "7", "notify": True},
    "3 errors": {"user_id": "C-1001", "title": "Login fails", "priority": "urgent",
                 "due_date": "2024-05-01", "assignee_id": 7, "notify": True},
}

NESTED = {"type": "function", "function": {
    "name": "place_order", "description": "Place an order with line items.",
    "parameters": {
        "type": "object",
        "properties": {
            "customer_id": {"type": "string"},
            "items": {"type": "array", "minItems": 1, "items": {
                "type": "object", "properties": {
                    "sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
                    "options": {"type": "object", "properties": {
                        "color": {"type": "string", "enum": ["red", "blue"]},
                        "gift": {"type": "boolean"}}, "additionalProperties": False}},
                "required": ["sku", "qty"], "additionalProperties": False}},
            "shipping": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
        },
        "required": ["customer_id", "items"],
        "additionalProperties": False,
        "$defs": {"Address": {"type": "object", "properties": {
            "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city"], "additionalProperties": False}},
    }}}
NESTED_CALLS = {
    "valid": {"customer_id": "C-1001", "shipping": {"city": "Berlin", "zip": "10115"},
              "items": [{"sku": "A-1", "qty": 2, "options": {"color": "red", "gift": False}},
                        {"sku": "B-2", "qty": 1}]},
    "1 error": {"customer_id": "C-1001", "shipping": {"city": "Berlin", "zip": "10115"},
                "items": [{"sku": "A-1", "qty": 2, "options": {"color": "red", "gift": "no"}},
                          {"sku": "B-2", "qty": 1}]},
}

# The keywords read since issue 14 (if/then/else, dependentRequired, contains/maxContains,
# propertyNames, unevaluatedProperties): what a spec that uses them costs.
CONDITIONAL = {"type": "function", "function": {
    "name": "schedule_delivery", "description": "Deliver by courier or hold for pickup.",
    "parameters": {
        "type": "object",
        "properties": {
            "method": {"enum": ["pickup", "courier"]},
            "address": {"type": "string", "minLength": 1},
            "store_id": {"type": "string", "pattern": "^S-[0-9]{3}$"},
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                      "contains": {"const": "gift-wrap"}, "minContains": 0, "maxContains": 1},
            "notes": {"type": "string"},
        },
        "required": ["method", "items"],
        "if": {"properties": {"method": {"const": "courier"}}},
        "then": {"required": ["address"]},
        "else": {"required": ["store_id"]},
        "dependentRequired": {"notes": ["address"]},
        "propertyNames": {"pattern": "^[a-z_]+$"},
        "unevaluatedProperties": False,
    }}}
CONDITIONAL_CALLS = {
    "valid": {"method": "courier", "address": "1 Main St", "items": ["book", "gift-wrap"]},
    "1 error": {"method": "pickup", "items": ["book"], "notes": "ring twice",
                "store_id": "S-001"},
}


def rate(function: Callable[[], Any], seconds: float) -> float:
    """Calls per CPU-second of `function` (this thread's CPU time, so a machine shared with
    other jobs still measures what one core does), measured for about `seconds`."""
    calls, batch = 0, 64
    function()  # warm the caches (compiled schema, memoised policies)
    start = time.thread_time()
    while True:
        for _ in range(batch):
            function()
        calls += batch
        elapsed = time.thread_time() - start
        if elapsed >= seconds:
            return calls / elapsed
        batch = min(batch * 2, 8192)


def reference_validators(parameters: dict) -> dict[str, Callable[[dict], Any]]:
    """jsonschema / fastjsonschema on the same schema (only those installed)."""
    found: dict[str, Callable[[dict], Any]] = {}
    try:
        import jsonschema

        validator = jsonschema.Draft202012Validator(
            parameters, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        found["jsonschema (is_valid)"] = validator.is_valid
        found["jsonschema (all errors)"] = lambda args: list(validator.iter_errors(args))
    except ImportError:
        pass
    try:
        import fastjsonschema

        compiled = fastjsonschema.compile(parameters)

        def fast(args: dict) -> bool:
            try:
                compiled(args)
                return True
            except fastjsonschema.JsonSchemaException:
                return False

        found["fastjsonschema"] = fast
    except ImportError:
        pass
    return found


def bench_validation(tool: dict, calls: dict[str, dict], seconds: float) -> list[tuple]:
    name = tool["function"]["name"]
    rows = []
    references = reference_validators(tool["function"]["parameters"])
    for label, arguments in calls.items():
        call = {"name": name, "arguments": arguments}
        errors = validate(call, tool)
        rows.append((f"{name}: {label}", "mutators.validate", rate(lambda: validate(call, tool), seconds),
                     len(errors)))
        for ref_name, check in references.items():
            rows.append((f"{name}: {label}", ref_name, rate(lambda: check(arguments), seconds), ""))
    return rows


def bench_mutation(tool: dict, arguments: dict, seconds: float) -> list[tuple]:
    call = {"name": tool["function"]["name"], "arguments": arguments}
    others = [TYPICAL, NESTED]
    seed = iter(range(10**9))
    per_second = rate(lambda: mutate_report(call, tool, next(seed), other_tools=others), seconds)
    produced = len(mutate_report(call, tool, 0, other_tools=others).negatives)
    return [(f"{call['name']}: mutate_report ({len(KINDS)} kinds)", "mutators.mutate",
             per_second, f"{produced} negatives/call")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()
    rows = bench_validation(TYPICAL, TYPICAL_CALLS, args.seconds)
    rows += bench_validation(NESTED, NESTED_CALLS, args.seconds)
    rows += bench_validation(CONDITIONAL, CONDITIONAL_CALLS, args.seconds)
    rows += bench_mutation(TYPICAL, TYPICAL_CALLS["valid"], args.seconds)
    rows += bench_mutation(NESTED, NESTED_CALLS["valid"], args.seconds)
    print(f"{'case':<40} {'implementation':<26} {'calls/s':>12}  note")
    print("-" * 92)
    for case, implementation, per_second, note in rows:
        note = f"{note} errors" if isinstance(note, int) else note
        print(f"{case:<40} {implementation:<26} {per_second:>12,.0f}  {note}")
    typical = [r for r in rows if r[1] == "mutators.validate" and r[0].startswith("create_ticket")]
    worst = min(r[2] for r in typical)
    print(f"\ntypical 6-property schema, slowest case: {worst:,.0f} validations/s per core "
          f"(target 50,000: {'met' if worst >= 50_000 else 'NOT met'})")


if __name__ == "__main__":
    main()
