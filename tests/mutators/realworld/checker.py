"""An independent check that a negative is what its kind says, on the real-world corpus.

Independent of the mutators' reasoning: it reads the raw spec itself (its own small reading
of type names, `$ref`s and closed objects), takes stated defaults, cosmetic switches and
symmetric arguments from the corpus's hand-written `truth`, and judges meaning with its own
rules. It uses the project's validator only for the verdict "valid / which error at which
path", which is the contract the kinds promise.

Rules:
- type_error: the validator reports a `type` error at the negative's path; the value there
  has a JSON type the raw schema does not allow; nothing else changed.
- hallucinated_key: the validator reports `unknown_key` at the path; the raw schema of that
  object declares properties (closed) and not that key; nothing else changed but the key
  (renamed or added).
- logical_error: the call validates and differs from the original, and the change is not
  meaning-preserving:
  * a dropped or added optional argument counts only when the spec states a default and the
    value differs from it (no stated default, or an unreadable one: not certainly wrong);
  * not the same text but for case, whitespace or `-`/`_`; not another name of the same
    thing (truth `same`: "DE" / "Germany", "asc" / "ascending", "auto" / what it picks); not an equal number in another
    type (1, 1.0, "1"); not the same date in another format;
  * not a reorder of an array, nor the loss of an item that occurs twice;
  * no change at all of a cosmetic argument (truth `cosmetic`: a display switch, a timeout,
    retries), nor a flip of an optional boolean without stated default;
  * not a name cut to its first comma part or stripped of a company suffix;
  * not a swap of two arguments in symmetric roles;
  * a value the description lists among the allowed ones (truth `enums`) only becomes
    another listed value, never one outside the stated set (also not by a swap);
  * and the subkind's own promise (off_by_one moves a number by 1, shifted_date moves a
    date, dropped_optional drops, set_optional adds, swapped_arguments swaps, ...).
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Any

from mutators import validate_detailed
from tests.mutators.realworld.corpus import UNKNOWN, Case

MISSING = object()
_SPELLINGS = {
    "string": "string", "str": "string", "text": "string", "integer": "integer",
    "int": "integer", "long": "integer", "number": "number", "float": "number",
    "double": "number", "boolean": "boolean", "bool": "boolean", "object": "object",
    "dict": "object", "array": "array", "list": "array", "tuple": "array", "null": "null",
    "none": "null",
}
_SUFFIXES = {"inc", "ltd", "corp", "co", "llc", "plc", "gmbh", "ag", "sa", "company"}
_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y", "%d.%m.%Y", "%d-%m-%Y", "%B %d, %Y",
                 "%b %d, %Y", "%d %B %Y", "%d %b %Y", "%Y.%m.%d", "%Y%m%d")


# ---- reading the raw spec -------------------------------------------------------------

def _resolve(schema: Any, root: dict) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = (root.get("$defs") or root.get("definitions") or {}).get(name, {})
    return schema if isinstance(schema, dict) else {}


def raw_at(root: dict, path: tuple) -> dict | None:
    """The raw schema governing the value at `path` (None where the spec says nothing)."""
    schema = _resolve(root, root)
    for part in path:
        if isinstance(part, int):
            items = schema.get("items")
            schema = _resolve(items, root) if isinstance(items, dict) else _item_of_name(
                schema.get("type"), part)
        else:
            properties = schema.get("properties") or {}
            if part in properties:
                schema = _resolve(properties[part], root)
            elif isinstance(schema.get("additionalProperties"), dict):
                schema = _resolve(schema["additionalProperties"], root)
            else:
                return None
    return schema


def _item_of_name(name: Any, index: int) -> dict:
    """The item schema a generic type name states: `List[str]` -> str for every item,
    `Tuple[int, str]` -> int for item 0; {} (anything) otherwise."""
    match = re.fullmatch(r"\s*(list|tuple|array)\[(.+)\]\s*", str(name), re.IGNORECASE)
    if match is None:
        return {}
    arguments = [a.strip() for a in match.group(2).split(",")]
    if match.group(1).lower() != "tuple" or arguments[-1] == "...":
        return {"type": arguments[0]}
    return {"type": arguments[index]} if index < len(arguments) else {}


def _type_names(name: str) -> set[str] | None:
    text = name.strip()
    lower = text.lower()
    if lower in ("any", ""):
        return None
    if lower in _SPELLINGS:
        return {_SPELLINGS[lower]}
    if "|" in text:
        found: set[str] = set()
        for part in text.split("|"):
            names = _type_names(part)
            if names is None:
                return None
            found |= names
        return found
    if lower.endswith("?"):
        inner = _type_names(text[:-1])
        return None if inner is None else inner | {"null"}
    if lower.endswith(")") and " (" in lower:  # ToolBench: "DATE (YYYY-MM-DD)" is a string
        head = lower[: lower.index(" (")]
        return {"string"} if head in ("date", "geopoint", "time", "datetime") else \
            _type_names(text[: text.index(" (")])
    head = lower.split("[", 1)[0]
    if head == "optional":
        inner = _type_names(text[text.index("[") + 1:-1])
        return None if inner is None else inner | {"null"}
    if head in ("list", "tuple"):
        return {"array"}
    if head == "literal":
        return {"string"}
    return None


def allowed_types(schema: dict) -> set[str] | None:
    """JSON types the raw schema allows (None: any)."""
    kind = schema.get("type")
    branches = schema.get("anyOf") or schema.get("oneOf")
    if kind is None and isinstance(branches, list):
        union: set[str] = set()
        for branch in branches:
            found = allowed_types(branch) if isinstance(branch, dict) else None
            if found is None:
                return None
            union |= found
        return union
    if kind is None:
        if "enum" in schema:
            return {_json_type(v) for v in schema["enum"]}
        return {"object"} if "properties" in schema else None
    names: set[str] = set()
    for name in kind if isinstance(kind, list) else [kind]:
        found = _type_names(str(name))
        if found is None:
            return None
        names |= found
    return names | ({"null"} if schema.get("nullable") else set())


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, (list, tuple)) else "object"


def _type_allowed(value: Any, types: set[str] | None) -> bool:
    if types is None:
        return True
    tag = _json_type(value)
    if tag == "integer" and "number" in types:
        return True
    if tag == "number" and "integer" in types and math.isfinite(value) and value == int(value):
        return True
    return tag in types


# ---- meaning --------------------------------------------------------------------------

def _text(value: str) -> str:
    return re.sub(r"[\s_\-]+", " ", value).strip().casefold()


def _as_date(value: str) -> date | None:
    for pattern in _DATE_FORMATS:
        try:
            return datetime.strptime(value.strip(), pattern).date()
        except ValueError:
            continue
    return None


def _date_part(value: Any) -> date | None:
    """The date a string names, also at the start of a date-time ("2024-02-01 10:00")."""
    if not isinstance(value, str):
        return None
    return _as_date(value) or _as_date(value[:10])


def same_meaning(first: Any, second: Any) -> bool:
    if isinstance(first, bool) or isinstance(second, bool):
        words = {True: "true", False: "false"}
        a = words.get(first, first) if isinstance(first, bool) else first
        b = words.get(second, second) if isinstance(second, bool) else second
        return isinstance(a, str) and isinstance(b, str) and _text(a) == _text(b)
    if isinstance(first, (int, float)) or isinstance(second, (int, float)):
        try:
            return float(first) == float(second)
        except (TypeError, ValueError):
            return False
    if isinstance(first, str) and isinstance(second, str):
        if _text(first) == _text(second):
            return True
        a, b = _as_date(first), _as_date(second)
        return a is not None and a == b
    if isinstance(first, list) and isinstance(second, list):
        return len(first) == len(second) and all(map(same_meaning, first, second))
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(same_meaning(first[k], second[k])
                                                     for k in first)
    return first == second


def schema_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += "[]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def stated_default(case: Case, path: tuple) -> Any:
    """The default the spec states for `path` (MISSING when none, UNKNOWN when unreadable)."""
    schema = raw_at(case.parameters, path) or {}
    if "default" in schema:
        return schema["default"]
    return case.truth.defaults.get(schema_path(path), MISSING)


def _is_required(case: Case, path: tuple) -> bool:
    parent = raw_at(case.parameters, path[:-1]) or {}
    return path[-1] in (parent.get("required") or ())


# ---- differences ----------------------------------------------------------------------

def differences(old: Any, new: Any, path: tuple = ()) -> list[tuple[tuple, Any, Any]]:
    """(path, old, new) of every change; arrays of different length compare as wholes."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in list(old) + [k for k in new if k not in old]:
            found += differences(old.get(key, MISSING), new.get(key, MISSING), path + (key,))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, path + (i,))]
    if old is MISSING and new is MISSING:
        return []
    if old is not MISSING and new is not MISSING and _json_type(old) == _json_type(new) \
            and old == new:
        return []
    return [(path, old, new)]


