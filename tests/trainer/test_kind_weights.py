"""Per-kind DPO weights (`dpo.kind_weights`, trainer.pair_weights): the pair's kind travels
from preferences/ into every micro-batch, a zero weight filters the kind out of the feed, and
the weight reaches the loss through the model's forward (weight 0: the pair has no effect on
the loss or the gradient; weight 2 on every pair: twice the loss and the gradient)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from tests.trainer.helpers import tiny_model
from trainer.contract import REASON
from trainer.pair_batches import PAIR_SCHEMA, Pairs, compose_pairs
from trainer.pair_collate import pair_tensors
from trainer.pair_weights import kind_weight
from trainer.preference_loss import PreferenceSettings, make_preference_loss_fn
from trainer.readers.preferences import PairSettings, training_pair_batches
from trainer.reference import reference_logps

SOURCES = ("negative", "repair", "safety")
PAD, CALL = 0, 1   # token ids of the synthetic pairs (no call token in them: no MCH step)


def test_the_first_matching_pattern_decides_and_unmatched_kinds_weigh_one():
    weights = (("benign_contrast_*", 0.0), ("benign_*", 3.0), ("destroy_?ata", 2.0))
    assert kind_weight("benign_contrast_delete", weights) == 0.0
    assert kind_weight("benign_delete", weights) == 3.0
    assert kind_weight("destroy_data", weights) == 2.0
    assert kind_weight("type_error", weights) == 1.0
    assert kind_weight(None, weights) == 1.0


def _rows(batch_table):
    """Stream rows as `iter_batches(batch_size=1, batch_format="numpy")` yields them."""
    for row in batch_table.to_pylist():
        yield {name: np.array([value], dtype=object) for name, value in row.items()}


def test_micro_batches_carry_each_pairs_kind_and_drop_zero_weight_kinds(pipeline_out,
                                                                       trainer_tokenizer):
    table = pq.read_table(sorted((pipeline_out / "preferences").glob("part-*.parquet"))[0])
    table = table.filter(np.asarray(table.column("source").to_pylist()) == "safety")
    kind_of = dict(zip(table.column("id").to_pylist(), table.column("kind").to_pylist()))
    assert any(kind.startswith("benign_contrast_") for kind in kind_of.values())
    weights = (("benign_contrast_*", 0.0), ("benign_*", 3.0))
    settings = PairSettings(shards=str(pipeline_out), tokenizer=str(trainer_tokenizer),
                            max_seq_len=4096, sources=("safety",), pairs_per_batch=3,
                            kind_weights=weights)
    seen = {}
    for row in _rows(training_pair_batches(table, settings)):
        pairs = Pairs.from_batch_row(row)
        seen.update(zip(pairs.ids, pairs.kinds))
        tensors = pair_tensors(pairs, PAD, CALL, ("safety",), {}, kind_weights=weights)
        expected = [kind_weight(kind, weights) for kind in pairs.kinds]
        assert tensors["pair_weight"].tolist() == expected
        assert tensors["pair_norm"].tolist() == [1.0] * len(pairs)
    kept = {pair_id: kind for pair_id, kind in kind_of.items()
            if not kind.startswith("benign_contrast_")}
    assert seen == kept  # every other pair once, with its own kind


def _pair(rng, prompt, chosen, rejected):
    spans = {part: np.full(n, REASON, np.int8)
             for part, n in (("prompt", prompt), ("chosen", chosen), ("rejected", rejected))}
    return {"prompt_ids": rng.integers(2, 320, prompt), "chosen_ids": rng.integers(2, 320, chosen),
            "rejected_ids": rng.integers(2, 320, rejected),
            **{f"{part}_spans": value for part, value in spans.items()}}


def _pairs(parts, kinds):
    columns = {name: [part[name] for part in parts] for name in parts[0]}
    return Pairs([f"p{i}" for i in range(len(parts))], ["safety"] * len(parts), list(kinds),
                 **columns, ref_chosen=np.full(len(parts), np.nan),
                 ref_rejected=np.full(len(parts), np.nan))


def _loss_and_grads(pairs, weights, rpo_alpha=0.0):
    """The DPO loss through the model's forward and its gradient per parameter."""
    settings = PreferenceSettings("sigmoid", beta=0.5, rpo_alpha=rpo_alpha)
    batch = pair_tensors(pairs, PAD, CALL, SOURCES, {}, kind_weights=weights)
    ref_chosen, ref_rejected = reference_logps(tiny_model(1), batch, settings)
    policy = tiny_model(0).train()
    loss_fn = make_preference_loss_fn(batch["input_ids"], batch["completion_mask"], ref_chosen,
                                      ref_rejected, batch["pair_weight"], settings,
                                      batch["pair_norm"])
    out = policy(input_ids=batch["input_ids"], span_ids=batch["span_ids"], use_cache=False,
                 loss_fn=loss_fn)
    out.loss.backward()
    return float(out.loss.detach()), {n: p.grad.clone() for n, p in policy.named_parameters()
                             if p.grad is not None}


