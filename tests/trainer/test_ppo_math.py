"""PPO's arithmetic against values computed by hand: GAE over generated tokens only, the
clipped surrogate, the clipped value loss, the KL estimators, whitening, and the critic-free
group baselines (GRPO = group-normalised rewards, RLOO = leave-one-out)."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.rl.advantages import gae, group_advantages, whiten
from trainer.rl.losses import clipped_surrogate, clipped_value_loss, kl_penalty


def test_gae_runs_over_generated_tokens_only():
    # tokens 1, 2 and 4 are generated (0 prompt, 3 an observation, 5 template glue)
    mask = torch.tensor([[False, True, True, False, True, False]])
    rewards = torch.tensor([[0.0, 0.0, 0.5, 0.0, 1.0, 0.0]])
    values = torch.tensor([[9.0, 0.1, 0.2, 9.0, 0.3, 9.0]])  # 9s are never read
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # by hand: d4 = 1 - 0.3 = 0.7; d2 = 0.5 + 0.9*0.3 - 0.2 = 0.57; d1 = 0.9*0.2 - 0.1 = 0.08
    a4 = 0.7
    a2 = 0.57 + 0.72 * a4
    a1 = 0.08 + 0.72 * a2
    expected = torch.tensor([[0.0, a1, a2, 0.0, a4, 0.0]])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, torch.tensor([[0.0, a1 + 0.1, a2 + 0.2, 0.0, a4 + 0.3, 0.0]]),
                          atol=1e-6)


def test_gae_with_lambda_one_and_no_discount_is_reward_to_go_minus_value():
    mask = torch.tensor([[True, True, True], [True, True, False]])
    rewards = torch.tensor([[0.0, -0.5, 1.0], [0.2, 0.3, 0.0]])
    values = torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.5, 0.0]])
    advantages, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    to_go = torch.tensor([[0.5, 0.5, 1.0], [0.5, 0.3, 0.0]])
    assert torch.allclose(advantages, (to_go - values) * mask, atol=1e-6)


def test_clipped_surrogate_by_hand():
    ratio = torch.tensor([[1.5, 0.5, 1.1]])
    old = torch.log(torch.tensor([[0.2, 0.4, 0.5]]))
    new = old + torch.log(ratio)
    advantages = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones_like(ratio, dtype=torch.bool)
    loss, stats = clipped_surrogate(new, old, advantages, mask, clip=0.2)
    # token 1: max(-1.5, -1.2) = -1.2 (clipped); token 2: max(-0.5, -0.8) = -0.5; token 3: 1.1
    assert float(loss) == pytest.approx((-1.2 - 0.5 + 1.1) / 3, abs=1e-6)
    assert float(stats["clip_fraction"]) == pytest.approx(1 / 3, abs=1e-6)
    masked, _ = clipped_surrogate(new, old, advantages, torch.tensor([[True, True, False]]), 0.2)
    assert float(masked) == pytest.approx((-1.2 - 0.5) / 2, abs=1e-6)


def test_clipped_surrogate_gradient_vanishes_where_clipped():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_()
    loss, _ = clipped_surrogate(new, old, torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool), 0.2)
    loss.backward()
    assert new.grad[0, 0] == 0 and new.grad[0, 1] == pytest.approx(-1.1 / 2)


def test_clipped_value_loss_by_hand():
    values, old = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.5]])
    returns, mask = torch.tensor([[2.0, 0.0]]), torch.ones(1, 2, dtype=torch.bool)
    loss, stats = clipped_value_loss(values, old, returns, mask, clip=0.2)
    # token 1: max((1-2)^2, (0.7-2)^2) = 1.69; token 2: max(0, (0.3-0)^2) = 0.09
    assert float(loss) == pytest.approx(0.5 * (1.69 + 0.09) / 2, abs=1e-6)
    assert float(stats["value_clip_fraction"]) == 1.0
    plain, _ = clipped_value_loss(values, old, returns, mask, clip=0.0)
    assert float(plain) == pytest.approx(0.5 * (1.0 + 0.0) / 2, abs=1e-6)


def test_kl_estimators_by_hand():
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    assert float(kl_penalty(logp, ref, "k1")) == pytest.approx(math.log(2), abs=1e-6)
    assert float(kl_penalty(logp, ref, "k3")) == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert float(kl_penalty(ref, logp, "k3")) >= 0  # k3 is never negative, k1 can be
    assert float(kl_penalty(ref, logp, "k1")) < 0
    with pytest.raises(ValueError, match="k2"):
        kl_penalty(logp, ref, "k2")


def test_k1_and_k3_estimate_the_exact_kl_on_samples():
    torch.manual_seed(0)
    p = torch.tensor([0.6, 0.3, 0.1])
    q = torch.tensor([0.3, 0.4, 0.3])
    exact = float((p * (p / q).log()).sum())
    samples = torch.multinomial(p, 200_000, replacement=True)
    for estimator in ("k1", "k3"):
        estimate = kl_penalty(p.log()[samples], q.log()[samples], estimator).mean()
        assert float(estimate) == pytest.approx(exact, abs=0.01)


def test_whiten_over_masked_entries():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    out = whiten(values, mask)
    kept = out[mask]
    assert float(kept.mean()) == pytest.approx(0, abs=1e-6)
    assert float(kept.std()) == pytest.approx(1, abs=1e-4)
    assert float(out[~mask].abs().sum()) == 0


def test_grpo_advantages_are_group_normalised_rewards():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.9, 0.4])
    groups = ["a", "a", "b", "b", "c", "c", "c"]
    advantages = group_advantages(rewards, groups, "grpo")
    for name in "abc":
        index = torch.tensor([i for i, g in enumerate(groups) if g == name])
        group = rewards[index]
        expected = (group - group.mean()) / (group.std() + 1e-4)
        assert torch.allclose(advantages[index], expected, atol=1e-6)
    assert advantages[0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4), abs=1e-6)
    assert advantages[2] == 0 and advantages[3] == 0  # equal rewards: nothing to learn


def test_rloo_subtracts_the_mean_of_the_other_rollouts():
    advantages = group_advantages(torch.tensor([1.0, 0.0, 3.0, 7.0]), ["g", "g", "g", "solo"],
                                  "rloo")
    assert advantages.tolist() == pytest.approx([1 - 1.5, 0 - 2.0, 3 - 0.5, 0.0])