def _errors_at(call: dict, case: Case, reason: str, path: str) -> bool:
    return any(e.reason == reason and e.path == path for e in validate_detailed(call, case.tool))


# ---- the kinds ------------------------------------------------------------------------

def check(negative: Any, case: Case) -> str | None:
    """None when `negative` is what its kind says; otherwise why not."""
    original, mutated = case.call["arguments"], negative.call.get("arguments")
    if negative.call.get("name") != case.call["name"]:
        return "the tool name changed"
    changes = differences(original, mutated)
    if not changes:
        return "nothing changed"
    checker = {"type_error": _type_error, "hallucinated_key": _hallucinated_key,
               "logical_error": _logical_error}.get(negative.kind)
    return checker(negative, case, changes) if checker else None


def _parts(path_text: str) -> tuple:
    parts: list[Any] = []
    for token in re.findall(r"\.([^.\[\]]+)|\[(\d+)\]|\[\"((?:[^\"\\]|\\.)*)\"\]",
                            path_text.removeprefix("arguments")):
        key, index, quoted = token
        parts.append(int(index) if index else (key or quoted))
    return tuple(parts)


def _type_error(negative: Any, case: Case, changes: list) -> str | None:
    path = _parts(negative.path)
    if [c[0] for c in changes] != [path]:
        return f"changed {[schema_path(c[0]) for c in changes]}, not only {negative.path}"
    schema = raw_at(case.parameters, path)
    if schema is not None and _type_allowed(changes[0][2], allowed_types(schema)):
        return f"{changes[0][2]!r} has a type the spec allows at {negative.path}"
    if not _errors_at(negative.call, case, "type", negative.path):
        return f"no type error reported at {negative.path}"
    return None


