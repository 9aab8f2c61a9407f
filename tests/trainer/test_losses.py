"""SAD and baseline losses against hand-computed values; masking; top-k KL; chunking."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainer.losses import LossSettings, TeacherSignal, combine, full_kl, make_loss_fn, \
    pcgrad_combine, per_token_losses, span_means, topk_kl

PROMPT, REASON, ACT, OBS = 0, 1, 2, 3


def identity_head(vocab: int) -> nn.Linear:
    """head(hidden) == hidden: tests feed logits directly as hidden states."""
    head = nn.Linear(vocab, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.eye(vocab))
    return head


def test_cross_entropy_and_kl_match_hand_computation():
    logits = torch.tensor([[[1.0, 0.0, -1.0], [0.0, 0.0, 0.0]]])  # one row, two positions
    ids = torch.tensor([[0, 0]])  # position 0 predicts token 0
    ce = per_token_losses(logits, identity_head(3), ids, TeacherSignal("onehot"), LossSettings())
    log_z = math.log(math.e + 1 + math.exp(-1))
    assert ce.shape == (1, 1) and ce.item() == pytest.approx(log_z - 1.0, abs=1e-6)
    teacher = [0.5, 0.3, 0.2]
    student = [1.0 - log_z, 0.0 - log_z, -1.0 - log_z]
    expected = sum(p * (math.log(p) - s) for p, s in zip(teacher, student))
    got = full_kl(torch.tensor(student), torch.tensor(teacher).log())
    assert got.item() == pytest.approx(expected, abs=1e-6) and expected == pytest.approx(0.077953, abs=1e-5)


def test_topk_kl_with_tail_bucket_matches_hand_computation():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    q = [math.exp(x) for x in logits.tolist()]
    q = [x / sum(q) for x in q]
    teacher_ids, teacher_p = [1, 0], [0.6, 0.3]  # tail holds 0.1 of the teacher's mass
    expected = 0.6 * math.log(0.6 / q[1]) + 0.3 * math.log(0.3 / q[0]) + \
        0.1 * math.log(0.1 / (q[2] + q[3]))
    got = topk_kl(torch.log_softmax(logits, -1), torch.tensor(teacher_ids),
                  torch.tensor(teacher_p).log())
    assert got.item() == pytest.approx(expected, abs=1e-5)


def test_topk_with_k_equal_vocab_is_the_full_kl():
    torch.manual_seed(0)
    student = torch.log_softmax(torch.randn(5, 50), -1)
    teacher = torch.log_softmax(torch.randn(5, 50) * 2, -1)
    order = teacher.argsort(-1, descending=True)
    got = topk_kl(student, order, teacher.gather(-1, order))
    torch.testing.assert_close(got, full_kl(student, teacher), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_topk_path_equals_online_path_when_k_is_the_vocab(temperature):
    torch.manual_seed(1)
    vocab, length = 12, 9
    student_hidden = torch.randn(2, length, vocab)
    teacher_logits = torch.randn(2, length, vocab)
    ids = torch.randint(0, vocab, (2, length))
    teacher_lp = torch.log_softmax(teacher_logits, -1)
    order = teacher_lp.argsort(-1, descending=True)
    # entry t of the stored top-k describes token t, i.e. what position t-1 predicts
    topk = TeacherSignal("topk", topk_ids=torch.roll(order, 1, dims=1),
                         topk_logprobs=torch.roll(teacher_lp.gather(-1, order), 1, dims=1),
                         topk_present=torch.ones(2, length, dtype=torch.bool))
    online = TeacherSignal("online", hidden=teacher_logits, head=identity_head(vocab))
    head = identity_head(vocab)
    settings = LossSettings(temperature=temperature)
    student_hidden.requires_grad_(True)
    a = per_token_losses(student_hidden, head, ids, topk, settings)
    b = per_token_losses(student_hidden, head, ids, online, settings)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert (a > 1e-3).all()  # different models: a real divergence, not a vacuous 0 == 0
    (grad_a,) = torch.autograd.grad(a.sum(), student_hidden, retain_graph=True)
    (grad_b,) = torch.autograd.grad(b.sum(), student_hidden)
    torch.testing.assert_close(grad_a, grad_b, rtol=1e-4, atol=1e-5)


def _stored_topk(logprobs: torch.Tensor, k: int) -> TeacherSignal:
    """The top-k of `logprobs` [B, T, V] stored as a teacher's, aligned like the shards:
    entry t describes token t (what position t-1 predicts)."""
    values, order = logprobs.topk(k, dim=-1)
    return TeacherSignal("topk", topk_ids=torch.roll(order, 1, dims=1),
                         topk_logprobs=torch.roll(values, 1, dims=1),
                         topk_present=torch.ones(logprobs.shape[:2], dtype=torch.bool))


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_stored_topk_kl_is_zero_when_the_student_is_the_teacher(temperature):
    torch.manual_seed(3)
    vocab, length, k = 64, 10, 8
    logits = torch.randn(2, length, vocab)
    teacher = _stored_topk(torch.log_softmax(logits, -1), k)
    tail = 1 - teacher.topk_logprobs.exp().sum(-1)
    assert (tail > 0.05).all()  # a real tail bucket is in play
    ids = torch.randint(0, vocab, (2, length))
    settings = LossSettings(temperature=temperature)
    same = per_token_losses(logits, identity_head(vocab), ids, teacher, settings)
    assert same.abs().max().item() < 1e-5
    other = per_token_losses(logits.roll(1, dims=-1), identity_head(vocab), ids, teacher, settings)
    assert (other > 1e-2).all()


def test_tempered_topk_kl_matches_hand_computation_on_buckets():
    teacher_p, student_logits = [0.6, 0.3], torch.tensor([2.0, 1.0, 0.0, -1.0])
    q = torch.softmax(student_logits, -1).tolist()
    student_buckets = [q[1], q[0], q[2] + q[3]]  # teacher ids [1, 0]; tail = tokens 2 and 3
    teacher_buckets = [0.6, 0.3, 0.1]
    temperature = 2.0

    def temper(p):
        powered = [x ** (1 / temperature) for x in p]
        return [x / sum(powered) for x in powered]

    t, s = temper(teacher_buckets), temper(student_buckets)
    expected = sum(a * math.log(a / b) for a, b in zip(t, s))
    got = topk_kl(torch.log_softmax(student_logits, -1), torch.tensor([1, 0]),
                  torch.tensor(teacher_p).log(), temperature)
    assert got.item() == pytest.approx(expected, abs=1e-6)


def _batch(vocab=7):
    torch.manual_seed(2)
    spans = torch.tensor([[PROMPT, PROMPT, REASON, REASON, ACT, ACT, OBS, OBS, REASON, ACT, ACT, -1]])
    ids = torch.randint(0, vocab, spans.shape)
    hidden = torch.randn(1, spans.shape[1], vocab, requires_grad=True)
    return hidden, ids, spans


def test_sad_is_the_lambda_weighted_span_means():
    hidden, ids, spans = _batch()
    settings = LossSettings("sad", lambda_reason=0.7, lambda_act=1.3, chunk_size=5)
    loss, parts = make_loss_fn(ids, spans, TeacherSignal(), settings)(hidden, identity_head(7))
    ce = [-torch.log_softmax(hidden[0, t], -1)[ids[0, t + 1]].item() for t in range(11)]
    reason = [ce[t] for t in range(11) if spans[0, t + 1] == REASON]
    act = [ce[t] for t in range(11) if spans[0, t + 1] == ACT]
    assert parts["reason_tokens"].item() == 3 and parts["act_tokens"].item() == 4
    expected = 0.7 * sum(reason) / 3 + 1.3 * sum(act) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    pooled, _ = make_loss_fn(ids, spans, TeacherSignal(), LossSettings("sft"))(hidden, identity_head(7))
    assert pooled.item() == pytest.approx((sum(reason) + sum(act)) / 7, abs=1e-5)


@pytest.mark.parametrize("objective", ["sad", "token_kd", "sft"])
def test_prompt_obs_and_padding_positions_get_zero_gradient(objective):
    hidden, ids, spans = _batch()
    loss, _ = make_loss_fn(ids, spans, TeacherSignal(), LossSettings(objective, chunk_size=4))(
        hidden, identity_head(7))
    (grad,) = torch.autograd.grad(loss, hidden)
    predicted = torch.cat([spans[0, 1:], torch.tensor([-1])])  # span of the token each position predicts
    trained = (predicted == REASON) | (predicted == ACT)
    assert torch.all(grad[0, ~trained] == 0)
    assert torch.all(grad[0, trained].abs().sum(-1) > 0)


def test_rows_with_zero_weight_do_not_train():
    hidden, ids, spans = _batch()
    hidden2 = torch.cat([hidden, hidden.detach() * 3]).requires_grad_(True)
    fn = make_loss_fn(torch.cat([ids, ids]), torch.cat([spans, spans]), TeacherSignal(),
                      LossSettings(), row_weight=torch.tensor([1.0, 0.0]))
    loss, _ = fn(hidden2, identity_head(7))
    (grad,) = torch.autograd.grad(loss, hidden2)
    assert torch.all(grad[1] == 0) and grad[0].abs().sum() > 0
    single, _ = make_loss_fn(ids, spans, TeacherSignal(), LossSettings())(hidden, identity_head(7))
    assert loss.item() == pytest.approx(single.item(), abs=1e-6)


@pytest.mark.parametrize("recompute", [True, False])
def test_chunk_size_and_recomputation_do_not_change_loss_or_gradients(recompute):
    results = []
    for chunk in (3, 1000):
        hidden, ids, spans = _batch()
        settings = LossSettings(chunk_size=chunk, recompute=recompute)
        loss, _ = make_loss_fn(ids, spans, TeacherSignal(), settings)(hidden, identity_head(7))
        results.append((loss, torch.autograd.grad(loss, hidden)[0]))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_tokens_without_stored_topk_fall_back_to_cross_entropy():
    hidden, ids, spans = _batch()
    signal = TeacherSignal("topk", topk_ids=torch.zeros(1, 12, 2, dtype=torch.long),
                           topk_logprobs=torch.full((1, 12, 2), -1.0),
                           topk_present=torch.zeros(1, 12, dtype=torch.bool))
    a = per_token_losses(hidden, identity_head(7), ids, signal, LossSettings())
    b = per_token_losses(hidden, identity_head(7), ids, TeacherSignal(), LossSettings())
    torch.testing.assert_close(a, b)


def test_span_means_of_an_empty_kind_are_zero():
    losses = torch.ones(1, 3)
    parts = span_means(losses, torch.tensor([[0, 2, 2, 3]]))
    assert parts["reason"].item() == 0 and parts["act"].item() == 1.0


def test_pcgrad_projects_conflicting_gradients_only():
    g_r, g_a = [torch.tensor([1.0, 0.0])], [torch.tensor([-1.0, 1.0])]
    (combined,), conflict = pcgrad_combine(g_r, g_a)
    assert conflict and torch.allclose(combined, torch.tensor([0.5, 1.5]))
    (summed,), conflict = pcgrad_combine([torch.tensor([1.0, 1.0])], [torch.tensor([1.0, 0.0])])
    assert not conflict and torch.allclose(summed, torch.tensor([2.0, 1.0]))
    combined, _ = pcgrad_combine([None, torch.ones(2)], [torch.ones(3), None])
    assert combined[0].shape == (3,) and combined[1].shape == (2,)


@pytest.mark.parametrize("kind", ["onehot", "topk", "online"])
@pytest.mark.parametrize("objective", ["sad", "token_kd"])
def test_loss_on_trained_positions_only_equals_the_full_computation(kind, objective):
    """make_loss_fn runs the heads only where the loss is used (REASON/ACT targets of
    weight > 0): the same loss and the same gradients as computing every position."""
    torch.manual_seed(1)
    batch, length, hidden_size, vocab, k = 3, 40, 8, 23, 5
    hidden = torch.randn(batch, length, hidden_size, requires_grad=True)
    head = nn.Linear(hidden_size, vocab, bias=False)
    ids = torch.randint(0, vocab, (batch, length))
    spans = torch.randint(0, 4, (batch, length))
    spans[2, 30:] = -1  # padding
    weight = torch.tensor([1.0, 0.0, 0.5])  # row 1: an MCH negative, no LM loss
    teacher_head = nn.Linear(hidden_size, vocab, bias=False)
    signals = {
        "onehot": TeacherSignal("onehot"),
        "topk": TeacherSignal("topk", topk_ids=torch.randint(0, vocab, (batch, length, k)),
                              topk_logprobs=torch.log_softmax(torch.randn(batch, length, k + 1), -1)[..., :k],
                              topk_present=torch.rand(batch, length) > 0.3),
        "online": TeacherSignal("online", hidden=torch.randn(batch, length, hidden_size),
                                head=teacher_head)}
    settings = LossSettings(objective, lambda_act=2.0, temperature=2.0, chunk_size=7)
    loss, parts = make_loss_fn(ids, spans, signals[kind], settings, weight)(hidden, head)
    (grad_hidden, grad_head) = torch.autograd.grad(loss, [hidden, head.weight])
    every = per_token_losses(hidden, head, ids, signals[kind], settings)  # all positions
    full_parts = span_means(every, spans, weight)
    full = combine(full_parts, settings)
    (full_grad_hidden, full_grad_head) = torch.autograd.grad(full, [hidden, head.weight])
    assert int(parts["reason_tokens"] + parts["act_tokens"]) > 20
    torch.testing.assert_close(loss, full)
    torch.testing.assert_close(grad_hidden, full_grad_hidden)
    torch.testing.assert_close(grad_head, full_grad_head)
    assert grad_hidden[1].abs().sum() == 0  # the weight-0 row gets no gradient


def test_loss_with_no_trained_position_is_zero_and_backpropagates():
    hidden = torch.randn(1, 6, 4, requires_grad=True)
    head = nn.Linear(4, 9, bias=False)
    spans = torch.tensor([[0, 0, 3, 3, 0, -1]])  # prompt and observation only
    loss, _ = make_loss_fn(torch.zeros(1, 6, dtype=torch.long), spans, TeacherSignal(),
                           LossSettings())(hidden, head)
    loss.backward()
    assert float(loss) == 0.0 and hidden.grad is not None
