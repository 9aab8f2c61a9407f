"""The Ray Train job end to end on pipeline shards: the loss falls, checkpoints are
Hugging Face checkpoints, a rerun resumes (step count, optimizer, loss), and `trainer eval`
runs the result as an agent in a built-in environment."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.config import load_config
from trainer.data_identity import data_identity
from trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
FIRST_STEPS, RESUMED_STEPS = 16, 20


def _config(run_dir, shards, tokenizer, max_steps, *extra):
    return load_config(ROOT / "configs" / "train_tiny.yaml", [
        f"run_dir={run_dir}", f"shards={shards}", f"tokenizer={tokenizer}",
        f"run.max_steps={max_steps}", "run.save_every=8", "run.progress=false",
        "data.max_seq_len=1024", "data.batch_size=4", "model.use_landmark=true",
        "model.landmark_block_size=128",
        "optim.warmup_steps=3", *extra])


@pytest.fixture(scope="module")
def first_run(pipeline_out, trainer_tokenizer, tmp_path_factory):
    from trainer.fit import fit

    run_dir = tmp_path_factory.mktemp("fit") / "tiny"
    result = fit(_config(run_dir, pipeline_out, trainer_tokenizer, FIRST_STEPS))
    return run_dir, result, read_metrics(run_dir / "metrics.jsonl")


def test_loss_falls_on_pipeline_shards(first_run):
    _, result, records = first_run
    assert [r["step"] for r in records] == list(range(1, FIRST_STEPS + 1))
    assert result.data["negative_shards"] == 2 and not result.data["tokenised_in_shards"]
    first = statistics.fmean(r["lm_loss"] for r in records[:4])
    last = statistics.fmean(r["lm_loss"] for r in records[-4:])
    assert last < 0.7 * first, (first, last)
    assert all(r["reason"] > 0 and r["act"] > 0 for r in records if r["lm_loss"] > 0)
    assert all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in records)  # no MFU on CPU
    assert any(r["mch_acc"] is not None for r in records)


def test_checkpoint_is_a_hugging_face_checkpoint(first_run, pipeline_out):
    from transformers import AutoModelForCausalLM

    from trainer.model import AgentQwen2ForCausalLM

    _, result, _ = first_run
    checkpoint = Path(result.checkpoint)
    assert {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt",
            "training.json"} <= {p.name for p in checkpoint.iterdir()}
    trained_on = json.loads((checkpoint / "training.json").read_text())
    assert trained_on["shards"] == [str(Path(pipeline_out).resolve())]
    assert trained_on["recipe"] == "sad" and trained_on["step"] == FIRST_STEPS
    out = trained_on["shards"][0]  # the data it read, recognisable in a copy (test_data_identity)
    assert trained_on["data"] == {out: data_identity(out)} and data_identity(out)["files"] >= 2
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert isinstance(model, AgentQwen2ForCausalLM)
    assert model.config.split_embeddings and model.config.use_landmark and model.config.use_mch
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    assert state["position"]["step"] == FIRST_STEPS


def test_rerun_resumes_step_count_optimizer_and_loss(first_run, pipeline_out, trainer_tokenizer):
    from trainer.fit import fit

    run_dir, _, before = first_run
    # the resumed leg also turns the curriculum on (pacing still below 100% at its end)
    result = fit(_config(run_dir, pipeline_out, trainer_tokenizer, RESUMED_STEPS,
                         "curriculum.enabled=true", "curriculum.start_fraction=0.5",
                         "curriculum.ramp_fraction=1.0"))
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, RESUMED_STEPS + 1))
    resumed = records[FIRST_STEPS:]
    assert resumed[0]["lr"] < before[0]["lr"] * 3  # the schedule continues, no new warmup
    first_loss = statistics.fmean(r["lm_loss"] for r in before[:4])
    assert max(r["lm_loss"] for r in resumed) < 0.7 * first_loss  # no restart from scratch
    assert all(0 < r.get("curriculum_admitted", 0.5) < 1 for r in resumed)
    assert torch.load(Path(result.checkpoint) / "trainer_state.pt",
                      weights_only=False)["position"]["step"] == RESUMED_STEPS


def test_eval_runs_the_checkpoint_as_an_agent(first_run, tmp_path):
    from trainer.__main__ import main

    run_dir, _, _ = first_run
    out = tmp_path / "eval.json"
    assert main(["eval", "--checkpoint", str(run_dir), "--envs", "sql", "--num-tasks", "2",
                 "--irr-tasks", "0", "--max-steps", "2", "--max-new-tokens", "24",
                 "--only", "steps,episodes", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["tasks"]["count"] == 2 and report["step_level"]["trajectories"] == 2
    leak_check = report["tasks"]["leak_check"]  # no --shards: the checkpoint's own data
    assert leak_check["shards_from"] == "checkpoint" and leak_check["training_rows"] > 0
    assert leak_check["shards"] == leak_check["recorded_in_checkpoint"]
    assert leak_check["recorded_data_held_by"] == {out: out for out in leak_check["shards"]}
    assert leak_check["recorded_data_not_held"] == [] and "note" not in leak_check
    summary = report["episodes"]
    assert summary["episodes"] == 2 and 0 <= summary["success_rate"] <= 1
    assert 1 <= summary["mean_steps"] <= 2 and 0 <= summary["syntax_error_rate"] <= 1
    assert report["config"]["decoder"] == "policy" and summary["hybrid"]["mch_scored_turns"] >= 0
    assert sum(summary["failures"].values()) >= 2 - round(2 * summary["success_rate"])
    assert {"mch_switch_rate", "latency_overhead", "by_trigger"} <= set(summary["hybrid"])
    assert "irr" not in report  # IRR is tested in tests/trainer/test_eval_cli.py


def test_batched_eval_refuses_a_checkpoint_it_cannot_decode(first_run):
    from trainer.eval import EvalConfig, evaluate

    run_dir, _, _ = first_run
    with pytest.raises(ValueError, match="split_embeddings and use_landmark.*--decoder policy"):
        evaluate(EvalConfig(checkpoint=str(run_dir), envs=("sql",), num_tasks=1,
                            decoder="batched", steps=False, irr_tasks=0))


def test_unknown_config_field_fails_naming_it(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("run_dir: r\nshards: s\ntokenizer: t\nloss:\n  lamda_act: 2\n")
    completed = subprocess.run([sys.executable, "-m", "trainer", "fit", "--config", str(config),
                                "--set", "optim.lr=1e-3"], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 2
    assert "loss.lamda_act: unknown field" in completed.stderr