def _hallucinated_key(negative: Any, case: Case, changes: list) -> str | None:
    path = _parts(negative.path)
    parent = raw_at(case.parameters, path[:-1])
    if parent is None or not parent.get("properties") or parent.get("additionalProperties") \
            not in (None, False):
        return f"the object at {schema_path(path[:-1]) or 'arguments'} is not closed"
    if path[-1] in parent["properties"]:
        return f"`{path[-1]}` is declared"
    added = [c for c in changes if c[1] is MISSING]
    removed = [c for c in changes if c[2] is MISSING]
    if [c[0] for c in added] != [path] or len(changes) > 2 or (
            removed and not same_meaning(removed[0][1], added[0][2])):
        return "changed more than one key"
    if not _errors_at(negative.call, case, "unknown_key", negative.path):
        return f"no unknown_key error reported at {negative.path}"
    return None


def _logical_error(negative: Any, case: Case, changes: list) -> str | None:
    if validate_detailed(negative.call, case.tool):
        return "the mutated call does not validate"
    if len(changes) == 2 and _is_swap(changes):
        return _swap_reason(case, changes)
    reasons = [_change_reason(case, *change) for change in changes]
    if all(reasons):
        return reasons[0]
    return _subkind_reason(negative, changes)


def _is_swap(changes: list) -> bool:
    (_, a_old, a_new), (_, b_old, b_new) = changes
    return MISSING not in (a_old, a_new, b_old, b_new) and a_old == b_new and b_old == a_new


def _swap_reason(case: Case, changes: list) -> str | None:
    (path_a, a, _), (path_b, b, _) = changes
    if same_meaning(a, b):
        return "swapped two values with the same meaning"
    left = _left_listed(case, path_a, a, b) or _left_listed(case, path_b, b, a)
    if left:
        return left
    pair = frozenset((schema_path(path_a), schema_path(path_b)))
    if pair in case.truth.symmetric:
        return f"swapped symmetric arguments {sorted(pair)}"
    return None


