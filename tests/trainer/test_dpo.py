"""The DPO recipe's pieces on real pipeline pairs: one step through the modified model
(gradient reaches the ACT embedding and the MCH, the reference stays frozen), the pair
stream (every pair once per epoch, source filters, drops counted, a shard's sources
mixed before pooling), and the precomputed
reference (a Ray Data pass; the same loss as the frozen copy; reused when complete)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

from tests.trainer.helpers import TINY_SHAPE
from trainer.config import load_config
from trainer.model import AgentQwen2Config, AgentQwen2ForCausalLM
from trainer.model.split_embedding import act_mode_from_spans
from trainer.pair_batches import Pairs
from trainer.pair_collate import pair_tensors
from trainer.readers.preferences import (build_pair_dataset, shuffled_pairs,
                                         training_pair_batches)
from trainer.recipes.dpo import check_start, dpo_step, pair_settings
from trainer.reference import (COMPLETE, build_reference, precompute_reference,
                               preference_settings, reference_logps)
from trainer.tokens import load_tokenizer, special_ids

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("negative", "repair", "safety")


class LocalEngine:
    def __init__(self, model):
        self.unwrapped = self.module = model.train()

    def backward(self, loss):
        loss.backward()


def _special(tokenizer_dir):
    return special_ids(load_tokenizer(str(tokenizer_dir)))


def _checkpoint(tmp_path, tokenizer_dir, **modifications):
    """A tiny modified model saved as the checkpoint DPO starts from."""
    special = _special(tokenizer_dir)
    torch.manual_seed(0)
    config = AgentQwen2Config(**{**TINY_SHAPE, "vocab_size": 1024}, tool_call_start_id=special[
        "tool_call_start"], im_end_id=special["im_end"], **modifications)
    directory = tmp_path / "start"
    AgentQwen2ForCausalLM(config).save_pretrained(directory)
    return directory


def _config(out, tokenizer_dir, start, *extra):
    return load_config(ROOT / "configs" / "dpo_tiny.yaml", [
        f"run_dir={out}/run", f"shards={out}", f"tokenizer={tokenizer_dir}",
        f"model.init_from={start}", "model.use_landmark=false", "data.max_seq_len=2048",
        "dpo.batch_size=3", "dpo.bucket_pool_batches=4",
        # the shipped tiny recipe trains safety pairs with RPO; these tests cover all sources
        "dpo.sources=[negative, repair, safety]", "dpo.rpo_alpha=0", *extra])


def _pool(out, rows=64):
    shard = sorted((out / "preferences").glob("part-*.parquet"))[0]
    table = pq.read_table(shard).slice(0, rows)
    return table.append_column("path", pa.array([str(shard)] * table.num_rows))


def _first_batch(table, settings):
    """The first micro-batch the training stage composes from `table` (a pool)."""
    batches = training_pair_batches(table, settings)
    return Pairs.from_batch_row({name: [batches.column(name)[0].as_py()]
                                 for name in batches.column_names})


def _safety_pool(out):
    """Three safety pairs, one micro-batch: two dangerous (a call rejected) and a benign one (a
    call chosen), so it holds both MCH labels whatever order the stage writes its kinds in (a
    prompt injection's chosen side continues the task with a call: it is left out)."""
    table = _pool(out, rows=100_000)
    safety = table.filter(pc.equal(table.column("source"), "safety"))
    benign = pc.starts_with(safety.column("kind"), "benign_")
    injection = pc.equal(safety.column("kind"), "prompt_injection")
    dangerous = safety.filter(pc.and_(pc.invert(benign), pc.invert(injection)))
    harmless = safety.filter(benign)
    return pa.concat_tables([dangerous.slice(0, 1), harmless.slice(0, 1), dangerous.slice(1, 1)])


def test_a_step_trains_the_act_embedding_and_the_mch_and_not_the_reference(
        pipeline_out, trainer_tokenizer, tmp_path):
    start = _checkpoint(tmp_path, trainer_tokenizer, split_embeddings=True, use_mch=True,
                        use_landmark=True, landmark_block_size=32)
    cfg = _config(pipeline_out, trainer_tokenizer, start, "model.use_landmark=true",
                  "model.landmark_block_size=32")
    special = _special(trainer_tokenizer)
    pairs = _first_batch(_safety_pool(pipeline_out), pair_settings(cfg, None))
    batch = pair_tensors(pairs, special["pad"], special["tool_call_start"], SOURCES, {})
    policy = AgentQwen2ForCausalLM.from_pretrained(start)
    reference = build_reference(cfg, special, 1024, torch.device("cpu"))
    metrics, scored = dpo_step(cfg, LocalEngine(policy), batch, reference, preference_settings(cfg))
    # safety pairs: a dangerous call rejected (MCH label 0), a benign call chosen (label 1)
    assert metrics["mch_steps"] >= 2 and set(scored["mch_step_labels"]) == {0, 1}
    assert metrics["sums"]["all"]["pairs"] == 3 and metrics["sums"]["safety"]["pairs"] == 3
    assert metrics["preference"] == pytest.approx(np.log(2), abs=1e-5)  # policy == reference
    grads = {n: p.grad for n, p in policy.named_parameters() if p.grad is not None}
    act_rows = grads["act_embed_tokens.weight"].abs().sum(1)
    code = act_mode_from_spans(batch["input_ids"], batch["span_ids"], special["tool_call_start"])
    in_code = torch.unique(batch["input_ids"][code & batch["completion_mask"]])
    assert len(in_code) and (act_rows[in_code] > 0).all()  # the completions' calls train it
    never = torch.ones(1024, dtype=torch.bool)
    never[torch.unique(batch["input_ids"][code])] = False
    assert act_rows[never].sum() == 0  # and nothing outside code mode does
    assert all(grads[n].abs().sum() > 0 for n in grads if n.startswith("mch."))
    assert {n for n, _ in policy.named_parameters() if n.startswith("mch.")} <= set(grads)
    assert all(p.grad is None and not p.requires_grad for p in reference.parameters())


def test_the_pair_stream_holds_every_pair_once_and_counts_drops(ray_head, pipeline_out,
                                                                trainer_tokenizer, tmp_path):
    cfg = _config(pipeline_out, trainer_tokenizer, tmp_path, "data.max_seq_len=1024",
                  "dpo.sources=[repair, safety]")
    dataset, info = build_pair_dataset(pair_settings(cfg, None))
    table = pq.read_table(pipeline_out / "preferences")
    wanted = table.filter(pc.is_in(table.column("source"), pa.array(["repair", "safety"])))
    assert info["pairs_per_source"] == {
        s: int(pc.sum(pc.equal(wanted.column("source"), s)).as_py()) for s in ("repair", "safety")}
    seen, dropped, sizes = [], 0, []
    for row in dataset.iter_batches(batch_size=1, batch_format="numpy"):
        pairs = Pairs.from_batch_row(row)
        sizes.append(len(pairs))
        assert 1 <= len(pairs) <= 3 and set(pairs.sources) <= {"repair", "safety"}
        for p, c, r in zip(pairs.prompt_ids, pairs.chosen_ids, pairs.rejected_ids):
            assert len(c) and len(r) and len(p) + max(len(c), len(r)) <= 1024
        seen += pairs.ids
        dropped += pairs.too_long + pairs.empty
    assert len(seen) == len(set(seen)) and set(seen) <= set(wanted.column("id").to_pylist())
    assert len(seen) + dropped == wanted.num_rows and dropped > 0  # 1024 tokens drops some
    # pools are cut after the drops: a short batch is a block's last (one per shard at most)
    shards = len(list((pipeline_out / "preferences").glob("part-*.parquet")))
    assert sum(size < 3 for size in sizes) <= shards


def test_pools_mix_the_whole_shard_not_its_first_rows(pipeline_out, trainer_tokenizer, tmp_path):
    """A shard holds its negatives first and its repair and safety pairs last: before the
    shuffle, a run's first pools were negatives of one trajectory only."""
    shard = sorted((pipeline_out / "preferences").glob("part-*.parquet"))[0]
    table = pq.read_table(shard)
    sources = table.column("source").to_pylist()
    first_other = next(i for i, source in enumerate(sources) if source != "negative")
    settings = pair_settings(_config(pipeline_out, trainer_tokenizer, tmp_path), None)
    assert first_other >= settings.pairs_per_batch * settings.bucket_pool_batches  # the layout
    shuffled = shuffled_pairs(table, settings)
    pool = shuffled.slice(0, settings.pairs_per_batch * settings.bucket_pool_batches)
    assert set(pool.column("source").to_pylist()) > {"negative"}
    assert len(set(pool.column("trajectory_id").to_pylist())) > 1
    assert sorted(shuffled.column("id").to_pylist()) == sorted(table.column("id").to_pylist())
    again = shuffled_pairs(table, settings)  # same seed, same order (resume)
    assert again.column("id").to_pylist() == shuffled.column("id").to_pylist()
    other = shuffled_pairs(table, pair_settings(_config(pipeline_out, trainer_tokenizer,
                                                        tmp_path, "run.seed=1"), None))
    assert other.column("id").to_pylist() != shuffled.column("id").to_pylist()
    only = shuffled_pairs(table, pair_settings(_config(
        pipeline_out, trainer_tokenizer, tmp_path, "dpo.sources=[safety]"), None))
    assert set(only.column("source").to_pylist()) == {"safety"}


def test_precomputed_reference_gives_the_frozen_copys_loss(ray_head, pipeline_out,
                                                          trainer_tokenizer, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(pipeline_out, out)
    start = _checkpoint(tmp_path, trainer_tokenizer, split_embeddings=True, use_mch=True)
    # repairs and safety pairs only: the pass runs the reference over every pair (CPU time)
    cfg = _config(out, trainer_tokenizer, start, "dpo.reference=precomputed",
                  "dpo.reference_batch_size=5", "dpo.sources=[repair, safety]")
    directory = Path(precompute_reference(cfg, pair_settings(cfg, None)))
    assert directory.parent == out / "reference_logps" and (directory / COMPLETE).exists()
    parts = sorted(p.name for p in directory.glob("part-*.parquet"))
    assert parts == sorted(p.name for p in (out / "preferences").glob("part-*.parquet"))
    stamps = [p.stat().st_mtime_ns for p in sorted(directory.glob("part-*.parquet"))]
    assert precompute_reference(cfg, pair_settings(cfg, None)) == str(directory)  # reused
    assert stamps == [p.stat().st_mtime_ns for p in sorted(directory.glob("part-*.parquet"))]
    special = _special(trainer_tokenizer)
    pool = _pool(out, rows=100_000)
    stored = _first_batch(pool, pair_settings(cfg, str(directory)))
    plain = _first_batch(pool, pair_settings(cfg, None))
    assert stored.ids == plain.ids and np.isnan(plain.ref_chosen).all()
    batch = pair_tensors(stored, special["pad"], special["tool_call_start"], SOURCES, {})
    reference = build_reference(cfg, special, 1024, torch.device("cpu"))
    settings = preference_settings(cfg)
    chosen, rejected = reference_logps(reference, batch, settings)
    torch.testing.assert_close(batch["ref_chosen"].float(), chosen, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(batch["ref_rejected"].float(), rejected, rtol=1e-5, atol=1e-4)
    losses = []
    for ref in (reference, None):
        policy = AgentQwen2ForCausalLM.from_pretrained(start)
        metrics, _ = dpo_step(cfg, LocalEngine(policy), batch, ref, settings)
        losses.append(metrics["loss"])
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    other = _config(out, trainer_tokenizer, start, "dpo.reference=precomputed",
                    "dpo.sources=[repair, safety]", "data.max_seq_len=1024")
    from trainer.reference import reference_dir, reference_key

    assert reference_dir(other, reference_key(other)) != str(directory)  # another key, dir


def test_a_model_section_unlike_the_start_checkpoint_is_refused(tmp_path):
    start = tmp_path / "sad"
    start.mkdir()
    saved = {"model_type": "agent_qwen2", "split_embeddings": True, "use_landmark": False,
             "landmark_block_size": 64, "use_mch": True}
    (start / "config.json").write_text(json.dumps(saved))

    def config(*extra):
        return load_config(ROOT / "configs" / "dpo_tiny.yaml",
                           [f"model.init_from={start}", f"shards={tmp_path}", *extra])

    check_start(config())  # the shipped config matches a tiny SAD run
    check_start(config("model.landmark_block_size=32"))  # unused with landmark off
    with pytest.raises(ValueError, match=r"model.use_landmark=True but the checkpoint has False"):
        check_start(config("model.use_landmark=true"))
    with pytest.raises(ValueError, match=r"model.use_mch=False"):
        check_start(config("model.use_mch=false"))
    (start / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    check_start(config("model.use_landmark=true"))  # a plain Qwen2 start takes any
