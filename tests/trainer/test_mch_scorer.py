"""The MCH as the consistency filter's scorer (trainer.mch_scorer), found by datagen through its
scorer registry: a tiny random checkpoint with split embeddings and an MCH, real oracle rollouts."""

from __future__ import annotations

import dataclasses

import pytest

from datagen.envs import make_env
from datagen.scorers import make_scorer, registered_scorers
from datagen.teachers.oracle import OracleTeacher
from tests.trainer.helpers import tiny_model
from trainer import tokens
from trainer.mch_scorer import make_mch_scorer


@pytest.fixture(scope="module")
def checkpoint(tiny_tokenizer_dir, tmp_path_factory):
    tokenizer = tokens.TextTokenizer(tiny_tokenizer_dir)
    model = tiny_model(vocab_size=len(tokenizer), use_mch=True, split_embeddings=True,
                       tool_call_start_id=tokens.special_ids(tokenizer)["tool_call_start"])
    out = tmp_path_factory.mktemp("mch-checkpoint")
    model.save_pretrained(out)
    tokenizer.save(out)
    return out


def test_mch_scores_each_rollout_by_its_weakest_call(checkpoint):
    assert "mch" in registered_scorers()
    scorer = make_scorer("mch", {"checkpoint": str(checkpoint)})
    env = make_env("sql")
    rollouts = [OracleTeacher().rollout(env.generate_task(seed, f"sql-{seed}"), env)
                for seed in range(3)]
    scores = scorer(rollouts)
    assert all(score is not None and 0.0 < score < 1.0 for score in scores)
    one_call = dataclasses.replace(rollouts[0], steps=rollouts[0].steps[:1] +
                                   rollouts[0].steps[-1:])
    # the weakest step: dropping calls can only raise the minimum over the prefix's steps
    assert scorer([one_call])[0] >= scores[0] - 1e-6
    answer_only = dataclasses.replace(rollouts[0], steps=rollouts[0].steps[-1:])
    assert scorer([answer_only]) == [None]  # no tool call: nothing for the head to score


def test_mch_scorer_needs_a_checkpoint_with_a_head(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="scorer_options.checkpoint"):
        make_mch_scorer({})
    no_head = tiny_model(vocab_size=1100)
    no_head.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no meta-cognitive head"):
        make_mch_scorer({"checkpoint": str(tmp_path), "tokenizer": str(checkpoint)})


def test_a_checkpoint_whose_config_is_a_fifo_is_refused_not_waited_on(checkpoint, tmp_path):
    """from_pretrained opened a FIFO config.json and waited for a writer forever (in a chunk
    worker: the run hung); the checkpoint check runs first, as in `trainer eval`."""
    import os
    import shutil

    from trainer.checkpoint_check import CheckpointError

    bent = tmp_path / "bent"
    shutil.copytree(checkpoint, bent)
    (bent / "config.json").unlink()
    os.mkfifo(bent / "config.json")
    with pytest.raises(CheckpointError, match="scorer_options.checkpoint .*FIFO"):
        make_mch_scorer({"checkpoint": str(bent)})
