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
    if name.startswith("lines"):
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


def test_an_unknown_pretokenizer_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="lines_digits"):
        build_bpe_tokenizer(["a"], vocab_size=300, pretokenizer="bytes")
