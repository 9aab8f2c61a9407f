"""The DPO recipe's loss against TRL 1.16 on the same batch: on a plain tiny Qwen2
(modifications off) our loss, chosen/rejected log-probs, rewards, margins and accuracy equal
TRL's DPOTrainer.compute_loss for sigmoid, IPO and sigmoid + SFT (RPO), and label smoothing
is the conservative-DPO mix of TRL's sigmoid loss on the pair and on the swapped pair."""

from __future__ import annotations

import warnings

import pyarrow.parquet as pq
import pytest
import torch

from tests.trainer.helpers import TINY_SHAPE, tiny_model
from trainer.pair_batches import Pairs
from trainer.pair_collate import pair_tensors
from trainer.preference_loss import PreferenceSettings, make_preference_loss_fn
from trainer.readers.preferences import tokenize_pairs
from trainer.recipes.dpo import _per_pair_sums
from trainer.reference import reference_logps
from trainer.tokens import load_tokenizer, special_ids

SOURCES = ("negative", "repair", "safety")


@pytest.fixture(scope="module")
def pairs(pipeline_out, trainer_tokenizer):
    """Six real pairs of every source from the pipeline's preferences/ (short ones)."""
    table = pq.read_table(sorted((pipeline_out / "preferences").glob("part-*.parquet"))[0])
    rows = []
    for source in SOURCES:
        of_source = [i for i, s in enumerate(table.column("source").to_pylist()) if s == source]
        rows += of_source[:2]
    tokenised = tokenize_pairs(table.take(rows), load_tokenizer(str(trainer_tokenizer)), 4096)
    assert tokenised.table.num_rows == 6
    return Pairs.from_table(tokenised.table)


def _models(vocab_size):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ours, ref = tiny_model(0, vocab_size=vocab_size), tiny_model(1, vocab_size=vocab_size)
    fields = {k: v for k, v in TINY_SHAPE.items() if not k.startswith("mch")}
    plain, plain_ref = (Qwen2ForCausalLM(Qwen2Config(**{**fields, "vocab_size": vocab_size}))
                        for _ in range(2))
    plain.load_state_dict(ours.state_dict())
    plain_ref.load_state_dict(ref.state_dict())
    return ours, ref, plain, plain_ref


def _trl(plain, plain_ref, tokenizer_dir, tmp_path, batch_examples, **dpo_args):
    """TRL's DPOTrainer.compute_loss on a collated batch, and the metrics it logged."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    dataset = Dataset.from_dict({"prompt": ["a"], "chosen": ["b"], "rejected": ["c"]})
    args = DPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False,
                     per_device_train_batch_size=len(batch_examples), **dpo_args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = DPOTrainer(model=plain, ref_model=plain_ref, args=args, train_dataset=dataset,
                             processing_class=tokenizer)
    collated = DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id)(batch_examples)
    trainer.model.train()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, collated)
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    return float(loss), metrics, collated


def _ours(ours, ref, pairs, special, settings):
    batch = pair_tensors(pairs, special["pad"], special["tool_call_start"], SOURCES, {})
    ref_chosen, ref_rejected = reference_logps(ref, batch, settings)
    loss_fn = make_preference_loss_fn(batch["input_ids"], batch["completion_mask"], ref_chosen,
                                      ref_rejected, batch["pair_weight"], settings)
    with torch.no_grad():
        out = ours(input_ids=batch["input_ids"], span_ids=batch["span_ids"], use_cache=False,
                   loss_fn=loss_fn)
    sums = _per_pair_sums(out.loss_parts, batch["source_index"], SOURCES)["all"]
    n = sums["pairs"]
    return float(out.loss), {"rewards/chosen": sums["chosen_rewards"] / n,
                             "rewards/rejected": sums["rejected_rewards"] / n,
                             "rewards/margins": sums["margins"] / n,
                             "rewards/accuracies": sums["correct"] / n,
                             "logps/chosen": sums["chosen_logps"] / n,
                             "logps/rejected": sums["rejected_logps"] / n}, batch


def _examples(pairs):
    return [{"prompt_ids": p.tolist(), "chosen_ids": c.tolist(), "rejected_ids": r.tolist()}
            for p, c, r in zip(pairs.prompt_ids, pairs.chosen_ids, pairs.rejected_ids)]


@pytest.mark.parametrize("loss_type,rpo_alpha,trl_args", [
    ("sigmoid", 0.0, {"loss_type": ["sigmoid"]}),
    ("ipo", 0.0, {"loss_type": ["ipo"]}),
    ("sigmoid", 0.3, {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, 0.3]}),
])
def test_loss_logps_rewards_and_margins_equal_trls(pairs, trainer_tokenizer, tmp_path, loss_type,
                                                   rpo_alpha, trl_args):
    special = special_ids(load_tokenizer(str(trainer_tokenizer)))
    ours, ref, plain, plain_ref = _models(1024)
    settings = PreferenceSettings(loss_type, beta=0.5, rpo_alpha=rpo_alpha, chunk_size=64)
    our_loss, our_metrics, batch = _ours(ours, ref, pairs, special, settings)
    trl_loss, trl_metrics, collated = _trl(plain, plain_ref, trainer_tokenizer, tmp_path,
                                           _examples(pairs), beta=0.5, **trl_args)
    width = collated["input_ids"].shape[1]  # the same rows, TRL pads to the longest only
    assert torch.equal(batch["input_ids"][:, :width] * collated["attention_mask"],
                       collated["input_ids"] * collated["attention_mask"])
    assert torch.equal(batch["completion_mask"][:, :width], collated["completion_mask"].bool())
    assert our_loss == pytest.approx(trl_loss, rel=1e-4, abs=1e-5)
    for name, value in our_metrics.items():
        assert value == pytest.approx(trl_metrics[name], rel=1e-4, abs=1e-4), name
    assert abs(our_metrics["rewards/margins"]) > 1e-3  # the reference differs: a real check


def test_label_smoothing_mixes_the_pair_and_the_swapped_pair(pairs, trainer_tokenizer, tmp_path):
    special = special_ids(load_tokenizer(str(trainer_tokenizer)))
    ours, ref, plain, plain_ref = _models(1024)
    eps = 0.2
    smoothed, _, _ = _ours(ours, ref, pairs, special,
                           PreferenceSettings("sigmoid", beta=0.5, label_smoothing=eps))
    swapped = [{**e, "chosen_ids": e["rejected_ids"], "rejected_ids": e["chosen_ids"]}
               for e in _examples(pairs)]
    plain_loss, _, _ = _trl(plain, plain_ref, trainer_tokenizer, tmp_path / "a", _examples(pairs),
                            beta=0.5)
    flipped_loss, _, _ = _trl(plain, plain_ref, trainer_tokenizer, tmp_path / "b", swapped, beta=0.5)
    assert smoothed == pytest.approx((1 - eps) * plain_loss + eps * flipped_loss, rel=1e-4)


def test_source_weights_weigh_pair_losses():
    from trainer.preference_loss import pair_losses, weighted_mean

    settings = PreferenceSettings("sigmoid", beta=1.0)
    chosen, rejected = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    zeros, lengths = torch.zeros(2), torch.ones(2)
    losses = pair_losses(chosen, rejected, zeros, zeros, lengths, lengths, settings)["loss"]
    expected = -torch.nn.functional.logsigmoid(torch.tensor([2.0, -1.0]))
    torch.testing.assert_close(losses, expected)
    weighted = weighted_mean(losses, torch.tensor([3.0, 1.0]))
    assert float(weighted) == pytest.approx(float((3 * expected[0] + expected[1]) / 4))
