"""From an LLM teacher's shards to SAD on its distributions: datagen's `hf` teacher (a tiny
random Qwen2 and its own tokenizer) writes exact token ids and raw top-k logprobs, and the
Ray Train job distils from those stored top-k lists (SAD teacher (a)) without re-tokenising.
Shards made with another tokenizer are refused before any work."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trainer.config import load_config
from trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
K = 4


@pytest.fixture(scope="module")
def llm_shards(ray_head, tmp_path_factory):
    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation
    from scripts.make_tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("llm")
    teacher = make_tiny_model(root / "teacher")
    summary = run_generation(GenerateConfig(
        out=str(root / "out"), num_trajectories=8, chunk_size=4, num_workers=1, progress=False,
        envs=[{"name": "sql"}], negatives={"enabled": False},
        teacher={"backend": "hf", "name": "tiny-hf", "hf": {"model": str(teacher)},
                 "sampling": {"temperature": 1.0, "seed": 0, "logprobs": K,
                              "max_tokens_per_turn": 24},
                 "episode": {"max_turns": 2, "on_invalid_turn": "feedback"}}))
    assert summary.complete and summary.counts["trajectories"] == 8
    return teacher, root / "out"


def _config(run_dir, shards, tokenizer, *extra):
    return load_config(ROOT / "configs" / "train_tiny.yaml", [
        f"run_dir={run_dir}", f"shards={shards}", f"tokenizer={tokenizer}",
        "loss.teacher=topk", "model.use_landmark=false", "model.use_mch=false",
        "run.max_steps=4", "run.save_every=4", "run.progress=false", "data.batch_size=2",
        "data.max_seq_len=2048", "optim.warmup_steps=1", *extra])


def test_sad_trains_on_the_hf_teachers_stored_topk(llm_shards, tmp_path):
    from trainer.fit import fit

    teacher, shards = llm_shards
    table = pq.read_table(shards / "trajectories")
    assert set(table.column("tokenizer").to_pylist()) == {str(teacher)}
    generated = sum(1 for row in table.column("teacher_topk_ids").to_pylist()
                    for token in row if len(token) == K)
    assert generated > 0
    result = fit(_config(tmp_path / "run", shards, teacher))
    assert result.data["teacher_topk"] and result.data["tokenised_in_shards"]
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) and r["reason"] > 0 for r in records)


def test_shards_from_another_tokenizer_are_refused_before_work(llm_shards, trainer_tokenizer,
                                                               tmp_path):
    from trainer.data import build_dataset
    from trainer.recipes.sad import data_settings

    teacher, shards = llm_shards
    with pytest.raises(ValueError, match="token ids were made with tokenizer .*data.check_tokenizer"):
        build_dataset(data_settings(_config(tmp_path / "run", shards, trainer_tokenizer)))
