"""The chain SAD -> DPO as Ray Train jobs on CPU: a short SAD run, then `recipe: dpo` from
its run directory (configs/dpo_tiny.yaml) writes per-step preference metrics overall and per
source; the 32B recipe's path (precomputed reference, DeepSpeed ZeRO-3 with its CPU
accelerator) starts at the frozen copy's loss; the trajectory anchor (dpo.anchor_weight, on in
the shipped file) adds a SAD loss on a second stream, and a rerun resumes the step count and
both streams in place without training a micro-batch twice."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainer.config import load_config
from trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
FIRST_STEPS, RESUMED_STEPS = 3, 5
SMALL = ["run.progress=false", "model.use_landmark=false", "data.max_seq_len=1536",
         "optim.warmup_steps=2", "optim.lr=3e-3"]
# the shipped tiny recipe trains repair + safety pairs with RPO; these tests cover every source
ALL_SOURCES = ["dpo.sources=[negative, repair, safety]", "dpo.rpo_alpha=0"]
PLAIN = ["dpo.anchor_weight=0"]  # preference pairs alone
ANCHOR = ["dpo.anchor_weight=2.0"]


@pytest.fixture(scope="module")
def sad_run(pipeline_out, trainer_tokenizer, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp("chain") / "sad"
    fit(load_config(ROOT / "configs" / "train_tiny.yaml", [
        f"run_dir={run_dir}", f"shards={pipeline_out}", f"tokenizer={trainer_tokenizer}",
        "run.max_steps=2", "data.batch_size=2", *SMALL]))
    return run_dir


def _dpo_config(run_dir, sad_run, pipeline_out, trainer_tokenizer, max_steps, *extra):
    return load_config(ROOT / "configs" / "dpo_tiny.yaml", [
        f"run_dir={run_dir}", f"shards={pipeline_out}", f"tokenizer={trainer_tokenizer}",
        f"model.init_from={sad_run}", f"run.max_steps={max_steps}", "run.save_every=1",
        "dpo.batch_size=2", "dpo.bucket_pool_batches=4", *SMALL, *ALL_SOURCES, *extra])


@pytest.fixture(scope="module")
def dpo_run(sad_run, pipeline_out, trainer_tokenizer, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp("chain") / "dpo"
    result = fit(_dpo_config(run_dir, sad_run, pipeline_out, trainer_tokenizer, FIRST_STEPS,
                             *PLAIN))
    return run_dir, result, read_metrics(run_dir / "metrics.jsonl")


def test_dpo_from_a_sad_checkpoint_writes_preference_metrics(dpo_run, sad_run):
    run_dir, result, records = dpo_run
    assert [r["step"] for r in records] == list(range(1, FIRST_STEPS + 1))
    assert result.data["reference"] == "model" and sum(result.data["pairs_per_source"].values())
    first = records[0]
    # the policy starts as its reference (the SAD checkpoint): rewards 0, loss log 2
    assert first["dpo_loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert first["rewards/margins"] == pytest.approx(0, abs=1e-5)
    for record in records:
        assert {"loss", "rewards/chosen", "rewards/rejected", "rewards/margins",
                "rewards/accuracies", "logps/chosen", "logps/rejected", "mch", "sources",
                "tokens_per_s", "batches"} <= set(record)
        assert record["pairs"] == sum(s["pairs"] for s in record["sources"].values()) == 2
        assert set(record["sources"]) == {"negative", "repair", "safety"}
        assert math.isfinite(record["loss"]) and record["logps/chosen"] < 0
    assert any(abs(r["rewards/margins"]) > 0 for r in records[1:])  # the policy moved
    assert any(r["mch_steps"] > 0 for r in records)
    checkpoint = Path(result.checkpoint)
    assert {"config.json", "model.safetensors", "trainer_state.pt"} <= {p.name for p in checkpoint.iterdir()}


def test_zero3_with_a_precomputed_reference_starts_at_the_frozen_copys_loss(
        sad_run, pipeline_out, trainer_tokenizer, tmp_path):
    pytest.importorskip("deepspeed")
    from trainer.fit import fit

    ds_json = tmp_path / "zero3_cpu.json"
    ds_json.write_text(json.dumps({"zero_optimization": {
        "stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
        "stage3_param_persistence_threshold": 0}, "steps_per_print": 1000000}))
    run_dir, cache = tmp_path / "dpo_zero3", tmp_path / "reference"
    # safety pairs only: the reference pass scores every pair it trains on (CPU time)
    result = fit(_dpo_config(run_dir, sad_run, pipeline_out, trainer_tokenizer, 1,
                             "dpo.reference=precomputed", f"dpo.reference_dir={cache}",
                             "dpo.sources=[safety]", "scaling.strategy=deepspeed", *PLAIN,
                             f"scaling.deepspeed_config={ds_json}"))
    records = read_metrics(run_dir / "metrics.jsonl")
    assert result.data["reference"] == "precomputed" and (cache / "_COMPLETE").exists()
    assert [r["step"] for r in records] == [1] and records[0]["sources"]["safety"]["pairs"] == 2
    assert records[0]["dpo_loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert (Path(result.checkpoint) / "model.safetensors").exists()  # gathered from the shards


@pytest.fixture(scope="module")
def anchored_run(sad_run, pipeline_out, trainer_tokenizer, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp("chain") / "dpo_anchor"
    result = fit(_dpo_config(run_dir, sad_run, pipeline_out, trainer_tokenizer, FIRST_STEPS,
                             *ANCHOR))
    return run_dir, result, read_metrics(run_dir / "metrics.jsonl")


def test_anchor_adds_a_sad_loss_on_trajectories_to_each_step(anchored_run, dpo_run):
    _, result, records = anchored_run
    _, _, plain = dpo_run
    # dpo.anchor_batch_size (2) trajectories per anchor micro-batch, not data.batch_size (4)
    assert result.data["anchor"]["tables"] == ["trajectories"]
    assert result.data["anchor"]["batch_size"] == 2
    for record in records:
        anchor = record["anchor"]
        assert anchor["reason_tokens"] > 0 and anchor["act_tokens"] > 0
        assert math.isfinite(anchor["lm_loss"]) and anchor["lm_loss"] > 0
        assert len(record["anchor_batches"]) == 1
        # the step's objective: pairs (rpo_alpha 0: the DPO loss) + MCH + 2 x the anchor's
        assert record["loss"] == pytest.approx(
            record["dpo_loss"] + 0.5 * record["mch"] + 2.0 * anchor["loss"], abs=1e-4)
    # the same pairs in the same order as without the anchor; step 1 from the same start is
    # the same, step 2 is not: the anchor's gradient moved the policy too
    assert [r["batches"] for r in records] == [r["batches"] for r in plain]
    assert records[0]["logps/chosen"] == pytest.approx(plain[0]["logps/chosen"], abs=1e-4)
    assert records[1]["logps/chosen"] != pytest.approx(plain[1]["logps/chosen"], abs=1e-3)


def test_anchored_rerun_resumes_both_streams_in_place(anchored_run, sad_run, pipeline_out,
                                                      trainer_tokenizer):
    from trainer.fit import fit

    run_dir, _, before = anchored_run
    fit(_dpo_config(run_dir, sad_run, pipeline_out, trainer_tokenizer, RESUMED_STEPS, *ANCHOR))
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, RESUMED_STEPS + 1))
    assert records[:FIRST_STEPS] == before
    for stream in ("batches", "anchor_batches"):  # the pairs and the anchor's trajectories
        first_leg = {h for r in before for h in r[stream]}
        resumed = [h for r in records[FIRST_STEPS:] for h in r[stream]]
        assert len(resumed) == RESUMED_STEPS - FIRST_STEPS and not set(resumed) & first_leg
    assert records[FIRST_STEPS]["epoch"] == 0  # the same epoch, continued
    # the schedule continues (warmup 2, cosine to step 5, floor 0.1): step 4 runs at factor
    # 0.1 + 0.9 * (1 + cos(pi / 3)) / 2 = 0.775 of 3e-3; a restarted warmup would give 0.5
    assert records[FIRST_STEPS]["lr"] == pytest.approx(3e-3 * 0.775)
