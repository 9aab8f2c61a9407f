"""Regular expressions that cannot hang: JSON Schema `pattern`s and search-tool regexes.

Python's `re` backtracks: `(a+)+$` against 26 a's and a `!` takes seconds, doubling with each
`a`, and no filter on the pattern's text catches every such shape (`((a)+)+$`, `(a|a?)+$`).
Each pattern is therefore compiled for the cheapest engine that is safe for it:

- `re` when its backtracking is bounded by construction: anchored at the start (`^`), no
  unbounded repeat, at most MAX_PATHS ways through it and MAX_WIDTH characters wide. That is
  the common ID/date shape (`^C-[0-9]{4}$`); a search costs ~0.3 us.
- RE2 (google-re2, linear time, ~1.4 us a search) for everything else it can read.
- the `regex` package under a time budget for what RE2 cannot read (lookarounds,
  backreferences). A search that runs out of time is UNDECIDED; a pattern that once ran out
  is not run again (UNDECIDED at once), and a thread spends at most CALL_BUDGET_S on such
  searches between two `new_call()`s (one validation, one tool call).

`SafeRegex.search(text)` is truthy when the pattern occurs in `text` (search semantics, as
JSON Schema says), None when it does not, and UNDECIDED (falsy) when the budget ran out, so a
plain truth test reads "matched" and a caller that must report undecided cases can.

Dialect: ECMA-262, as JSON Schema specifies. `\\d \\w \\s \\b` are ASCII; `$` is the end of the
input (Python's `$` also matches before a final newline; ECMA's does not); `(?<name>` names a
group; `\\uXXXX` and `\\u{X...}` are code points. Python `re` syntax is a near superset and works
too (the fs search tool documents its regexes that way).
"""

from __future__ import annotations

import re
import threading
import time
from functools import lru_cache
from typing import Any, Callable

try:  # Python 3.11+ names; 3.10 has them as sre_parse / sre_constants
    from re import _constants as sre_constants, _parser as sre_parse
except ImportError:  # pragma: no cover
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

import re2

MAX_PATHS = 256          # ways through a pattern that `re` may run (backtracking bound)
MAX_WIDTH = 256          # characters a pattern run by `re` can span
MAX_EXPANSION = 20_000   # repeat-expanded size of a `regex` pattern: (?:a{1000}){1000} takes
                         # 2 s to compile, (?:a{100}){100} 6 ms
MAX_PATTERN_CHARS = 10_000
MATCH_TIMEOUT_S = 0.05   # one fallback search (the `regex` package overshoots by up to ~4x)
CALL_BUDGET_S = 0.25     # fallback searches of one thread between two new_call()s


class _Undecided:
    """The search ran out of time: neither a match nor a miss (falsy)."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNDECIDED"


UNDECIDED = _Undecided()
_budget = threading.local()


def new_call() -> None:
    """Start a fresh fallback-search budget for this thread (one validation, one tool call).
    The clock starts at the first fallback search, so calls that need none pay one store."""
    _budget.deadline = None


class SafeRegex:
    """A compiled pattern: `pattern` (the source text), `engine` (re | re2 | regex) and
    `search(text)` -> truthy match, None, or UNDECIDED."""

    __slots__ = ("pattern", "engine", "search", "timed_out")

    def __init__(self, pattern: str, engine: str, search: Callable[[str], Any]) -> None:
        self.pattern, self.engine, self.search = pattern, engine, search
        self.timed_out = False

    def __repr__(self) -> str:
        return f"SafeRegex({self.pattern!r}, engine={self.engine!r})"


def compile_safe(pattern: str, ignore_case: bool = False) -> SafeRegex | str:
    """The pattern compiled for a safe engine, or why it cannot be used (invalid, or syntax
    that only a backtracking engine reads and whose size could not be bounded). Cached."""
    if not isinstance(pattern, str):
        return f"a pattern must be a string, got {type(pattern).__name__}"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"pattern longer than {MAX_PATTERN_CHARS} characters"
    return _compile(pattern, ignore_case)


@lru_cache(maxsize=2048)
def _compile(pattern: str, ignore_case: bool) -> SafeRegex | str:
    python_text, re2_text = translate(pattern)
    flags = re.ASCII | (re.IGNORECASE if ignore_case else 0)
    parsed, error = _parse(python_text, flags)
    if parsed is not None and _backtracking_is_bounded(parsed):
        try:
            return SafeRegex(pattern, "re", re.compile(python_text, flags).search)
        except (re.error, ValueError, OverflowError, RecursionError):
            pass
    compiled = _re2_search(re2_text, ignore_case)
    if compiled is not None:
        return SafeRegex(pattern, "re2", compiled)
    if parsed is None:
        return f"invalid or unsupported regular expression ({error})"
    return _fallback(pattern, python_text, parsed, ignore_case)


def _parse(text: str, flags: int) -> tuple[Any, str]:
    """Python's parse tree of the pattern, or None and why it failed."""
    try:
        return sre_parse.parse(text, flags), ""
    except (re.error, ValueError, OverflowError, RecursionError, TypeError) as exc:
        return None, str(exc) or type(exc).__name__


