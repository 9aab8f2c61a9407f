"""What a parameter's description says in words: its default, its allowed values, examples,
and whether it is a cosmetic switch.

Real tool specs rarely use the `default` and `enum` keywords; they write "Defaults to 'cm'",
"Default is 'metric'", "The default is 2", "one of 'a', 'b' or 'c'", "e.g. 'London'".
The logical-error mutator needs these facts to know which changes certainly alter a call's
meaning (dropping an argument whose value is the stated default does not), so they are read
here, from the normalised `Node`, and cached on it.

Reading is conservative: a phrase that names a default but no readable value ("defaults to the
current date") gives `UNREADABLE`, so callers can treat the default as unknown rather than
absent. Every pattern is linear (no nested quantifiers) and descriptions are clipped, so no
description can make reading slow.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from mutators.introspect import accepted_types
from mutators.jsonvalues import json_equal, json_type
from mutators.schema import Node

# characters of a description that are read; every pattern below runs on at most these
# (tool argument values, which have no length limit, never reach them)
MAX_DESCRIPTION = 2000
MAX_CACHED_TEXT = 256    # strings up to this length have their comparison key cached
UNREADABLE = ("<unreadable default>",)  # a default is stated but its value cannot be read

_QUOTED = r"(?:'([^'\n]{0,80})'|\"([^\"\n]{0,80})\"|`([^`\n]{0,80})`|‘([^’\n]{0,80})’|“([^”\n]{0,80})”)"
_BARE = r"(-?\d[\d,]*(?:\.\d+)?|[A-Za-z_][\w.\-/:+]*)"
_VALUE = rf"(?:{_QUOTED}|{_BARE})"
_DEFAULT_PHRASES = (
    r"\bdefaults?\s+(?:is|to|value\s+is|value|of|=|:)\s*",
    r"\bdefaulting\s+to\s+",
    r"\bdefaults?\s+(?=['\"`‘“]|-?\d|(?:true|false|none|null)\b)",
    r"\bdefault\s*[:=]\s*",
    r"\(\s*default\s+",
    r"\bif\s+(?:not\s+(?:specified|provided|given|set|supplied)|omitted|unspecified|absent"
    r"|left\s+(?:blank|empty|out))\s*,?\s*(?:it\s+)?(?:defaults?\s+to|is|uses?|will\s+be"
    r"|assumes?|falls\s+back\s+to)\s+",
)
_DEFAULT = re.compile(rf"(?:{'|'.join(_DEFAULT_PHRASES)}){_VALUE}", re.IGNORECASE)
_OMITTED = (r"(?:not\s+(?:specified|provided|given|set|supplied)|omitted|unspecified|absent"
            r"|left\s+out|none\s+is\s+given)")
_NUMBER = r"(-?\d[\d,]*(?:\.\d+)?)"
# The value first: "'cm' by default", "'m' if omitted", "70 when not given", and
# "If omitted, 'oxford' is used" (a quoted value or a number only: "today if omitted" names
# no value).
_VALUE_FIRST = (
    re.compile(rf"(?:{_QUOTED}|{_NUMBER})\s+(?:is\s+used\s+)?(?:by\s+default|(?:if|when)\s+"
               rf"{_OMITTED})", re.IGNORECASE),
    re.compile(rf"\bif\s+{_OMITTED}\s*,?\s*{_QUOTED}\s+is\s+used", re.IGNORECASE),
)
# "default minor": a bare word after "default" is read only when it is one of the values the
# schema's enum or the description lists, which makes it surely a value, not a phrase
# ("default behaviour").
_DEFAULT_MEMBER = re.compile(rf"\bdefault\s+{_BARE}", re.IGNORECASE)
_WORD_FILLERS = {"the", "a", "an", "current", "all", "any", "each", "this", "that", "its",
                 "their", "your", "whatever", "same", "empty", "value", "provided", "given",
                 "specified"}
_BARE_END = re.compile(r"\s*(?:[.,;)]|$)")  # a bare default word must end its phrase
_CONSTANTS = {"true": True, "false": False, "null": None, "none": None, "yes": True,
              "no": False}

_ENUM_LEAD = re.compile(
    r"\b(?:one\s+of|either|options?\s*(?:are|is|include)?\s*:?|allowed(?:\s+values)?\s*"
    r"(?:are|is)?\s*:?|possible\s+values\s*(?:are|include)?\s*:?|valid\s+values\s*(?:are)?"
    r"\s*:?|supported(?:\s+values)?\s*(?:are)?\s*:|choices?\s*(?:are)?\s*:|choose\s+from"
    r"|accepted\s+values\s*(?:are)?\s*:?|can\s+be|must\s+be)"
    r"(?:\s*the\s+following(?:\s+values)?)?\s*:?\s*", re.IGNORECASE)
_QUOTED_ITEM = re.compile(_QUOTED)
_BARE_ITEM = re.compile(r"[A-Za-z0-9_][\w.\-+/]*")
# Leading spaces outside the loop: with `\s*` on both sides of each separator, a run of
# spaces between two separators could go to either one, and a near-miss ("  ,  ,  , x")
# backtracked exponentially (73 characters took 48 s).
_LIST_GLUE = re.compile(r"^\s*(?:(?:,|/|\||\bor\b|\band\b)\s*)+$", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|;|\n|\(|\)")  # a list ends at a sentence or an aside

_EXAMPLE = re.compile(rf"\b(?:e\.\s?g\.?,?|for\s+example,?|such\s+as|example\s*:|"
                      rf"like)\s*{_QUOTED}", re.IGNORECASE)
_COSMETIC = re.compile(
    r"\b(?:optional(?:ly)?|verbose|verbosity|pretty|debug(?:ging)?|human[- ]readable|"
    r"for\s+display|formatting|indent(?:ed|ation)?|colou?r(?:ed|ize)?\s+output|"
    r"if\s+desired|cosmetic|logging)\b", re.IGNORECASE)


def _first_group(match: re.Match) -> str | None:
    return next((g for g in match.groups() if g is not None), None)


def _text(node: Node) -> str:
    return node.description[:MAX_DESCRIPTION] if isinstance(node.description, str) else ""


def _typed(raw: str, quoted: bool, node: Node) -> Any:
    """The prose token as the JSON value it most likely means at `node`: a number or a
    constant where the node takes no strings (or the token is an unquoted true/false/null)."""
    types = accepted_types(node)
    takes_strings = types is None or "string" in types
    lower = raw.strip().lower()
    if lower in _CONSTANTS and (not takes_strings or (not quoted and lower in
                                                      ("true", "false", "null", "none"))):
        return _CONSTANTS[lower]
    if not takes_strings and types & {"integer", "number"}:
        try:
            number = float(raw.replace(",", ""))
        except ValueError:
            return raw
        if not math.isfinite(number):
            return raw
        return int(number) if number.is_integer() and "." not in raw else number
    return raw


def _listed_member(word: str, node: Node) -> tuple | None:
    """`(member,)` of the enum or the listed values that `word` names, else None."""
    members = tuple(node.enum or ()) + prose_enum(node)
    if not members:
        return None
    for value in (word, _typed(word, False, node)):
        listed = next((m for m in members if same_meaning(m, value)), None)
        if listed is not None:
            return (listed,)
    return None


def _listed_default(text: str, node: Node) -> tuple | None:
    """"default minor" where 'minor' is a member of the enum or of the listed values."""
    for match in _DEFAULT_MEMBER.finditer(text):
        word = match.group(1).rstrip(".,")
        if _BARE_END.match(text, match.start(1) + len(word)):
            listed = _listed_member(word, node)
            if listed is not None:
                return listed
    return None


def _read_default(text: str, node: Node) -> tuple | None:
    match = _DEFAULT.search(text)
    if match is None:
        found = next((m for m in (p.search(text) for p in _VALUE_FIRST) if m), None)
        if found is None:
            return _listed_default(text, node)
        return (_typed(_first_group(found), True, node),)
    *quoted_groups, bare = match.groups()
    quoted = next((g for g in quoted_groups if g is not None), None)
    if quoted is not None:
        return (_typed(quoted, True, node),)
    bare = bare.rstrip(".,")
    listed = _listed_member(bare, node)
    if listed is not None:  # "(default none)" among 'none, daily, weekly': the word 'none'
        return listed
    typed = _typed(bare, False, node)
    if bare.lower() in _WORD_FILLERS or (json_type(typed) == "string" and not _BARE_END.match(
            text, match.start(len(match.groups())) + len(bare))):
        return UNREADABLE
    return (typed,)


def stated_default(node: Node) -> tuple | None:
    """`(value,)` of the default the spec states for `node` — its `default` keyword, else its
    description ("Defaults to 'cm'") — `UNREADABLE` when a default is named but cannot be
    read, None when none is stated."""
    if "stated_default" not in node.memo:
        node.memo["stated_default"] = (node.default if node.default is not None
                                       else _read_default(_text(node), node))
    return node.memo["stated_default"]


def _enum_tail(text: str, start: int) -> list[str]:
    """Members listed from `start` up to the end of the sentence: quoted items when there are
    any, otherwise bare words separated by commas, slashes, 'or' / 'and'."""
    end = _SENTENCE_END.search(text, start)
    tail = text[start: end.start() if end else len(text)]
    quoted = list(_QUOTED_ITEM.finditer(tail))
    if len(quoted) >= 2 and all(_LIST_GLUE.match(tail[a.end():b.start()] or ",")
                                for a, b in zip(quoted, quoted[1:])):
        return [_first_group(m) for m in quoted]
    # "or" / "and" are glue, not members ("metric, imperial or scientific")
    words = [w for w in _BARE_ITEM.finditer(tail) if w.group().lower() not in ("or", "and")]
    if len(words) < 2 or not re.fullmatch(r"[\s:,]*", tail[: words[0].start()]):
        return []
    glued = [bool(_LIST_GLUE.match(tail[a.end():b.start()] or "-"))
             for a, b in zip(words, words[1:])]
    if all(glued):
        return [w.group() for w in words]
    return _closed_run(tail, words, glued.index(False) + 1)


def _closed_run(tail: str, words: list[re.Match], count: int) -> list[str]:
    """The first `count` words when they are a list the sentence then goes on about
    ("standard, metric and imperial units are available"): three or more, closed by 'and' /
    'or' before the last one, and followed by a plain space."""
    if count < MIN_UNLED_MEMBERS:
        return []
    last_glue = tail[words[count - 2].end():words[count - 1].start()]
    after = tail[words[count - 1].end():words[count].start()]
    if not re.search(r"\b(?:and|or)\b", last_glue, re.IGNORECASE) or not after.isspace():
        return []
    return [w.group() for w in words[:count]]


# Without a lead phrase a list is taken only at the start of the description or after a
# label's colon ("Topic: inspire, sports, life or art"; "young, adult or senior."), and only
# with three members or more, which a sentence rarely has by chance.
_LABEL_LEAD = re.compile(r"^\s*|:\s*")
MIN_UNLED_MEMBERS = 3


def _listed_members(text: str) -> list[str]:
    for lead in _ENUM_LEAD.finditer(text):
        members = _enum_tail(text, lead.end())
        if len(members) >= 2:
            return members
    for lead in _LABEL_LEAD.finditer(text):
        members = _enum_tail(text, lead.end())
        if len(members) >= MIN_UNLED_MEMBERS:
            return members
    return []


def prose_enum(node: Node) -> tuple:
    """The allowed values the description lists ("one of 'a', 'b' or 'c'", "Options: metric,
    imperial", "Topic: inspire, sports or art"), typed like the node's values; () when it
    lists none."""
    if "prose_enum" not in node.memo:
        text = _text(node)
        members = _listed_members(text)
        node.memo["prose_enum"] = tuple(dict.fromkeys(
            _typed(m, True, node) for m in members if m)) if len(members) >= 2 else ()
    return node.memo["prose_enum"]


def prose_examples(node: Node) -> tuple:
    """Quoted example values in the description ("e.g. 'London'"), and `examples`."""
    if "prose_examples" not in node.memo:
        found = [_first_group(m) for m in _EXAMPLE.finditer(_text(node))]
        node.memo["prose_examples"] = tuple(node.examples) + tuple(
            dict.fromkeys(f for f in found if f))
    return node.memo["prose_examples"]


def marked_cosmetic(node: Node) -> bool:
    """Whether the description marks the parameter as optional or cosmetic ("Optional.",
    "verbose output", "pretty-print"): a switch a task is usually indifferent to."""
    if "cosmetic" not in node.memo:
        node.memo["cosmetic"] = bool(_COSMETIC.search(_text(node)))
    return node.memo["cosmetic"]


def normal_text(value: str) -> str:
    """A string as compared for meaning: case, surrounding and repeated whitespace, and
    '-'/'_' between words do not count."""
    return " ".join(value.replace("_", " ").replace("-", " ").split()).casefold()


def same_meaning(first: Any, second: Any) -> bool:
    """Whether two argument values say the same thing: JSON-equal, equal numbers in any type
    (1, 1.0, "1"), the same text but for case/whitespace/separators, a boolean and its word."""
    if type(first) is str and type(second) is str:  # the common case, on the hot path
        return _text_key(first) == _text_key(second)
    first_type, second_type = json_type(first), json_type(second)
    if first_type in ("object", "array") or second_type in ("object", "array"):
        return json_equal(first, second)
    return _scalar_key(first) == _scalar_key(second)


def meaning_key(value: Any) -> Any:
    """A hashable key that two scalars share exactly when `same_meaning` says they mean the
    same (dedupe in linear time); None for objects, arrays and unhashable values."""
    if json_type(value) in ("object", "array"):
        return None
    key = _scalar_key(value)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _scalar_key(value: Any) -> Any:
    tag = json_type(value)
    if tag == "boolean":
        return ("bool", value)
    if tag in ("integer", "number"):
        return ("number", value)  # int == float compares exactly, also for huge ints
    if tag == "string":
        return _text_key(value)
    return (tag, value)


def _text_key(value: str) -> tuple:
    return _cached_text_key(value) if len(value) <= MAX_CACHED_TEXT else _read_text_key(value)


def _read_text_key(value: str) -> tuple:
    text = normal_text(value)
    if text in ("true", "false"):
        return ("bool", text == "true")
    try:
        return ("number", float(text.replace(",", "")))
    except ValueError:
        return ("text", text)


_cached_text_key = lru_cache(maxsize=4096)(_read_text_key)