def _change_reason(case: Case, path: tuple, old: Any, new: Any) -> str | None:
    """Why this one change keeps the meaning (None: it certainly changes it)."""
    where = schema_path(path) or "arguments"
    if schema_path(path) in case.truth.cosmetic:
        return f"{where} is cosmetic: it does not change what the call asks"
    if old is MISSING or new is MISSING:
        value = new if old is MISSING else old
        if path and isinstance(path[-1], int):
            return None
        default = stated_default(case, path)
        if default is MISSING or default == UNKNOWN:
            return f"{'added' if old is MISSING else 'dropped'} {where} without a stated default"
        if same_meaning(default, value) or _same_by_truth(case, default, value):
            return f"{where}: {value!r} is the stated default"
        return None
    if isinstance(old, list) and isinstance(new, list):
        return _array_reason(old, new, where)
    if same_meaning(old, new) or _same_by_truth(case, old, new):
        return f"{where}: {old!r} -> {new!r} says the same"
    if (left := _left_listed(case, path, old, new)) is not None:
        return left
    if isinstance(old, bool):
        return _flip_reason(case, path, where)
    if isinstance(old, str) and isinstance(new, str) and _cut_qualifier(old, new):
        return f"{where}: {old!r} -> {new!r} names the same thing"
    return None


def _same_by_truth(case: Case, old: Any, new: Any) -> bool:
    """Whether the corpus records `old` and `new` as names of the same thing."""
    return any(any(same_meaning(old, v) for v in group) and any(same_meaning(new, v)
                                                                for v in group)
               for group in case.truth.same)


def _left_listed(case: Case, path: tuple, old: Any, new: Any) -> str | None:
    """Why replacing a listed value by `new` is no logical error: `new` is not listed."""
    members = case.truth.enums.get(schema_path(path), ())
    if any(same_meaning(old, m) for m in members) and not any(same_meaning(new, m)
                                                              for m in members):
        return f"{schema_path(path)}: {new!r} is not one of the listed values {list(members)}"
    return None


def _array_reason(old: list, new: list, where: str) -> str | None:
    keys = lambda items: sorted(map(repr, items))  # noqa: E731
    if len(old) == len(new) and keys(old) == keys(new):
        return f"{where}: reordered"
    if set(map(repr, old)) == set(map(repr, new)):
        return f"{where}: the same set of items"
    return None


def _flip_reason(case: Case, path: tuple, where: str) -> str | None:
    if schema_path(path) in case.truth.cosmetic:
        return f"{where} is a cosmetic switch"
    if not _is_required(case, path) and stated_default(case, path) in (MISSING, UNKNOWN):
        return f"{where} is optional without a stated default: either value may do"
    return None


def _cut_qualifier(old: str, new: str) -> bool:
    head = old.split(",", 1)[0].strip()
    if _text(new) == _text(head):
        return True
    words = old.split()
    kept = new.split()
    return words[: len(kept)] == kept and all(w.lower().strip(".,") in _SUFFIXES
                                              for w in words[len(kept):])


def _subkind_reason(negative: Any, changes: list) -> str | None:
    """The subkind's own promise."""
    subkind, (path, old, new) = negative.subkind, changes[0]
    if subkind == "dropped_optional" and new is not MISSING:
        return "dropped_optional did not drop a key"
    if subkind == "set_optional" and old is not MISSING:
        return "set_optional did not add a key"
    if subkind == "dropped_item" and not (isinstance(old, list) and len(new) == len(old) - 1):
        return "dropped_item did not drop one item"
    if subkind == "off_by_one" and not (isinstance(old, (int, float)) and abs(new - old) == 1):
        return "off_by_one did not move a number by one"
    if subkind == "shifted_date":
        a, b = _date_part(old), _date_part(new)
        if a is None or b is None or abs((a - b).days) != 1:
            return f"shifted_date did not move a date by one day ({old!r} -> {new!r})"
    if subkind == "flipped_boolean" and not (isinstance(old, bool) and new is (not old)):
        return "flipped_boolean did not flip a boolean"
    return None
