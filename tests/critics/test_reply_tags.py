"""The tagged blocks of critic replies (`<critique>`, `<tool_call>`, `<reason>`) are read in
linear time with the leftmost-match results of `<tag>(.*?)</tag>` (re.S | re.I), which took
minutes on a reply that repeats an opening tag and never closes it."""

from __future__ import annotations

import random
import re

import pytest

from critics.falsify import parse_falsify_reply
from critics.llm_critic import parse_reply, tag_pattern, tagged_block

PIECES = ["<critique>", "</critique>", "<CRITIQUE>", "</Critique>", "<critique", "critique>",
          "</critique", "< critique>", "<critique >", "x", "\n", "<", "/", ">", "\u0130"]


def _reference(tag: str, reply: str) -> str | None:
    """What the regex the parsers used to run finds (quadratic on hostile replies)."""
    match = re.compile(f"<{tag}>(.*?)</{tag}>", re.S | re.I).search(reply)
    return match.group(1) if match else None


def test_tagged_block_finds_what_the_lazy_regex_found():
    tags = tag_pattern("critique")
    rng = random.Random(7)
    replies = ["", "<critique>a</critique>", "<critique>a</critique><critique>b</critique>",
               "<critique><critique>a</critique>", "<CRITIQUE>a\nb</cRiTiQuE>",
               "</critique><critique>a", "<critique>a</critique", "<critique></critique>"]
    replies += ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
                for _ in range(3000)]
    for reply in replies:
        assert tagged_block(reply, tags) == _reference("critique", reply), reply


@pytest.mark.timeout(20)
@pytest.mark.parametrize("reply", [
    "<critique>" * 100_000,                                         # never closed
    "<CRITIQUE>\n" * 100_000,
    "<critique>ok</critique>" + "<tool_call>" * 100_000,           # the call never closed
    "<critique>ok</critique><tool_call>" + "</tool_cal>" * 100_000,  # near-miss closings
])
def test_a_reply_repeating_an_opening_tag_is_read_at_once(reply):
    # the lazy regex took over 120 s on 32K `<critique>`; 100K is about 10x that
    critique = parse_reply(reply)
    assert critique.call is None and critique.error in ("no <critique> block",
                                                        "no <tool_call> block")


@pytest.mark.timeout(20)
def test_a_falsify_reply_repeating_reason_is_read_at_once():
    verdict = parse_falsify_reply("<step>1</step>" + "<reason>" * 100_000, 3)
    assert (verdict.falsified, verdict.kind) == (None, "unreadable_reply")
    found = parse_falsify_reply("<step>1</step><reason><reason>a</REASON>" + "<reason>" * 10, 3)
    assert (found.falsified, found.step, found.reason) == (True, 1, "<reason>a")
