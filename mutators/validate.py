"""Strict validation of a tool call against its tool spec: `validate` and `validate_detailed`.

A call is `{"name": str, "arguments": dict}`; a tool is an OpenAI-style spec
(`{"type": "function", "function": {name, description, parameters}}`), the bare function
(`{name, description, parameters}`), an Anthropic-style `{name, input_schema}` or an MCP
`{name, inputSchema}`.
Arguments are validated as closed objects (see `introspect.py`), every error says where
(`arguments.filters.status`) and why (`reason`), and nothing here raises on bad input:
a malformed call or spec is reported as an error with reason "malformed".

Decisions worth knowing:
- 3.0 is accepted where an integer is expected (JSON Schema says so, and JSON parsers turn
  `3.0` into a float); True/False are never integers or numbers.
- Python tuples are accepted as arrays; NaN/inf and non-JSON objects are "malformed".
- `arguments` must be a dict; a JSON string (the OpenAI wire format) is reported as
  malformed, use `coerce_call` to decode it first. A missing or null `arguments` means {}.
- Arguments nesting more than MAX_VALUE_DEPTH (100) objects/arrays are malformed
  (`value nested too deeply to validate (over 100 levels)`), whatever the caller's stack.
- oneOf is checked as anyOf: a value matching two branches of a sloppy spec is accepted.
- It is the project's one validator: environments check tool arguments with it too
  (`datagen/envs/_arguments.py`), so an episode and its environment never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from mutators.check_budget import SchemaTooComplex
from mutators.compile import CompiledSchema, compile_schema
from mutators.jsonvalues import MAX_VALUE_DEPTH, format_path, nested_deeper_than, render
from mutators.keyword_checks import Err
from mutators.safe_regex import new_call

REASONS = ("type", "unknown_key", "required", "enum", "const", "format", "range", "length",
           "pattern", "unique", "contains", "property_name", "not", "forbidden", "malformed",
           "name")


@dataclass(slots=True)
class ValidationError:
    """One reason a call is invalid. `path` is `arguments.a.b[0]` (or `name`, `call`, `tool`),
    `reason` one of REASONS, `message` the full line (`path: detail`)."""

    path: str
    reason: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool spec unwrapped: its name, description and compiled parameters schema."""

    name: str
    description: str
    parameters: Any
    schema: CompiledSchema
    spec: Any


def _error(path: str, reason: str, detail: str) -> ValidationError:
    return ValidationError(path, reason, f"{path}: {detail}")


_MAX_TOOLS = 4096
_tools: dict[int, tuple[Any, ToolInfo]] = {}


