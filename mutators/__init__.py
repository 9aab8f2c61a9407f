"""Strict JSON-Schema validation of tool calls and typed hard negatives.

    from mutators import validate, mutate, Negative
    errors = validate(call, tool)                  # [] when the call is valid
    negatives = mutate(call, tool, seed=0)         # one per kind when the call allows it
    report = mutate_report(call, tool, seed=0)     # + report.impossible: {kind: Rejected}

Pure: a call and a tool spec in, negatives out; an environment, when used, is passed in
(duck-typed) and never imported. See `validate.py` for the validation rules and
`mutate.py` for how negatives are chosen.
"""

from mutators.compile import clear_cache, compile_schema
from mutators.mutate import SPECS, mutate, mutate_report
from mutators.negative import (ALL_KINDS, EXTRA_KINDS, KINDS, Candidate, KindSpec,
                               MutationContext, MutationReport, Negative, Rejected)
from mutators.validate import (ValidationError, coerce_call, schema_warnings, validate,
                               validate_detailed)

__all__ = [
    "validate", "validate_detailed", "ValidationError", "coerce_call", "schema_warnings",
    "mutate", "mutate_report", "Negative", "MutationReport", "Rejected", "KINDS",
    "EXTRA_KINDS", "ALL_KINDS", "SPECS", "Candidate", "KindSpec", "MutationContext",
    "compile_schema", "clear_cache",
]