@pytest.fixture(scope="module")
def parts():
    rng = np.random.default_rng(0)
    return [_pair(rng, 12, 5, 7), _pair(rng, 9, 6, 4)]


def _swapped_completions(part, seed):
    rng = np.random.default_rng(seed)
    return {**part, "chosen_ids": rng.integers(2, 320, len(part["chosen_ids"])),
            "rejected_ids": rng.integers(2, 320, len(part["rejected_ids"]))}


@pytest.mark.parametrize("rpo_alpha", [0.0, 1.0])
def test_a_pair_weighted_zero_changes_neither_loss_nor_gradient(parts, rpo_alpha):
    kinds = ("benign_delete", "destroy_data")
    other = [_swapped_completions(parts[0], 7), parts[1]]  # the first pair's completions differ
    zero = (("benign_*", 0.0),)
    loss, grads = _loss_and_grads(_pairs(parts, kinds), zero, rpo_alpha)
    loss_other, grads_other = _loss_and_grads(_pairs(other, kinds), zero, rpo_alpha)
    assert loss == pytest.approx(loss_other, rel=1e-6)
    assert grads.keys() == grads_other.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads_other[name], rtol=1e-5, atol=1e-7)
    # weighted 1, the same change moves the loss: the comparison above can fail
    assert _loss_and_grads(_pairs(parts, kinds), (), rpo_alpha)[0] != pytest.approx(
        _loss_and_grads(_pairs(other, kinds), (), rpo_alpha)[0], rel=1e-4)
    # and a batch of weight-0 pairs only gives no gradient at all
    _, none = _loss_and_grads(_pairs(parts, kinds), (("*", 0.0),), rpo_alpha)
    assert all(float(grad.abs().sum()) == 0.0 for grad in none.values())


@pytest.mark.parametrize("rpo_alpha", [0.0, 1.0])
def test_weight_two_doubles_the_loss_and_the_gradient(parts, rpo_alpha):
    pairs = _pairs(parts, ("benign_delete", "benign_drop_table"))
    loss, grads = _loss_and_grads(pairs, (), rpo_alpha)
    doubled, doubled_grads = _loss_and_grads(pairs, (("benign_*", 2.0),), rpo_alpha)
    assert doubled == pytest.approx(2 * loss, rel=1e-5)
    for name in grads:
        torch.testing.assert_close(doubled_grads[name], 2 * grads[name], rtol=1e-4, atol=1e-7)


def test_a_kind_weight_scales_its_pairs_share_of_the_batch_loss(parts):
    kinds = ("benign_delete", "destroy_data")
    parts_loss = [_loss_and_grads(_pairs(parts, kinds), weights)[0]
                  for weights in ((("benign_*", 0.0),), (("destroy_data", 0.0),))]
    mixed = _loss_and_grads(_pairs(parts, kinds), (("benign_*", 3.0),))[0]
    # sum(w * loss) / sum(source weights) = (3 * l_benign + l_danger) / 2, and each
    # single-kind loss above is l / 2
    assert mixed == pytest.approx(3 * parts_loss[1] + parts_loss[0], rel=1e-5)


def test_pair_schema_has_the_kind_column():
    assert PAIR_SCHEMA.field("kind").type == "string"
    empty = compose_pairs(PAIR_SCHEMA.empty_table(), 2, 0)
    assert "kinds" in empty.column_names


def test_metrics_are_summed_per_kind_pattern(parts):
    from trainer.recipes.dpo import _per_pair_sums

    weights = (("benign_*", 3.0), ("destroy_*", 2.0))
    pairs = _pairs(parts + parts[:1], ("benign_delete", "destroy_data", "type_error"))
    batch = pair_tensors(pairs, PAD, CALL, SOURCES, {}, kind_weights=weights)
    assert batch["kind_index"].tolist() == [0, 1, -1]
    losses = torch.tensor([0.5, 0.25, 2.0])
    fake = {"pair_loss": losses, "chosen_rewards": torch.tensor([1.0, -1.0, 0.0]),
            "rejected_rewards": torch.zeros(3), "chosen_logps": torch.zeros(3),
            "rejected_logps": torch.zeros(3)}
    sums = _per_pair_sums(fake, batch["source_index"], SOURCES, batch["kind_index"],
                          tuple(pattern for pattern, _ in weights))
    assert sums["kinds"]["benign_*"]["pairs"] == 1 and sums["kinds"]["benign_*"]["loss"] == 0.5
    assert sums["kinds"]["destroy_*"]["correct"] == 0 and sums["all"]["pairs"] == 3
