"""Session fixtures for the trainer tests: pipeline shards (untokenised, tokenised, with
synthetic teacher top-k; the pipeline writes negatives, repairs and preference pairs) and a
tokenizer built from them with scripts/build_tokenizer.py. Generation uses the session's Ray
head (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.helpers import write_topk_shards
from tests.conftest import load_script

NUM_TRAJECTORIES = 96


def _generate(out: Path, tokenizer: str | None = None) -> Path:
    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation

    summary = run_generation(GenerateConfig(out=str(out), num_trajectories=NUM_TRAJECTORIES,
                                            chunk_size=48, progress=False, tokenizer=tokenizer,
                                            envs=[{"name": "sql"}]))
    assert summary.complete and summary.counts["trajectories"] == NUM_TRAJECTORIES
    return out


def _build_tokenizer_script():
    return load_script("scripts/build_tokenizer.py")


@pytest.fixture(scope="session")
def pipeline_out(ray_head, tmp_path_factory) -> Path:
    """OUT/ from the pipeline without a tokenizer (the trainer tokenises)."""
    return _generate(tmp_path_factory.mktemp("trainer") / "out")


@pytest.fixture(scope="session")
def trainer_tokenizer(pipeline_out, tmp_path_factory) -> Path:
    """A 1k BPE built by scripts/build_tokenizer.py from the shards' text column."""
    directory = tmp_path_factory.mktemp("trainer_tokenizer")
    assert _build_tokenizer_script().main(["--shards", str(pipeline_out / "trajectories"),
                                           "--out", str(directory), "--vocab-size", "1000"]) == 0
    return directory


@pytest.fixture(scope="session")
def tokenized_out(pipeline_out, trainer_tokenizer, tmp_path_factory) -> Path:
    """The same run generated with the tokenizer set: rows carry input_ids / span_ids."""
    return _generate(tmp_path_factory.mktemp("trainer") / "out_tok", str(trainer_tokenizer))


@pytest.fixture(scope="session")
def topk_out(tokenized_out, tmp_path_factory) -> Path:
    """Tokenised shards plus synthetic teacher_topk_ids / teacher_topk_logprobs columns."""
    out = tmp_path_factory.mktemp("trainer") / "out_topk"
    write_topk_shards(tokenized_out, out, k=4, vocab_size=1000)
    return out
