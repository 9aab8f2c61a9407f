"""Held-out preference pairs: built by the pipeline's stages from held-out tasks, tokenised as
their stored text; metrics with known answers (hand-built scores and a FAKE scorer); the
checkpoint scorer equal to full forwards of each side."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from mutators import ALL_KINDS
from tests.trainer.helpers import tiny_model
from trainer.heldout import heldout_tasks
from trainer.pair_scorer import TorchPairScorer
from trainer.pref_eval import (PairExample, PairScore, heldout_preference_rows, negatives_report,
                               pair_metrics, preference_report, tokenize_pair)
from trainer.tokens import SPAN_KIND_ID, TextTokenizer, special_ids


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a loaded 2-core host the forwards run 4-6x faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir):
    return TextTokenizer(tiny_tokenizer_dir)


@pytest.fixture(scope="module")
def rows():
    built, skipped = heldout_preference_rows(heldout_tasks(["sql", "fs", "enterprise"], 3).tasks, 0)
    assert not skipped
    return built


@pytest.fixture(scope="module")
def pairs(rows, tokenizer):
    tokenized = [tokenize_pair(row, tokenizer) for row in rows]
    assert all(isinstance(pair, PairExample) for pair in tokenized)
    return tokenized


def test_pairs_come_from_every_source_and_negative_kind(rows, pairs, tokenizer):
    assert Counter(row["source"] for row in rows).keys() == {"negative", "repair", "safety"}
    assert {p.kind for p in pairs if p.source == "negative"} == set(ALL_KINDS)
    act, reason = SPAN_KIND_ID["ACT"], SPAN_KIND_ID["REASON"]
    for row, pair in zip(rows, pairs):
        assert tokenizer.decode(pair.prompt_ids + pair.chosen_ids) == row["prompt_text"] + row["chosen_text"]
        assert tokenizer.decode(pair.prompt_ids + pair.rejected_ids) == row["prompt_text"] + row["rejected_text"]
        assert pair.prompt_spans[-1] == SPAN_KIND_ID["PROMPT"]  # ends with the assistant header
        assert pair.chosen_spans[-1] == act and pair.rejected_spans[-1] == act
        if row["source"] == "negative":  # same reasoning, then the correct / the wrong call
            assert pair.chosen_spans[0] == reason
            shared = pair.chosen_spans.index(act)
            assert pair.chosen_ids[:shared] == pair.rejected_ids[:shared]


def test_a_row_whose_text_the_template_does_not_give_is_skipped(rows, tokenizer):
    row = dict(rows[0], prompt_text=rows[0]["prompt_text"].replace("tools", "tool", 1))
    assert tokenize_pair(row, tokenizer) == "rendered_text_differs"


def test_metrics_with_known_answers():
    policy = [PairScore(-1, -2), PairScore(-3, -1), PairScore(-2, -2)]
    reference = [PairScore(-1, -1), PairScore(-2, -2), PairScore(-2, -1)]
    plain = pair_metrics(policy)
    assert plain["accuracy"] == pytest.approx(1 / 3)  # a tie is a miss
    assert plain["mean_logp_margin"] == pytest.approx(-1 / 3) and "reward_margin" not in plain
    with_reference = pair_metrics(policy, reference, beta=0.1)  # rewards 0.1, -0.2, 0.1
    assert with_reference["reward_margin"] == pytest.approx(0.0, abs=1e-12)
    assert with_reference["reward_accuracy"] == pytest.approx(2 / 3)
    assert pair_metrics([])["accuracy"] is None


def _pair(source: str, kind: str, env: str, chosen: int, rejected: int) -> PairExample:
    return PairExample(source, kind, env, "t", [1, 2], [0, 0], [5] * chosen, [2] * chosen,
                       [6] * rejected, [2] * rejected)


class FakeLengthScorer:
    """FAKE scorer, not a model: log-probability -1 per completion token (shorter wins)."""

    def score(self, pairs):
        return [PairScore(-len(p.chosen_ids), -len(p.rejected_ids)) for p in pairs]


def test_reports_group_by_source_kind_and_env():
    pairs = [_pair("negative", "type_error", "sql", 3, 5), _pair("negative", "type_error", "fs", 6, 5),
             _pair("negative", "logical_error", "sql", 2, 4), _pair("safety", "destroy_data", "sql", 9, 1),
             _pair("repair", "type_error", "fs", 1, 2)]
    scores = FakeLengthScorer().score(pairs)
    report = preference_report(pairs, scores)
    assert report["pairs"] == 5 and report["accuracy"] == pytest.approx(3 / 5)
    assert report["per_source"]["negative"]["accuracy"] == pytest.approx(2 / 3)
    assert report["per_source"]["negative"]["per_kind"]["type_error"]["pairs"] == 2
    assert report["per_source"]["safety"]["accuracy"] == 0.0
    assert report["per_source"]["repair"]["mean_logp_margin"] == 1.0
    assert report["per_env"]["fs"]["accuracy"] == 0.5 and report["per_env"]["sql"]["pairs"] == 3
    negatives = negatives_report(pairs, scores, scores, beta=0.5)
    assert negatives["pairs"] == 3 and negatives["prefer_correct_rate"] == pytest.approx(2 / 3)
    assert negatives["per_kind"]["type_error"]["prefer_correct_rate"] == 0.5
    assert negatives["per_kind"]["logical_error"]["reward_margin"] == 0.0  # policy == reference


def _full_forward_logps(model, pair: PairExample, side: str) -> float:
    ids = pair.prompt_ids + getattr(pair, f"{side}_ids")
    spans = pair.prompt_spans + getattr(pair, f"{side}_spans")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), span_ids=torch.tensor([spans])).logits[0]
    logprobs = torch.log_softmax(logits.double(), -1)
    start = len(pair.prompt_ids)
    return float(logprobs[start - 1:-1].gather(-1, torch.tensor(ids[start:])[:, None]).sum())


@pytest.mark.parametrize("landmark", [False, True])
def test_checkpoint_scorer_equals_full_forwards(pairs, tokenizer, landmark):
    """Pairs of one step (a shared prompt), of another step of that trajectory (a prompt
    that extends it or that it extends), a repair and a safety pair (the system turn shared):
    every cache reuse path, against separate full forwards."""
    ids = special_ids(tokenizer)
    model = tiny_model(vocab_size=1024, split_embeddings=True, use_landmark=landmark,
                       landmark_block_size=32, use_mch=False,
                       tool_call_start_id=ids["tool_call_start"], im_end_id=ids["im_end"])
    sql = [p for p in pairs if p.env == "sql"]
    by_prompt = Counter(tuple(p.prompt_ids) for p in sql if p.source == "negative")
    busiest = list(by_prompt.most_common(1)[0][0])
    same_step = [p for p in sql if p.prompt_ids == busiest]  # one prompt forward
    other_step = next(p for p in sql if p.trajectory_id == same_step[0].trajectory_id
                      and p.source == "negative" and p.prompt_ids != busiest)
    chosen = same_step[:3] + [other_step] + [next(p for p in sql if p.source == source)
                                             for source in ("repair", "safety")]
    assert len(same_step) >= 3  # 1 chosen + 3 rejected completions: two chunks of max_rows
    scores = TorchPairScorer(model, tokenizer, max_rows=3).score(chosen)
    for pair, score in zip(chosen, scores):
        assert score.chosen == pytest.approx(_full_forward_logps(model, pair, "chosen"), abs=1e-4)
        assert score.rejected == pytest.approx(_full_forward_logps(model, pair, "rejected"), abs=1e-4)
    assert len({s.chosen for s in scores}) > 2  # the pairs differ; nothing is a constant
