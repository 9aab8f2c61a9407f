"""Builders shared by the trainer tests: tiny models and synthetic teacher top-k columns
written beside real pipeline shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from trainer.model import AgentQwen2Config, AgentQwen2ForCausalLM

TINY_SHAPE = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                  mch_hidden_size=32, mch_num_heads=2)


def tiny_model(seed: int = 0, **overrides) -> AgentQwen2ForCausalLM:
    torch.manual_seed(seed)
    return AgentQwen2ForCausalLM(AgentQwen2Config(**{**TINY_SHAPE, **overrides})).eval()


def write_topk_shards(source: Path, out: Path, k: int, vocab_size: int, seed: int = 0) -> None:
    """Copy tokenised trajectory shards adding synthetic teacher top-k columns: for each
    assistant (REASON/ACT) token, k ids (the true token first) with log-probabilities that
    sum to less than 1 (a tail remains); empty lists elsewhere (tokens the teacher did not
    generate)."""
    rng = np.random.default_rng(seed)
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    for shard in sorted((source / "trajectories").glob("part-*.parquet")):
        table = pq.read_table(shard)
        all_ids, all_lp = [], []
        for ids, spans in zip(table.column("input_ids").to_pylist(), table.column("span_ids").to_pylist()):
            row_ids, row_lp = [], []
            for token, span in zip(ids, spans):
                if span in (1, 2):
                    others = rng.choice(vocab_size, size=k - 1, replace=False)
                    others = [int(o) for o in others if o != token][: k - 1]
                    probs = rng.dirichlet(np.ones(len(others) + 2))[:-1] * 0.95  # drop tail
                    row_ids.append([token] + others)
                    row_lp.append(np.log(probs).astype(np.float32).tolist())
                else:
                    row_ids.append([])
                    row_lp.append([])
            all_ids.append(row_ids)
            all_lp.append(row_lp)
        table = table.append_column("teacher_topk_ids", pa.array(all_ids, pa.list_(pa.list_(pa.int32()))))
        table = table.append_column("teacher_topk_logprobs",
                                    pa.array(all_lp, pa.list_(pa.list_(pa.float32()))))
        pq.write_table(table, out / "trajectories" / shard.name, compression="zstd")
