"""`Redactor`: every encoding an echo of a key can take, fragments, cuts at a boundary, JSON
bodies, texts that must stay as they are. Leaks are judged by the independent brute-force
finder in `leaks.py`, not by the redactor itself."""

from __future__ import annotations

import base64
import json
import time

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datagen.teachers.redact import REDACTED, Redactor
from tests.datagen.teachers.fault_server import ECHO_ENCODINGS, echo_error
from tests.datagen.teachers.leaks import leaks

KEY = "sk-echo-7Qf3ZpL9xW2mKv8RtY4nB6cJ0hD5gS1aUe3w"
REDACTOR = Redactor([KEY])
BODY = orjson.dumps({"id": "chatcmpl-3f2a9c", "object": "chat.completion", "choices": [{
    "index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": (
        "The users table has 42 rows; sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c"
        "d15d6c15b0f00a08, token dGhlIHF1aWNrIGJyb3duIGZveA==, caf\u00e9 50% done. " * 16)}}],
    "usage": {"prompt_tokens": 100, "completion_tokens": 50}}).decode()


@pytest.mark.parametrize("encoding", sorted(ECHO_ENCODINGS))
@pytest.mark.parametrize("where", ["alone", "inside", "json"])
def test_every_encoding_is_redacted(encoding, where):
    echo = ECHO_ENCODINGS[encoding](KEY)
    text = {"alone": echo, "inside": f"upstream said ({echo}) twice: {echo}!",
            "json": json.dumps({"error": {"message": f"bad header {echo}"}})}[where]
    assert leaks(KEY, text), "the finder sees the echo before redaction"
    redacted = REDACTOR.redact(text)
    assert leaks(KEY, redacted) == [] and REDACTED in redacted
    if where == "inside":
        assert redacted.startswith("upstream said (") and redacted.endswith("!")


@pytest.mark.parametrize("encoding", ["raw", "upper", "hex", "b64", "b64-1", "b64-2", "url",
                                      "json-u", "html"])
def test_every_fragment_of_eight_characters_is_redacted(encoding):
    for start in range(len(KEY) - 8 + 1):
        for width in (8, 9, 13):
            fragment = KEY[start:start + width]
            text = f"prefix {ECHO_ENCODINGS[encoding](fragment)} suffix"
            redacted = REDACTOR.redact(text)
            assert leaks(KEY, redacted) == [], (encoding, fragment, redacted)


def test_seven_characters_are_below_the_threshold_and_kept():
    text = f"id {KEY[10:17]} ok"  # 7 characters: as likely in ordinary text as not
    assert REDACTOR.redact(text) == text


def test_mixed_escapes_and_nested_json_are_redacted():
    mixed = "".join(f"\\u{ord(c):04x}" if i % 3 == 0 else c for i, c in enumerate(KEY))
    percent = "".join(f"%{ord(c):02x}" if i % 2 else c for i, c in enumerate(KEY))
    nested = json.dumps(json.dumps({"auth": "".join(f"\\u{ord(c):04x}" for c in KEY)}))
    slashed = base64.b64encode(b"\xff\xfe" + KEY.encode()).decode().replace("/", "\\/")
    for text in (mixed, percent, nested, slashed, f"&#x{ord(KEY[0]):x};{KEY[1:]}"):
        redacted = REDACTOR.redact(f"echo: {text} end")
        assert leaks(KEY, redacted) == [], (text, redacted)
        assert redacted.endswith(" end") and redacted.startswith("echo: ")


@pytest.mark.parametrize("offset", [150, 178, 185, 191, 192, 193, 195, 199, 200, 240])
@pytest.mark.parametrize("encoding", ["raw", "json-u", "b64-1", "hex", "url"])
def test_a_cut_never_leaves_a_part_of_the_key(encoding, offset):
    text = echo_error(KEY, encoding, offset)
    cut = REDACTOR.excerpt(text.encode(), 200)
    assert len(cut) <= 200 and leaks(KEY, cut) == [], cut[offset - 10:]
    assert cut.startswith(text[:min(offset, 200)][:150])  # text before the echo is kept
    if encoding == "raw":  # redacted whole before the cut: not even its first characters stay
        assert KEY[:4] not in cut


