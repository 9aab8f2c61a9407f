"""The meta-cognitive head: causal scoring at step positions, the loss, and that it can
learn to tell correct from wrong steps."""

from __future__ import annotations

import torch

from tests.trainer.helpers import tiny_model
from trainer.model.mch import MetaCognitiveHead, mch_loss


def test_scores_depend_only_on_tokens_up_to_the_position():
    torch.manual_seed(0)
    head = MetaCognitiveHead(16, 8, 2).eval()
    hidden = torch.randn(1, 10, 16)
    positions = torch.tensor([[3, 7, -1]])
    logits, vectors = head(hidden, positions)
    changed = hidden.clone()
    changed[0, 8:] += 5.0
    logits2, _ = head(changed, positions)
    assert torch.equal(logits[0, :2], logits2[0, :2])
    assert logits[0, 2] == 0 and torch.all(vectors[0, 2] == 0) and vectors.shape == (1, 3, 8)


def test_loss_ignores_unlabelled_steps():
    logits = torch.tensor([[2.0, -1.0, 5.0]])
    labels = torch.tensor([[1, 0, -1]])
    loss, count = mch_loss(logits, labels)
    expected = (torch.nn.functional.softplus(torch.tensor(-2.0)) + torch.nn.functional.softplus(torch.tensor(-1.0))) / 2
    assert count == 2 and torch.isclose(loss, expected)
    empty, count = mch_loss(logits, torch.full_like(labels, -1))
    assert count == 0 and empty.item() == 0


def test_head_learns_to_separate_correct_from_wrong_steps():
    model = tiny_model(use_mch=True, mch_detach_backbone=True).train()
    optimizer = torch.optim.Adam(model.mch.parameters(), lr=1e-2)
    torch.manual_seed(3)
    good = torch.randint(10, 200, (8, 12))
    bad = good.clone()
    bad[:, 8] = 250  # the "wrong call" token
    ids = torch.cat([good, bad])
    labels = torch.cat([torch.ones(8, 1), torch.zeros(8, 1)]).long()
    positions = torch.full((16, 1), 11)
    for _ in range(40):
        out = model(ids, mch_positions=positions)
        loss, _ = mch_loss(out.mch_logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert model.model.embed_tokens.weight.grad is None  # detached: the backbone is untouched
    accuracy = ((out.mch_logits > 0).long() == labels).float().mean()
    assert loss.item() < 0.2 and accuracy == 1.0
