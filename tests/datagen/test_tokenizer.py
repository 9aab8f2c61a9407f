"""The tiny BPE builder's pre-tokenizers: where merges may not cross."""

from __future__ import annotations

import pytest

from datagen.tokenizer import PRETOKENIZERS, build_bpe_tokenizer
from tests.datagen.helpers import oracle_texts


@pytest.fixture(scope="module")
def texts() -> list[str]:
    # the oracle's texts, plus numbers in two contexts (a request and a call), so a `lines`
    # BPE learns merges that cut through them
    names = [f"/tmp/scratch-{n}" for n in range(100, 400)]
    return oracle_texts(20) + [f"Remove {name} please.\n{{\"path\": \"{name}\"}}\n" for name in names]


@pytest.mark.parametrize("name", PRETOKENIZERS)
def test_every_pretokenizer_round_trips_and_keeps_newlines_apart(texts, name):
    tokenizer = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer=name)
    text = texts[0]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    if name != "words":
        newline = "\u010a"  # "\n" in byte-level pieces
        assert all(newline not in piece or piece == newline
                   for piece in tokenizer.convert_ids_to_tokens(ids))


def test_lines_digits_spells_a_number_digit_by_digit_wherever_it_stands(texts):
    tokenizer = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="lines_digits")
    request = tokenizer.tokenize("Remove /tmp/scratch-417 please.")
    call = tokenizer.tokenize('{"path": "/tmp/scratch-417"}')
    digits = [piece for piece in request + call if any(c.isdigit() for c in piece)]
    assert digits == ["4", "1", "7"] * 2


def test_lines_merges_across_digits_which_lines_digits_does_not(texts):
    lines = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="lines")
    pieces = lines.tokenize('{"path": "/tmp/scratch-317"}')
    assert any(sum(c.isdigit() for c in piece) > 1 or
               (any(c.isdigit() for c in piece) and not piece.isdigit()) for piece in pieces)


def test_values_spells_a_value_with_the_same_tokens_in_the_request_and_the_call(texts):
    tokenizer = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="values")
    for name in ("/tmp/scratch-417", "/home/oscar/notes/ops.md"):
        request = tokenizer.tokenize(f"Remove {name}. Then stop")
        call = tokenizer.tokenize(f'{{"path": "{name}"}}')
        spelled = tokenizer.tokenize(name)
        assert "".join(spelled) == name  # ASCII: a byte-level piece is the character
        for pieces in (request, call):
            assert any(pieces[i:i + len(spelled)] == spelled for i in range(len(pieces)))


def test_lines_joins_a_value_to_what_stands_beside_it_which_values_does_not(texts):
    name = "/tmp/scratch-317"
    lines = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="lines")
    pieces = lines.tokenize(f'{{"path": "{name}"}}')
    assert not any(pieces[i:i + len(lines.tokenize(name))] == lines.tokenize(name)
                   for i in range(len(pieces)))


def test_values_keeps_a_tool_spec_line_in_few_tokens(texts):
    spec = next(line for line in texts[0].splitlines() if line.startswith('{"type": "function"'))
    values = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="values")
    words = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="words")
    assert len(values.tokenize(spec)) * 2 < len(words.tokenize(spec))  # 62 vs 146 at 800


def test_the_spelling_report_counts_copied_values_spelled_alike(texts):
    from scripts.build_tokenizer import spelling_report

    # at 2,000 the `lines` BPE has merged values with their neighbours (0.73 spelled alike;
    # at 800, 0.94: few merges, few joined)
    report = {name: spelling_report(build_bpe_tokenizer(texts, vocab_size=2000, pretokenizer=name),
                                    texts) for name in ("lines", "values")}
    assert report["values"]["copied_values"] == report["lines"]["copied_values"] > 20
    assert report["values"]["spelled_alike"] > 0.95 and report["lines"]["spelled_alike"] < 0.8
    assert report["values"]["tokens_per_text"] > report["lines"]["tokens_per_text"]


def test_values_encodes_a_long_run_of_dots_in_linear_time(texts):
    # a value run cannot end in a dot: before `\.+` took a dot run whole, each of its dots
    # started a scan to the run's end (32k dots: 4 s; 200k: ~3 min). Linear: milliseconds.
    import time

    tokenizer = build_bpe_tokenizer(texts, vocab_size=800, pretokenizer="values")
    text = "." * 200_000 + " ops.md."
    started = time.perf_counter()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert time.perf_counter() - started < 10
    assert tokenizer.decode(ids) == text


def test_the_spelling_report_reads_calls_in_linear_time():
    # a lazy `<tool_call>\n(.*?)\n</tool_call>` regex scans to the end from every unclosed
    # marker (quadratic); the report stops at the first marker that nothing closes
    import time

    from scripts.build_tokenizer import copied_values

    closed = '<|im_start|>user\nRemove /tmp/a-1\n<tool_call>\n{"name": "delete", "arguments": ' \
             '{"path": "/tmp/a-1"}}\n</tool_call>'
    started = time.perf_counter()
    found = list(copied_values(closed + "<tool_call>\n" * 200_000))
    assert time.perf_counter() - started < 10
    assert [value for value, _, _ in found] == ["/tmp/a-1"]


def test_an_unknown_pretokenizer_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="lines_digits"):
        build_bpe_tokenizer(["a"], vocab_size=300, pretokenizer="bytes")
