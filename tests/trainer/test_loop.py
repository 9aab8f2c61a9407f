"""One training step (trainer.loop.forward_backward) with each teacher source and PCGrad,
on a local engine that does what DDPEngine does on one worker, without Ray."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from tests.trainer.helpers import tiny_model
from trainer.config import load_config
from trainer.loop import forward_backward

ROOT = Path(__file__).resolve().parents[2]


class LocalEngine:
    def __init__(self, model):
        self.unwrapped = self.module = model.train()

    def no_sync(self):
        return contextlib.nullcontext()

    def backward(self, loss):
        loss.backward()


def _config(*overrides):
    return load_config(ROOT / "configs" / "train_tiny.yaml",
                       ["run_dir=r", "shards=s", "tokenizer=t", *overrides])


def _batch(vocab=320, length=64, k=4):
    g = torch.Generator().manual_seed(0)
    spans = torch.tensor([[0] * 16 + [1] * 12 + [2] * 10 + [3] * 10 + [1] * 8 + [2] * 8] * 2)
    ids = torch.randint(10, vocab, spans.shape, generator=g)
    ids[:, 29] = 5  # <tool_call> inside the first ACT span
    present = (spans == 1) | (spans == 2)
    topk_ids = torch.randint(0, vocab, (2, length, k), generator=g)
    topk_ids[..., 0] = ids
    return {"input_ids": ids, "span_ids": spans, "lm_weight": torch.tensor([1.0, 0.0]),
            "complexity": torch.zeros(2), "mch_positions": torch.tensor([[37], [37]]),
            "mch_labels": torch.tensor([[1], [0]]), "topk_ids": topk_ids,
            "topk_logprobs": torch.log_softmax(torch.randn(2, length, k + 1, generator=g), -1)[..., :k],
            "topk_present": present}


def _model():
    return tiny_model(split_embeddings=True, use_mch=True, tool_call_start_id=5, im_end_id=6)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("teacher", ["onehot", "topk"])
def test_step_reports_span_losses_and_trains_the_heads(teacher):
    model = _model()
    metrics = forward_backward(_config(f"loss.teacher={teacher}"), LocalEngine(model), _batch(), None)
    assert metrics["reason"] > 0 and metrics["act"] > 0 and metrics["mch_steps"] == 2
    assert metrics["tokens"] == 128 and metrics["reason_tokens"] == 20  # 12 + 8 in row 1; row 2 is a negative
    grads = _grads(model)
    assert grads["act_embed_tokens.weight"].abs().sum() > 0 and grads["mch.score.weight"].abs().sum() > 0


def test_online_teacher_step(tmp_path):
    teacher = tiny_model(seed=7).eval()
    teacher.save_pretrained(tmp_path)
    model = _model()
    cfg = _config("loss.teacher=online", f"loss.teacher_model={tmp_path}")
    metrics = forward_backward(cfg, LocalEngine(model), _batch(), teacher)
    assert metrics["reason"] > 0 and all(torch.isfinite(g).all() for g in _grads(model).values())


def test_pcgrad_equals_plain_backward_when_gradients_agree():
    plain, projected = _model(), _model()
    batch = _batch()
    forward_backward(_config(), LocalEngine(plain), batch, None)
    metrics = forward_backward(_config("loss.pcgrad=true"), LocalEngine(projected), batch, None)
    a, b = _grads(plain), _grads(projected)
    assert set(a) <= set(b)
    if not metrics["pcgrad_conflict"]:
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6)
    else:  # projected: the update differs, but only by removing the conflicting component
        assert any(not torch.allclose(a[n], b[n]) for n in a)