# Translation ---------------------------------------------------------------------------------

_CODE_POINT = re.compile(r"\\u(?:([0-9A-Fa-f]{4})|\{([0-9A-Fa-f]{1,6})\})")


def translate(pattern: str) -> tuple[str, str]:
    """(Python text, RE2 text) of an ECMA-262 pattern: `$` outside a class becomes `\\Z` for
    Python (end of input only), `(?<name>` becomes `(?P<name>`, `\\u` escapes become
    `\\U........` (Python) and `\\x{...}` (RE2)."""
    python, re2_text = [], []
    i, size, in_class = 0, len(pattern), False
    while i < size:
        char = pattern[i]
        if char == "\\" and i + 1 < size:
            point = _CODE_POINT.match(pattern, i)
            if point is not None and int(point.group(1) or point.group(2), 16) <= 0x10FFFF:
                value = int(point.group(1) or point.group(2), 16)
                python.append(f"\\U{value:08x}")
                re2_text.append(f"\\x{{{value:x}}}")
                i = point.end()
                continue
            python.append(pattern[i:i + 2])
            re2_text.append(pattern[i:i + 2])
            i += 2
            continue
        token = char
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            close = i + 1 + (pattern.startswith("^", i + 1))
            if pattern.startswith("]", close):  # `[]...]` / `[^]...]`: a literal ]
                token, i = pattern[i:close + 1], close
        elif char == "$":
            python.append("\\Z")
            re2_text.append("$")
            i += 1
            continue
        elif pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            token, i = "(?P<", i + 2
        python.append(token)
        re2_text.append(token)
        i += 1
    return "".join(python), "".join(re2_text)


# Engine choice ---------------------------------------------------------------------------------

_AT_START = {sre_constants.AT_BEGINNING, sre_constants.AT_BEGINNING_STRING}
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT,
            getattr(sre_constants, "POSSESSIVE_REPEAT", sre_constants.MAX_REPEAT)}


def _backtracking_is_bounded(parsed: Any) -> bool:
    """Anchored at the start, at most MAX_PATHS ways through, at most MAX_WIDTH wide: a
    search then tries one position and visits at most MAX_PATHS * MAX_WIDTH states."""
    if parsed.state.flags & re.MULTILINE or not len(parsed.data):
        return False
    op, argument = parsed.data[0]
    if op is not sre_constants.AT or argument not in _AT_START:
        return False
    try:
        width = parsed.getwidth()[1]
    except (OverflowError, RecursionError):
        return False
    return width <= MAX_WIDTH and _paths(parsed.data) <= MAX_PATHS