def load_tool(tool: Any) -> ToolInfo | ValidationError:
    """Unwrap and compile a tool spec, or say why it cannot be used. Cached by the spec's
    identity (specs are treated as immutable once seen)."""
    entry = _tools.get(id(tool))
    if entry is not None and entry[0] is tool:
        return entry[1]
    loaded = _load_tool(tool)
    if isinstance(loaded, ToolInfo):
        if len(_tools) >= _MAX_TOOLS:
            for key in list(_tools)[: _MAX_TOOLS // 4]:
                _tools.pop(key, None)
        _tools[id(tool)] = (tool, loaded)
    return loaded


def _load_tool(tool: Any) -> ToolInfo | ValidationError:
    if not isinstance(tool, dict):
        return _error("tool", "malformed",
                      f"tool spec must be an object, got {type(tool).__name__}")
    function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return _error("tool", "malformed", "tool spec has no name")
    parameters = next((function[key] for key in ("parameters", "input_schema", "inputSchema")
                       if key in function), None)  # OpenAI, Anthropic, MCP
    if parameters is not None and not isinstance(parameters, (dict, bool)):
        return _error("tool.parameters", "malformed",
                      f"parameters must be a JSON Schema object, got {type(parameters).__name__}")
    description = function.get("description")
    try:
        schema = compile_schema(parameters)
    except RecursionError:  # a graph whose checks nest past the stack (see schema.py)
        return _error("tool.parameters", "malformed", "schema nested too deeply to compile")
    if schema.error is not None:
        return _error("tool.parameters", "malformed", schema.error)
    return ToolInfo(name, description if isinstance(description, str) else "", parameters,
                    schema, tool)


def coerce_call(call: Any) -> Any:
    """`call` with `arguments` decoded when it is a JSON string (OpenAI wire format); any
    other input is returned unchanged. Never raises."""
    if isinstance(call, dict) and isinstance(call.get("arguments"), (str, bytes)):
        try:
            arguments = orjson.loads(call["arguments"])
        except orjson.JSONDecodeError:
            return call
        return {**call, "arguments": arguments}
    return call


def call_arguments(call: Any) -> tuple[str | None, Any, ValidationError | None]:
    """(name, arguments, None) for a well-formed call, or (.., .., the malformed error)."""
    if not isinstance(call, dict):
        return None, None, _error("call", "malformed", "call must be an object {name, arguments}"
                                  f", got {type(call).__name__}")
    name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(name, str):
        return None, None, _error("name", "malformed",
                                  f"call name must be a string, got {render(name)}")
    if arguments is None:
        arguments = {}
    if isinstance(arguments, (str, bytes)):
        return name, None, _error("arguments", "malformed",
                                  "arguments is a string, not an object (decode it: coerce_call)")
    return name, arguments, None


def to_validation_errors(errors: list[Err]) -> list[ValidationError]:
    """Compiler errors with their paths rendered, duplicates removed, order kept."""
    found: list[ValidationError] = []
    seen: set[tuple[str, str, str]] = set()
    for err in errors:
        path = format_path(tuple(err.rev_path[::-1]))
        key = (path, err.reason, err.detail)
        if key not in seen:
            seen.add(key)
            found.append(ValidationError(path, err.reason, f"{path}: {err.detail}"))
    return found


class ValueTooDeep(RecursionError):
    """The arguments nest more than MAX_VALUE_DEPTH levels. A RecursionError, so that every
    caller handling a value too deep for the recursive checks handles this one alike."""


def validate_with(call: Any, tool: ToolInfo) -> list[ValidationError]:
    """`validate_detailed` for an already loaded tool (mutators validate many candidates).
    Raises RecursionError (ValueTooDeep past MAX_VALUE_DEPTH) for a value too deep to check:
    the mutators skip such a candidate rather than count its one error as a proof."""
    name, arguments, malformed = call_arguments(call)
    if malformed is not None:
        return [malformed]
    if nested_deeper_than(arguments):
        raise ValueTooDeep(f"arguments nest more than {MAX_VALUE_DEPTH} levels")
    errors = []
    if name != tool.name:
        errors.append(_error("name", "name", f"expected {render(tool.name)}, got {render(name)}"))
    if tool.schema.time_budgeted:
        new_call()  # a fresh time budget for patterns that only a backtracking engine reads
    try:
        found = tool.schema.check(arguments)
    except SchemaTooComplex as exc:  # its checks ran past the budget (check_budget.py)
        return errors + [_error("tool.parameters", "malformed", str(exc))]
    if found:
        errors.extend(to_validation_errors(found))
    return errors


def too_deep_error(exc: RecursionError | None = None) -> ValidationError:
    """The error for a value nested past MAX_VALUE_DEPTH (`exc` None or ValueTooDeep), or,
    rarely, past Python's recursion limit before that (a recursive schema's checks take ~4
    frames a level, and the caller's stack counts): then no level count is claimed."""
    past_limit = exc is None or isinstance(exc, ValueTooDeep)
    detail = f" (over {MAX_VALUE_DEPTH} levels)" if past_limit else ""
    return _error("arguments", "malformed", "value nested too deeply to validate" + detail)


def validate_detailed(call: Any, tool: Any) -> list[ValidationError]:
    """Every reason `call` does not fit `tool`, as structured errors ([] when valid)."""
    try:
        loaded = load_tool(tool)
        if isinstance(loaded, ValidationError):
            return [loaded]
        return validate_with(call, loaded)
    except RecursionError as exc:
        return [too_deep_error(exc)]
    except Exception as exc:  # noqa: BLE001 - validate never raises; a bug becomes data
        return [_error("call", "malformed", f"validator failed: {type(exc).__name__}: {exc}")]


def validate(call: Any, tool: Any) -> list[str]:
    """Error messages for `call` against `tool` ([] when the call is valid), e.g.
    `arguments.filters.status: expected integer, got string` or
    `arguments.user_id: unknown key (not in schema; allowed: customer_id, limit)`."""
    return [error.message for error in validate_detailed(call, tool)]


def schema_warnings(tool: Any) -> list[str]:
    """What normalisation had to guess about a tool's schema (unknown type names, invalid
    patterns, unresolvable $refs): useful when auditing tool specs. A spec that cannot be
    used at all gives its one error (`tool.parameters: schema nested too deeply ...`).
    Never raises."""
    try:
        loaded = load_tool(tool)
    except Exception as exc:  # noqa: BLE001 - an audit reports, never crashes
        return [f"tool: spec could not be read: {type(exc).__name__}: {exc}"]
    return [loaded.message] if isinstance(loaded, ValidationError) else list(loaded.schema.warnings)