def test_texts_without_the_key_are_left_alone():
    for text in (BODY, BODY.upper(), "", "[redacted]", KEY[:7] * 40, base64.b64encode(
            bytes(range(256))).decode(), bytes(range(256)).hex(), "\\u0073\\u006b %41 &#115;"):
        assert REDACTOR.redact(text) == text


def test_json_values_keep_their_shape():
    body = {"id": f"chatcmpl-{KEY}", KEY: [1, 2.5, None, True, {"x": KEY.upper()}],
            "choices": [{"message": {"content": f"hi {KEY} there"}}]}
    redacted = REDACTOR.redact_json(body)
    assert redacted == {"id": f"chatcmpl-{REDACTED}", REDACTED: [1, 2.5, None, True,
                                                                {"x": REDACTED}],
                        "choices": [{"message": {"content": f"hi {REDACTED} there"}}]}
    assert REDACTOR.redact_json(orjson.loads(BODY)) == orjson.loads(BODY)


def test_several_secrets_and_short_ones():
    redactor = Redactor([KEY, "hunter2!", None, ""])
    text = f"{KEY.upper()} and password hunter2! and {base64.b64encode(b'hunter2!').decode()}"
    # base64 keeps its last, partial group: "MiE=" spells the last 2 of the 8 characters
    assert redactor.redact(text) == f"{REDACTED} and password {REDACTED} and {REDACTED}MiE="
    assert not Redactor([None, ""]) and Redactor([None, ""]).redact(KEY) == KEY


_filler = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=_filler, after=_filler, start=st.integers(0, len(KEY) - 8),
       width=st.integers(8, len(KEY)), encoding=st.sampled_from(sorted(ECHO_ENCODINGS)),
       cut=st.integers(20, 400))
def test_fuzz_no_fragment_survives(before, after, start, width, encoding, cut):
    fragment = KEY[start:start + width]
    text = f"{before}{ECHO_ENCODINGS[encoding](fragment)}{after}"
    assert leaks(KEY, REDACTOR.redact(text)) == []
    assert leaks(KEY, REDACTOR.excerpt(text, cut)) == []


# The escape pattern before it was made linear: the reference for which regions are escapes.
_QUADRATIC_ESCAPE = r"\\(?:\\*u([0-9a-fA-F]{4})|\\*(/))|%([0-9a-fA-F]{2}(?:%[0-9a-fA-F]{2})*)" \
                    r"|&#(?:(\d{1,7})|[xX]([0-9a-fA-F]{1,6}));"


def test_escapes_are_the_regions_the_quadratic_pattern_found():
    import random
    import re

    from datagen.teachers.redact import _ESCAPE

    reference = re.compile(_QUADRATIC_ESCAPE)
    rng = random.Random(3)
    alphabet = ["\\"] * 6 + list("u/0aF9g%&#x;Xn")
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        assert ([(m.span(), m.groups()) for m in _ESCAPE.finditer(text)]
                == [(m.span(), m.groups()) for m in reference.finditer(text)]), text


@pytest.mark.timeout(20)
@pytest.mark.parametrize("tail", ["", "n", "u00zz", "u0041", "/"])
def test_a_long_run_of_backslashes_is_searched_at_once(tail):
    # 80K backslashes took the quadratic pattern 62 s; 300K would take ~15 minutes
    text = "\\" * 300_000 + tail + KEY
    started = time.perf_counter()
    redacted = REDACTOR.redact(text)
    assert time.perf_counter() - started < 5.0
    assert redacted == "\\" * 300_000 + tail + REDACTED


def test_a_body_that_repeats_the_key_is_one_redacted_run():
    text = KEY * 2_000
    assert REDACTOR.redact(text) == REDACTED
    cut = REDACTOR.redact(text[:5000] + "|" + text[5001:10000])
    assert cut == f"{REDACTED}|{REDACTED}" and leaks(KEY, cut) == []