def _paths(items: Any) -> int:
    """Ways a backtracking matcher can go through `items` from one position (capped)."""
    total = 1
    for op, argument in items:
        if op in _REPEATS:
            low, high, sub = argument
            if high == sre_constants.MAXREPEAT:
                return MAX_PATHS + 1
            inner = _paths(sub)
            if inner == 1:
                total *= high - low + 1
            elif high > 64:
                return MAX_PATHS + 1
            else:
                total *= sum(inner ** count for count in range(low, high + 1))
        elif op is sre_constants.SUBPATTERN:
            total *= _paths(argument[-1])
        elif op is sre_constants.BRANCH:
            total *= sum(_paths(branch) for branch in argument[1])
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            total *= _paths(argument[1])
        elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
            total *= _paths(argument)
        elif op is sre_constants.GROUPREF_EXISTS:
            total *= _paths(argument[1]) + (_paths(argument[2]) if argument[2] else 1)
        if total > MAX_PATHS:
            return MAX_PATHS + 1
    return total


def _re2_search(text: str, ignore_case: bool) -> Callable[[str], Any] | None:
    options = re2.Options()
    options.log_errors = False   # RE2 logs every refused pattern to stderr otherwise
    options.never_capture = True
    options.case_sensitive = not ignore_case
    try:
        compiled = re2.compile(text, options)
    except re2.error:
        return None
    # The wrapper's search() decodes match offsets in Python (~9 us); the raw Match (~1.4 us)
    # is all a yes/no answer needs.
    raw = getattr(compiled, "_regexp", None)
    unanchored = getattr(getattr(getattr(re2, "_re2", None), "RE2", None), "Anchor", None)
    if raw is None or unanchored is None:
        return lambda subject: True if compiled.search(subject) is not None else None
    anchor, miss = unanchored.UNANCHORED, (-1, -1)

    def search(subject: str) -> Any:
        data = subject.encode("utf-8", "surrogatepass")
        return True if raw.Match(anchor, data, 0, len(data))[0] != miss else None

    return search


def _fallback(pattern: str, python_text: str, parsed: Any, ignore_case: bool
              ) -> SafeRegex | str:
    """The `regex` package with a timeout, for lookarounds and backreferences."""
    if _expansion(parsed.data) > MAX_EXPANSION:
        return "pattern too large: its repeats expand to over 20,000 items"
    try:
        import regex
    except ImportError:
        return "pattern needs lookarounds or backreferences, and the `regex` package is absent"
    try:
        compiled = regex.compile(python_text, regex.V0 | regex.ASCII |
                                 (regex.IGNORECASE if ignore_case else 0))
    except Exception as exc:  # noqa: BLE001 - regex raises several error types
        return f"invalid pattern: {exc}"
    safe = SafeRegex(pattern, "regex", lambda subject: None)
    safe.search = _budgeted(compiled, safe)
    return safe


def _budgeted(compiled: Any, safe: SafeRegex) -> Callable[[str], Any]:
    def search(subject: str) -> Any:
        if safe.timed_out:
            return UNDECIDED
        now = time.monotonic()
        deadline = getattr(_budget, "deadline", None)
        if deadline is None:
            deadline = _budget.deadline = now + CALL_BUDGET_S
        timeout = min(MATCH_TIMEOUT_S, deadline - now)
        if timeout <= 0:
            return UNDECIDED
        try:
            return True if compiled.search(subject, timeout=timeout) is not None else None
        except TimeoutError:
            safe.timed_out = timeout >= MATCH_TIMEOUT_S  # a spent call budget is not its fault
            return UNDECIDED

    return search


def _expansion(items: Any, factor: int = 1) -> int:
    """Items of the pattern with bounded repeats unrolled (what `regex` compiles)."""
    total = 0
    for op, argument in items:
        if op in _REPEATS:
            low, high, sub = argument
            count = high if high != sre_constants.MAXREPEAT else max(low, 1)
            total += _expansion(sub, factor * max(count, 1))
        elif op is sre_constants.SUBPATTERN:
            total += _expansion(argument[-1], factor)
        elif op is sre_constants.BRANCH:
            total += sum(_expansion(branch, factor) for branch in argument[1])
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            total += _expansion(argument[1], factor)
        elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
            total += _expansion(argument, factor)
        else:
            total += factor
        if total > MAX_EXPANSION:
            return total
    return total
