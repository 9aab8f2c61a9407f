"""The JSON Schema vocabulary `schema.normalise` understands, and warnings for keywords in a
spec that would change validation but are not read: unsupported ones (`$dynamicRef`) and
misspelt ones (`maxlength`, `additional_properties`, `MinItems`: keywords are case-sensitive,
so JSON Schema ignores them and so does this validator, but the author meant a constraint).

Any other unknown key is an annotation (`x-order`, `example`, `optional`) and passes silently,
as JSON Schema says.
"""

from __future__ import annotations

from typing import Any

# Keywords that constrain values; each is implemented by schema.py + compile.py.
VALIDATION_KEYWORDS = frozenset("""
    type enum const multipleOf maximum exclusiveMaximum minimum exclusiveMinimum maxLength
    minLength pattern format maxItems minItems uniqueItems maxContains minContains contains
    items prefixItems additionalItems unevaluatedItems maxProperties minProperties required
    properties patternProperties additionalProperties propertyNames unevaluatedProperties
    dependentRequired dependentSchemas dependencies allOf anyOf oneOf not if then else
    $ref $defs definitions nullable x-nullable
""".split())
# Keywords of JSON Schema 2020-12 that would constrain values but are not implemented: a
# schema using them is validated as if they were absent, with a warning.
UNSUPPORTED_KEYWORDS = {
    "$dynamicRef": "dynamic references are not resolved; accepting any value there",
    "$recursiveRef": "recursive references (2019-09) are not resolved; accepting any value there",
}
_FOLDED = {keyword.lower().replace("_", "").replace("-", ""): keyword
           for keyword in VALIDATION_KEYWORDS}


def keyword_warnings(raw: dict[Any, Any]) -> list[str]:
    """Warnings for the keys of one schema object (not its subschemas)."""
    warnings = []
    for key in raw:
        if key in VALIDATION_KEYWORDS or not isinstance(key, str):
            continue
        if key in UNSUPPORTED_KEYWORDS:
            warnings.append(f"`{key}` is not supported: {UNSUPPORTED_KEYWORDS[key]}")
            continue
        meant = _FOLDED.get(key.lower().replace("_", "").replace("-", ""))
        if meant is not None:
            warnings.append(f"`{key}` is not a JSON Schema keyword (keywords are "
                            f"case-sensitive: `{meant}`?); ignored")
    if ("then" in raw or "else" in raw) and "if" not in raw:
        warnings.append("`then`/`else` without `if` are ignored")
    return warnings
