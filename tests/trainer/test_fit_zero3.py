"""The 32B recipe's code path at tiny size on CPU: a Ray Train job with DeepSpeed ZeRO-3
(DeepSpeed's CPU accelerator) that starts from a released-style plain Qwen2 checkpoint
(`init_from`: weights partitioned while loading, the ACT embedding gathered and copied from
the base embedding), writes Hugging Face checkpoints gathered from the shards, and resumes
from DeepSpeed's sharded state. Skipped where DeepSpeed is not installed (optional extra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")

from trainer.config import load_config  # noqa: E402
from trainer.metrics import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ZERO3_CPU = {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
                                   "stage3_param_persistence_threshold": 0},
             "steps_per_print": 1000000}


def _plain_qwen2(directory: Path, vocab_size: int) -> dict[str, torch.Tensor]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(3)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, hidden_size=64,
                                         intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=4096))
    model.save_pretrained(directory)
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def _config(tmp_path, pipeline_out, tokenizer, init_from, max_steps):
    ds_json = tmp_path / "zero3_cpu.json"
    ds_json.write_text(json.dumps(ZERO3_CPU))
    return load_config(ROOT / "configs" / "train_tiny.yaml", [
        f"run_dir={tmp_path / 'run'}", f"shards={pipeline_out}", f"tokenizer={tokenizer}",
        f"model.init_from={init_from}", "model.use_landmark=false", f"run.max_steps={max_steps}",
        "run.save_every=3", "run.progress=false", "data.max_seq_len=1024", "data.batch_size=2",
        "optim.warmup_steps=1", "scaling.strategy=deepspeed",
        f"scaling.deepspeed_config={ds_json}"])


def test_zero3_job_starts_from_a_plain_qwen2_checkpoint_and_resumes(
        pipeline_out, trainer_tokenizer, tmp_path):
    from trainer.fit import fit
    from trainer.model import AgentQwen2ForCausalLM
    from trainer.tokens import load_tokenizer

    released = tmp_path / "released"
    base = _plain_qwen2(released, len(load_tokenizer(str(trainer_tokenizer))))
    first = fit(_config(tmp_path, pipeline_out, trainer_tokenizer, released, 3))
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["loss"] == r["loss"] and r["act"] > 0 for r in records)  # finite, ACT trained

    checkpoint = Path(first.checkpoint)
    assert (checkpoint / "deepspeed").is_dir()
    trained = AgentQwen2ForCausalLM.from_pretrained(checkpoint)
    assert trained.config.split_embeddings and trained.config.use_mch
    weights = trained.state_dict()
    for name in ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight"):
        assert weights[name].shape == base[name].shape
        assert 0 < (weights[name] - base[name]).abs().max() < 0.5  # trained from, not replaced
    # the ACT embedding started as a copy of the released base embedding
    start = base["model.embed_tokens.weight"]
    assert (weights["act_embed_tokens.weight"] - start).abs().mean() < 0.1 * start.abs().mean()

    resumed = fit(_config(tmp_path, pipeline_out, trainer_tokenizer, released, 5))
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records][-2:] == [4, 5]
    assert torch.load(Path(resumed.checkpoint) / "trainer_state.pt",
                      weights_only=False)["position"]["step"] == 5


def test_zero3_refuses_a_checkpoint_holding_nan_as_it_loads(ray_head, pipeline_out,
                                                             trainer_tokenizer, tmp_path, capsys):
    """Under ZeRO-3 each rank checks its partition of the weights as loaded (`ds_tensor`,
    trainer.checkpoint_check): a nan in the released checkpoint is named with its file and
    tensor, not trained on (a step-1 divergence advising a lower optim.lr), and not
    restarted under run.max_failures."""
    from safetensors.torch import load_file, save_file

    from tests.trainer.test_fit_bad_data import _fit
    from trainer.tokens import load_tokenizer

    released = tmp_path / "released"
    _plain_qwen2(released, len(load_tokenizer(str(trainer_tokenizer))))
    weights = load_file(released / "model.safetensors")
    weights["model.layers.1.mlp.down_proj.weight"][0, :3] = float("nan")
    save_file(weights, released / "model.safetensors", metadata={"format": "pt"})
    ds_json = tmp_path / "zero3_cpu.json"
    ds_json.write_text(json.dumps(ZERO3_CPU))
    code, last = _fit(pipeline_out, trainer_tokenizer, tmp_path, capsys,
                      f"model.init_from={released}", "model.use_landmark=false",
                      "data.max_seq_len=1024", "scaling.strategy=deepspeed",
                      f"scaling.deepspeed_config={ds_json}", "run.max_failures=2")
    assert code == 1
    assert last == (f"training failed: bad checkpoint: {released}/model.safetensors: tensor "
                    f"model.layers.1.mlp.down_proj.weight holds 3 nan or inf values (of 8,192, "
                    f"in float32); start from a checkpoint whose weights are finite"), last
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before any step
