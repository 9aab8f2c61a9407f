"""Secrets taken out of everything the service stores or logs, in every encoding an echo takes.

An endpoint can send the API key back: a proxy that reflects the request headers into an error
body, a server that puts them into a 200's `id` or content. The echo may be raw, upper- or
lower-cased, JSON-escaped (`\\u0073`, `\\/`), URL-encoded (`%73`), HTML entities (`&#115;`),
hex, or base64 / base64url - of the key alone or of a longer text that contains it (`Bearer
sk-...`), so at any of the 3 byte alignments - and a cut of the message can leave any part of it.
`Redactor.redact` replaces every run of at least `min_fragment` (8) consecutive characters of a
secret, in any of these forms, by `[redacted]`. Callers redact first and cut afterwards.

How, and why it is complete. Any run of w = 8 consecutive characters of a secret contains one
of its aligned blocks of ceil(w/2) = 4 characters (blocks start at 0, 4, 8, ...), whatever the
run's start; the same holds for the hex form (aligned blocks of 4 bytes), and the full base64
groups of any 8-byte fragment include an aligned group of one alignment with an even index. So
a few substring searches for those blocks find every run that must go; a hit is then extended
left and right as far as the text keeps agreeing with that encoding of the secret, and the
whole run is replaced (shorter coincidences are left alone). Escapes are decoded into a second
view of the text with a map back to the original offsets, so a key with some or all of its
characters escaped is found too. The common case - nothing there - costs the searches alone:
about 60 us on a 2 KB body (benchmarks/bench_redact.py), where one compiled alternation of all
8-character windows (about 600 branches in Python's `re`) takes about 5 ms.
"""

from __future__ import annotations

import base64
import bisect
import re
from dataclasses import dataclass
from typing import Any, Iterable

REDACTED = "[redacted]"
MIN_FRAGMENT = 8

# Escapes an echo can wrap characters in (any number of backslashes: JSON inside JSON).
# Each branch starts with its own literal, so `re` skips to the next \\, % or & (13 us on a 2 KB
# body full of \\n; a first version without that shape took 85 us). A backslash escape is
# matched only from the first backslash of a run (the lookbehind) and the run is taken
# possessively: matched from each of its backslashes, a run of n not followed by u or / cost
# n^2 steps (80K backslashes: 62 s, the event loop stalled). Matches are the same: one from
# inside a run would need the same ending as one from its start, which finditer takes first.
_ESCAPE = re.compile(r"\\(?<!\\\\)(?:\\*+u([0-9a-fA-F]{4})|\\*+(/))"
                     r"|%([0-9a-fA-F]{2}(?:%[0-9a-fA-F]{2})*)"
                     r"|&#(?:(\d{1,7})|[xX]([0-9a-fA-F]{1,6}));")
_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _lower(text: str) -> str:
    """Lower-cased with offsets kept: `str.lower` lengthens a few characters (U+0130)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


@dataclass(frozen=True)
class _Form:
    """One encoding of a secret: the encoded text, the blocks whose search finds every long
    enough run of it, the shortest run that is redacted, and whether case is ignored."""

    encoded: str
    blocks: tuple[str, ...]
    min_run: int
    fold: bool

    def runs(self, view: str) -> list[tuple[int, int]]:
        """Spans of `view` (lower-cased when `fold`) that agree with `encoded` for at least
        `min_run` characters."""
        spans = []
        for block in self.blocks:
            at = view.find(block)
            while at != -1:
                start, end = self._extend(view, at, len(block))
                if end - start >= self.min_run:
                    spans.append((start, end))
                at = view.find(block, at + 1)
        return spans

    def _extend(self, view: str, at: int, size: int) -> tuple[int, int]:
        """The longest run through view[at:at+size] that agrees with `encoded` (the block may
        occur at several places of the secret: the longest agreement wins)."""
        best = (at, at + size)
        encoded = self.encoded
        where = encoded.find(view[at:at + size])
        while where != -1:
            left = _agreeing_before(view, at, encoded, where)
            right = size + _agreeing_after(view, at + size, encoded, where + size)
            if right + left > best[1] - best[0]:
                best = (at - left, at + right)
            where = encoded.find(view[at:at + size], where + 1)
        return best


def _agreeing_before(view: str, at: int, encoded: str, where: int) -> int:
    """How many characters before view[at] agree with those before encoded[where]. A body
    that repeats the secret agrees all the way: one slice comparison then, not a Python loop
    per character (that loop made such a body cost seconds per MB)."""
    limit = min(at, where)
    if view[at - limit:at] == encoded[where - limit:where]:
        return limit
    count = 0
    while view[at - count - 1] == encoded[where - count - 1]:
        count += 1
    return count


def _agreeing_after(view: str, at: int, encoded: str, where: int) -> int:
    """How many characters from view[at] on agree with those from encoded[where] on."""
    limit = min(len(view) - at, len(encoded) - where)
    if view[at:at + limit] == encoded[where:where + limit]:
        return limit
    count = 0
    while view[at + count] == encoded[where + count]:
        count += 1
    return count


def _aligned_blocks(encoded: str, size: int, step: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(encoded[i:i + size]
                               for i in range(0, len(encoded) - size + 1, step)))


def _forms(secret: str, min_fragment: int) -> list[_Form]:
    """Every form of `secret` to look for (see the module docstring for the block sizes)."""
    data = secret.encode()
    width = min(min_fragment, len(secret))
    block = (width + 1) // 2
    forms = [_Form(secret.lower(), _aligned_blocks(secret.lower(), block, block), width, True)]
    byte_width = min(min_fragment, len(data))
    byte_block = (byte_width + 1) // 2
    hex_text = data.hex()
    forms.append(_Form(hex_text, _aligned_blocks(hex_text, 2 * byte_block, 2 * byte_block),
                       2 * byte_width, True))
    groups = (byte_width - 2) // 3  # full base64 groups inside any fragment of byte_width bytes
    if groups >= 1:
        for alignment in range(3):
            tail = data[alignment:]
            whole = tail[:len(tail) // 3 * 3]
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                text = encode(whole).decode()
                if len(text) >= 4 * groups and all(text != f.encoded for f in forms):
                    forms.append(_Form(text, _aligned_blocks(text, 4, 4 * groups),
                                       4 * groups, False))
    return forms


class _Unescaped:
    """`text` with its escapes decoded, and the map from offsets there back to `text`."""

    def __init__(self, text: str) -> None:
        pieces, self.starts, self.ends, self.origins = [], [], [], []
        position = done = 0
        for match in _ESCAPE.finditer(text):
            pieces.append(text[done:match.start()])
            position += match.start() - done
            decoded = _decode(match)
            self.starts.append(position)
            self.ends.append(position + len(decoded))
            self.origins.append((match.start(), match.end()))
            pieces.append(decoded)
            position += len(decoded)
            done = match.end()
        pieces.append(text[done:])
        self.text = "".join(pieces)

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that produced text[start:end]."""
        return self._map(start, 0), self._map(end - 1, 1) + (0 if self._inside(end - 1) else 1)

    def _inside(self, offset: int) -> bool:
        index = bisect.bisect_right(self.starts, offset) - 1
        return index >= 0 and offset < self.ends[index]

    def _map(self, offset: int, side: int) -> int:
        index = bisect.bisect_right(self.starts, offset) - 1
        if index < 0:
            return offset
        if offset < self.ends[index]:
            return self.origins[index][side]
        return offset - self.ends[index] + self.origins[index][1]


