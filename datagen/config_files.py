"""Reading a config file and `--set key=value` overrides without trusting them.

A config is user input like any other: a file of gigabytes, YAML aliases that expand a small
file into billions of values, nesting past Python's recursion limit, bytes that are not UTF-8,
a key given twice (PyYAML keeps the last value silently), or PyYAML's constructors
failing on an odd explicit tag must each end in one `ConfigError`
naming the file or the override, never in a traceback, a hang or a blown heap. `datagen
generate` and every `trainer` config (fit, eval, loop) read their YAML through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from datagen.bounded_read import FileTooLarge, read_bounded


class ConfigError(ValueError):
    """A config that cannot run; the message names the field and the allowed values."""


MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 100_000  # YAML aliases can expand a small file into billions of values
# A real config nests 5 levels (teacher.openai.extra_body.x); orjson refuses 255, Python's
# recursion limit stops pydantic and PyYAML's pure-Python parser at a few hundred.
MAX_CONFIG_DEPTH = 32
# libyaml parses a 1 MB document in 2 s where PyYAML's Python parser takes 9 s, and it refuses
# flow nesting past 1,000 levels instead of running into Python's recursion limit.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _ConfigLoader(_SAFE_LOADER):
    """The safe loader, refusing a key given twice in one mapping: PyYAML keeps the last value
    and drops the first silently (`seed: 1` ... `seed: 2` ran with seed 2). A merge key (`<<`)
    is not a key: a mapping's own keys override what it merges, as YAML means them to."""

    def construct_document(self, node: yaml.Node) -> Any:
        _refuse_duplicate_keys(self, node)
        return super().construct_document(node)


def _refuse_duplicate_keys(loader: _ConfigLoader, root: yaml.Node) -> None:
    """ConstructorError naming the dotted path and both lines of the first key given twice.
    Walks the composed nodes, each once: an alias shares its anchor's node, so a YAML bomb
    costs its size here, not its expansion (shape_problem bounds that after loading)."""
    stack, visited = [(root, "")], set()
    while stack:
        node, path = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}.{index}" if path else str(index))
                         for index, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key: Any = "<<" if key_node.tag == _MERGE_TAG else "?"  # "?": a complex key
                if key_node.tag != _MERGE_TAG and isinstance(key_node, yaml.ScalarNode):
                    # constructed, so `seed` and `"seed"` are one key, as they are in the dict
                    key = loader.construct_object(key_node)
                    line = key_node.start_mark.line + 1
                    if key in first_line:
                        dotted = f"{path}.{key}" if path else str(key)
                        raise yaml.constructor.ConstructorError(
                            problem=f"duplicate key {dotted} (line {line}; first given on line "
                                    f"{first_line[key]}): give each key once")
                    first_line[key] = line
                stack.append((value_node, f"{path}.{key}" if path else str(key)))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: PyYAML's own text spans several, with a caret picture."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return f"{problem}{where}"


def shape_problem(data: Any) -> str | None:
    """Why `data` is too big for a config to check (values counted as pydantic would see
    them, aliases expanded; nesting depth), or None. Stops at the first limit it passes."""
    count, stack = 0, [(data, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            return f"over {MAX_CONFIG_NODES:,} values once YAML aliases are expanded"
        if depth > MAX_CONFIG_DEPTH:
            return f"nested deeper than {MAX_CONFIG_DEPTH} levels"
        if isinstance(item, dict):
            stack.extend((key, depth + 1) for key in item.keys())
            stack.extend((value, depth + 1) for value in item.values())
        elif isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)
    return None


def _load_yaml(text: str) -> Any:
    """YAML -> Python; ValueError (with a one-line reason) for anything that is not YAML a
    config can hold."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as exc:
        raise ValueError(_yaml_problem(exc)) from None
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_CONFIG_DEPTH} levels") from None
    except UnicodeError as exc:  # a --set value from non-UTF-8 argv bytes
        raise ValueError(f"not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:  # an integer of over 4,300 digits, as Python refuses to parse
        raise ValueError(str(exc).split(";")[0]) from None
    except Exception as exc:  # PyYAML's constructors on odd explicit tags: `!!float` alone
        # raises IndexError. A safe loader builds plain data only, so any failure here is
        # the document's
        raise ValueError(f"cannot be read ({type(exc).__name__}: {exc})") from None


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """`data[a][b][c] = value` for `a.b.c`, creating sections on the way."""
    keys = dotted.split(".")
    for key in keys[:-1]:
        data = data.setdefault(key, {})
        if not isinstance(data, dict):
            raise ConfigError(f"override {dotted}: {key} is not a section")
    data[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """`key.sub=value` with the value read as YAML (so numbers, booleans, lists and null
    work)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} must look like key=value")
    try:
        return key.strip(), _load_yaml(raw)
    except ValueError as exc:
        raise ConfigError(f"override {key.strip()}: not a YAML value: {exc}") from None


def read_yaml(path: str | Path, kind: str = "config") -> dict[str, Any]:
    """A YAML mapping from `path`, bounded in bytes; `kind` names the file in messages."""
    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES)
    except FileTooLarge:
        raise ConfigError(f"{kind} {path} is over {MAX_CONFIG_BYTES:,} bytes; a config is a "
                          "few dozen lines") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {kind} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL in the path (only from Python callers: argv has none)
        raise ConfigError(f"cannot read {kind} {path!r}: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{kind} {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                          f"offset {exc.start})") from None
    try:
        data = _load_yaml(text) or {}
    except ValueError as exc:
        raise ConfigError(f"{kind} {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{kind} {path} must be a YAML mapping, got {type(data).__name__}")
    return data


__all__ = ["ConfigError", "MAX_CONFIG_BYTES", "MAX_CONFIG_DEPTH", "MAX_CONFIG_NODES",
           "parse_override", "read_yaml", "set_dotted", "shape_problem"]
