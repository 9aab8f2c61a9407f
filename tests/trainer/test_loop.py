"""One training step (trainer.recipes.sad.forward_backward) with each teacher source and PCGrad,
on a local engine that does what DDPEngine does on one worker, without Ray."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from tests.trainer.helpers import tiny_model
from trainer.config import load_config
from trainer.collate import Documents
from trainer.recipes.sad import admit, embedding_mode, forward_backward, load_teacher
from trainer.losses import balanced_mch_loss
from trainer.metrics import RunningAUROC, auroc

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
    metrics, scored = forward_backward(_config(f"loss.teacher={teacher}"), LocalEngine(model),
                                       _batch(), None)
    assert metrics["reason"] > 0 and metrics["act"] > 0 and metrics["mch_steps"] == 2
    assert metrics["mch_negatives"] == 1 and scored["mch_step_labels"] == [1, 0]
    assert len(scored["mch_scores"]) == 2
    assert metrics["tokens"] == 128 and metrics["lm_tokens"] == 64  # the negative row is not LM
    assert metrics["reason_tokens"] == 20  # 12 + 8 in row 1; row 2 is a negative
    grads = _grads(model)
    assert grads["act_embed_tokens.weight"].abs().sum() > 0 and grads["mch.score.weight"].abs().sum() > 0


def test_online_teacher_step(tmp_path):
    teacher = tiny_model(seed=7).eval()
    teacher.save_pretrained(tmp_path)
    model = _model()
    cfg = _config("loss.teacher=online", f"loss.teacher_model={tmp_path}")
    teacher = load_teacher(cfg, torch.device("cpu"))  # as a worker loads it
    metrics, _ = forward_backward(cfg, LocalEngine(model), _batch(), teacher)
    assert metrics["reason"] > 0 and all(torch.isfinite(g).all() for g in _grads(model).values())


def test_online_teacher_with_split_embeddings_reads_act_in_code_mode():
    """A teacher that is the student itself gives KL 0 on REASON and ACT: the teacher's
    forward gets the span ids, so its ACT positions use its ACT embedding as the student's
    do (without them it read every position with the base embedding)."""
    import copy

    model = _model()
    with torch.no_grad():
        model.act_embed_tokens.weight.add_(torch.randn_like(model.act_embed_tokens.weight))
    teacher = copy.deepcopy(model).eval()
    cfg = _config("loss.teacher=online", "loss.teacher_model=the-student-itself")
    metrics, _ = forward_backward(cfg, LocalEngine(model), _batch(), teacher)
    assert abs(metrics["act"]) < 1e-5 and abs(metrics["reason"]) < 1e-5


def test_pcgrad_equals_plain_backward_when_gradients_agree():
    plain, projected = _model(), _model()
    batch = _batch()
    forward_backward(_config(), LocalEngine(plain), batch, None)
    metrics, _ = forward_backward(_config("loss.pcgrad=true"), LocalEngine(projected), batch, None)
    a, b = _grads(plain), _grads(projected)
    assert set(a) <= set(b)
    if not metrics["pcgrad_conflict"]:
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6)
    else:  # projected: the update differs, but only by removing the conflicting component
        assert any(not torch.allclose(a[n], b[n]) for n in a)


def test_scale_multiplies_the_gradient_not_the_reported_loss():
    """The DPO anchor backpropagates anchor_weight x the SAD loss; metrics stay unweighted."""
    once, thrice = _model(), _model()
    batch = _batch()
    plain, _ = forward_backward(_config(), LocalEngine(once), batch, None)
    scaled, _ = forward_backward(_config(), LocalEngine(thrice), batch, None, scale=3.0)
    assert scaled["loss"] == pytest.approx(plain["loss"])
    a, b = _grads(once), _grads(thrice)
    assert set(a) == set(b) and a
    for name in a:
        torch.testing.assert_close(b[name], 3.0 * a[name], rtol=1e-4, atol=1e-7)


def test_curriculum_never_leaves_a_batch_of_negatives_alone():
    import numpy as np

    ids = [np.arange(5), np.arange(3)]  # an LM document and an MCH negative
    documents = Documents(ids, [np.ones(5), np.full(3, 2)], np.array([1.0, 0.0], np.float32),
                          np.array([2.0, 1.0], np.float32), [np.array([4]), np.array([2])],
                          [np.array([1]), np.array([0])])
    assert admit(documents, np.array([False, True])) is None
    kept = admit(documents, np.array([True, False]))
    assert len(kept) == 1 and kept.lm_weight.tolist() == [1.0] and kept.input_ids[0].tolist() == [0, 1, 2, 3, 4]


def test_a_repairs_wrong_call_is_embedded_in_code_mode_but_not_trained():
    batch = _batch()
    assert embedding_mode(_config(), batch, 5) is None  # no ERROR span: the model decides
    batch["span_ids"] = batch["span_ids"].clone()
    batch["span_ids"][:, 28:38] = 4  # the first call becomes a repair's wrong call
    mode = embedding_mode(_config(), batch, 5)
    assert mode[:, 29:38].all() and not mode[:, 28].any() and not mode[:, :28].any()
    assert mode[:, 56:].equal(batch["input_ids"][:, 56:].new_zeros(2, 8, dtype=torch.bool))  # no <tool_call>
    assert embedding_mode(_config("model.split_embeddings=false"), batch, 5) is None
    model = _model()
    metrics, scored = forward_backward(_config(), LocalEngine(model), batch, None)
    assert metrics["act_tokens"] == 8  # the 10 wrong-call tokens are no longer ACT targets


def test_mch_loss_is_class_balanced():
    logits = torch.tensor([[2.0, 2.0, 2.0, 2.0, -1.0]])
    labels = torch.tensor([[1, 1, 1, 1, 0]])
    loss, count = balanced_mch_loss(logits, labels)
    positive = torch.nn.functional.softplus(torch.tensor(-2.0))
    negative = torch.nn.functional.softplus(torch.tensor(-1.0))
    assert count == 5 and loss.item() == pytest.approx(((positive + negative) / 2).item())
    only_positive, _ = balanced_mch_loss(logits[:, :4], labels[:, :4])
    assert only_positive.item() == pytest.approx(positive.item())
    empty, count = balanced_mch_loss(logits, torch.full_like(labels, -1))
    assert count == 0 and empty.item() == 0 and empty.requires_grad is False


def test_running_auroc_covers_the_last_window_of_labelled_steps():
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auroc([0.5, 0.5], [0, 1]) == pytest.approx(0.5) and auroc([1.0], [1]) is None
    running = RunningAUROC(window=4)
    running.update([0.9, 0.8], [1, 1])
    assert running.value() is None  # one class only
    running.update([0.1, 0.95], [0, 0])
    assert running.value() == pytest.approx(0.5)
    running.update([0.99, 0.98], [1, 1])  # the window keeps the last 4: 0.1/0, 0.95/0 + two 1s
    assert running.value() == pytest.approx(1.0)


def test_train_layers_freezes_everything_below_the_top_layers():
    from trainer.student import build_student

    cfg = _config("model.train_layers=1")
    student = build_student(cfg, {"tool_call_start": 5, "im_end": 6, "pad": 0}, 320, None, None)
    trainable = {name for name, p in student.named_parameters() if p.requires_grad}
    assert trainable and all(name.startswith(("model.layers.1.", "model.norm.", "mch."))
                             for name in trainable)
    assert "model.embed_tokens.weight" not in trainable and "act_embed_tokens.weight" not in trainable
    forward_backward(cfg, LocalEngine(student), _batch(), None)
    assert set(_grads(student)) == trainable
