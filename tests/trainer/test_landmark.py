"""Landmark attention: the grouped softmax against a direct implementation of its
definition, equality with causal attention at block >= length, and cached decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.trainer.helpers import TINY_SHAPE, tiny_model
from trainer.model.landmark import grouped_softmax_attention, insert_landmarks, \
    landmark_slots, retrieval_attention


def reference_attention(q, k, v, block, scaling):
    """The definition, one query at a time: own block direct; every earlier block gated by
    its landmark's share of the group-0 softmax, spread by a softmax inside the block."""
    period, out = block + 1, torch.zeros_like(q)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * scaling
    for p in range(q.shape[2]):
        current = p // period
        own = list(range(current * period, p + 1))
        landmarks = [b * period + block for b in range(current)]
        group = torch.softmax(scores[:, :, p, landmarks + own], dim=-1)
        o = torch.einsum("bhk,bhkd->bhd", group[..., len(landmarks):], v[:, :, own])
        for i, b in enumerate(range(current)):
            tokens = list(range(b * period, b * period + block))
            inner = torch.softmax(scores[:, :, p, tokens], dim=-1)
            o = o + group[..., i:i + 1] * torch.einsum("bhk,bhkd->bhd", inner, v[:, :, tokens])
        out[:, :, p] = o
    return out


@pytest.mark.parametrize("length,block,chunk", [(37, 4, 1024), (37, 4, 10), (50, 8, 9), (9, 8, 64)])
def test_grouped_softmax_matches_the_definition(length, block, chunk):
    torch.manual_seed(length + block)
    q, k, v = (torch.randn(2, 3, length, 16) for _ in range(3))
    expected = reference_attention(q, k, v, block, 0.25)
    got = grouped_softmax_attention(q, k, v, block, 0.25, query_chunk=chunk)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("queries", [1, 2, 5])
def test_retrieval_with_enough_blocks_equals_the_grouped_softmax(queries):
    torch.manual_seed(queries)
    q, k, v = (torch.randn(1, 2, 47, 16) for _ in range(3))
    full = grouped_softmax_attention(q, k, v, 4, 0.25)
    decoded = retrieval_attention(q[:, :, -queries:], k, v, 4, 0.25, topk=100)
    torch.testing.assert_close(decoded, full[:, :, -queries:], rtol=1e-5, atol=1e-5)
    narrow = retrieval_attention(q[:, :, -queries:], k, v, 4, 0.25, topk=2)
    assert torch.isfinite(narrow).all() and not torch.allclose(narrow, full[:, :, -queries:])


def test_block_at_least_length_is_causal_attention():
    q, k, v = (torch.randn(2, 2, 30, 16) for _ in range(3))
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25)
    for block in (30, 64, 4096):
        torch.testing.assert_close(grouped_softmax_attention(q, k, v, block, 0.25), causal,
                                   rtol=1e-5, atol=1e-6)


def test_model_with_block_at_least_length_equals_plain_qwen2(tmp_path):
    fields = {k: v for k, v in TINY_SHAPE.items() if not k.startswith("mch")}
    torch.manual_seed(0)
    plain = Qwen2ForCausalLM(Qwen2Config(**fields)).eval()
    plain.save_pretrained(tmp_path)
    from trainer.model import AgentQwen2ForCausalLM

    landmark = AgentQwen2ForCausalLM.from_pretrained(tmp_path, use_landmark=True,
                                                     landmark_block_size=64).eval()
    ids = torch.randint(0, 320, (2, 64))
    with torch.no_grad():
        torch.testing.assert_close(landmark(ids).logits, plain(ids).logits, rtol=1e-5, atol=1e-5)


def test_landmark_layout_closes_only_blocks_followed_by_tokens():
    length, index = landmark_slots(0, 12, 4)
    assert length == 14 and index.tolist() == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13]
    # appending continues the same layout: 8 tokens then 4 more == 12 at once
    first_len, _ = landmark_slots(0, 8, 4)
    more_len, more_index = landmark_slots(first_len, 4, 4)
    assert first_len + more_len == 14 and (more_index + first_len).tolist() == [10, 11, 12, 13]
    embeds = torch.randn(1, 12, 8)
    expanded, regular, positions = insert_landmarks(embeds, torch.ones(8), 4)
    assert torch.equal(expanded[0, regular], embeds[0]) and torch.equal(expanded[0, 4], torch.ones(8))
    assert positions.tolist() == [list(range(14))]


def test_cached_decoding_matches_the_full_forward():
    model = tiny_model(use_landmark=True, landmark_block_size=4, landmark_retrieval_topk=64)
    ids = torch.randint(0, 320, (2, 23))
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :9], use_cache=True)
        steps = [out.logits]
        for t in range(9, 23):
            out = model(ids[:, t:t + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)


def test_chunked_recomputation_gives_the_same_gradients():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 60, 8, requires_grad=True) for _ in range(3))
    grads = []
    for chunk in (1024, 5):
        out = grouped_softmax_attention(q, k, v, 4, 0.3, query_chunk=chunk)
        grads.append(torch.autograd.grad(out.square().sum(), (q, k, v)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_landmark_embedding_learns():
    model = tiny_model(use_landmark=True, landmark_block_size=4).train()
    ids = torch.randint(0, 320, (2, 20))
    model(ids, labels=ids).loss.backward()
    assert model.landmark.weight.grad.abs().sum() > 0