def _decode(match: re.Match) -> str:
    unicode_hex, slash, percent, decimal, html_hex = match.groups()
    if slash:
        return slash
    if percent:
        return bytes.fromhex(percent.replace("%", "")).decode("utf-8", "replace")
    code = int(unicode_hex or html_hex, 16) if (unicode_hex or html_hex) else int(decimal)
    return chr(code) if code <= 0x10FFFF else match.group(0)


class Redactor:
    """Replaces runs of `min_fragment`+ characters of any secret, in any form, by [redacted]."""

    def __init__(self, secrets: Iterable[str | None], min_fragment: int = MIN_FRAGMENT) -> None:
        self.secrets = tuple(dict.fromkeys(s for s in secrets if s))
        self._folded: list[_Form] = []   # searched in the lower-cased text
        self._exact: list[_Form] = []    # base64: case matters
        for secret in self.secrets:
            for form in _forms(secret, min_fragment):
                (self._folded if form.fold else self._exact).append(form)
        # the longest unescaped stretch a run can have between two escapes: its hex form
        self._reach = 2 * max((len(s.encode()) for s in self.secrets), default=0) + 8

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Merged spans of `text` that carry a secret (empty for nearly every text)."""
        if not self.secrets or not text:
            return []
        found = self._runs(text)
        for start, end in self._escaped_regions(text):
            unescaped = _Unescaped(text[start:end])
            for low, high in self._runs(unescaped.text):
                low, high = unescaped.original(low, high)
                found.append((start + low, start + high))
        return _merge(found)

    def _escaped_regions(self, text: str) -> list[tuple[int, int]]:
        """Stretches of `text` around its escapes, wide enough to hold any encoded secret: a
        run that involves an escape lies inside one, and runs that do not were found already
        (so a body with a few escaped characters costs a few short searches, not a second
        full pass)."""
        reach = self._reach
        regions = [(max(0, m.start() - reach), m.end() + reach) for m in _ESCAPE.finditer(text)]
        return _merge(regions)

    def _runs(self, text: str) -> list[tuple[int, int]]:
        lowered = _lower(text)
        found = [span for form in self._folded for span in form.runs(lowered)]
        return found + [span for form in self._exact for span in form.runs(text)]

    def redact(self, text: str) -> str:
        """`text` with every secret-bearing run replaced by [redacted]."""
        spans = self.spans(text)
        if not spans:
            return text
        pieces, done = [], 0
        for start, end in spans:
            pieces += [text[done:start], REDACTED]
            done = end
        pieces.append(text[done:])
        return "".join(pieces)

    def redact_json(self, value: Any) -> Any:
        """A parsed JSON value with every string in it (keys too) redacted."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self.redact_json(item) for item in value]
        if isinstance(value, dict):
            return {self.redact(key): self.redact_json(item) for key, item in value.items()}
        return value

    def excerpt(self, data: bytes | str, limit: int) -> str:
        """The first `limit` characters of `data`, redacted before the cut (a secret that
        straddles the cut is seen whole, so not even its first characters survive)."""
        margin = 8 * max(map(len, self.secrets), default=0) + 64
        head = data[:limit + margin]
        text = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
        return self.redact(text)[:limit]


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
