"""Landmark attention (Mohtashami & Jaggi, 2023) as a Transformers attention function.

The sequence is cut into blocks of `block` tokens and a landmark token closes every block
that is followed by more tokens, so expanded position p is a landmark iff p % (block+1) ==
block. Landmarks take part in attention only as gates:

- grouped softmax (training, prefill): a query attends directly to the tokens of its own
  block; every earlier block b is represented by its landmark's score in the same softmax
  ("group 0"), and the weight the landmark wins is spread over block b's tokens by a second
  softmax inside that block. The landmark's own value is never read.
- retrieval (decoding from a cache): only the top-k earlier blocks by landmark score are
  opened; with k >= number of blocks this equals the grouped softmax.

With a block at least as long as the sequence there are no landmarks and the grouped softmax
is ordinary causal attention. Training memory is O(chunk x length) per layer: queries go
through in chunks of whole blocks, each recomputed in the backward pass (activation
checkpointing), so the [length x length] score matrix never exists at once.

Batches must be right-padded (padding after the real tokens), which the trainer's collation
guarantees: causal structure then keeps padding out of every real token's view, and no
attention mask is needed. The function receives the mask as None (no mask function is
registered for it) and ignores it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface

LANDMARK_ATTENTION = "landmark"
_NEG_INF = float("-inf")


def landmark_slots(offset: int, n_tokens: int, block: int) -> tuple[int, torch.Tensor]:
    """Layout of `n_tokens` regular tokens appended after `offset` expanded positions.

    Returns the expanded length of the new chunk and the index of each regular token in it.
    Regular token r (0-based over the whole sequence) sits at r + r // block."""
    period = block + 1
    first_regular = offset - offset // period
    regular = torch.arange(first_regular, first_regular + n_tokens)
    expanded = regular + regular // block - offset
    length = int(expanded[-1]) + 1 if n_tokens else 0
    return length, expanded


def insert_landmarks(embeds: torch.Tensor, landmark: torch.Tensor, block: int, offset: int = 0,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Interleave landmark embeddings into `embeds` [B, T, H].

    Returns (expanded embeddings [B, T', H], index of each regular token in the expanded chunk
    [T], position ids [1, T'] continuing from `offset`)."""
    batch, n_tokens, hidden = embeds.shape
    length, regular_index = landmark_slots(offset, n_tokens, block)
    regular_index = regular_index.to(embeds.device)
    filler = landmark.to(embeds.dtype).expand(batch, length, hidden)
    expanded = filler.index_copy(1, regular_index, embeds)
    positions = torch.arange(offset, offset + length, device=embeds.device).unsqueeze(0)
    return expanded, regular_index, positions


def _repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    return states if groups == 1 else states.repeat_interleave(groups, dim=1)


def _own_block_scores(query: torch.Tensor, key: torch.Tensor, scaling: float) -> torch.Tensor:
    """Causal scores of each query against its own block: [B, H, C, L, L]."""
    scores = torch.einsum("bhcqd,bhckd->bhcqk", query, key).float() * scaling
    size = scores.shape[-1]
    causal = torch.ones(size, size, dtype=torch.bool, device=scores.device).tril()
    return scores.masked_fill(~causal, _NEG_INF)


def _grouped_chunk(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, block: int,
                   scaling: float, first: int, last: int) -> torch.Tensor:
    """Grouped-softmax attention for query blocks [first, last) of blocked q/k/v
    [B, H, n_blocks, L, D]; returns [B, H, last-first, L, D]."""
    query_chunk = query[:, :, first:last]
    own_key, own_value = key[:, :, first:last], value[:, :, first:last]
    own_scores = _own_block_scores(query_chunk, own_key, scaling)
    n_memory = last - 1  # blocks any query of the chunk may read besides its own
    if n_memory <= 0:
        weights = torch.softmax(own_scores, dim=-1).to(value.dtype)
        return torch.einsum("bhcqk,bhckd->bhcqd", weights, own_value)
    token_key, token_value = key[:, :, :n_memory, :block], value[:, :, :n_memory, :block]
    landmark_key = key[:, :, :n_memory, block]
    inner = torch.einsum("bhcqd,bhmkd->bhcqmk", query_chunk, token_key).float() * scaling
    inner = torch.softmax(inner, dim=-1)
    gate_scores = torch.einsum("bhcqd,bhmd->bhcqm", query_chunk, landmark_key).float() * scaling
    query_block = torch.arange(first, last, device=query.device)
    readable = torch.arange(n_memory, device=query.device)[None, :] < query_block[:, None]
    gate_scores = gate_scores.masked_fill(~readable[None, None, :, None, :], _NEG_INF)
    group = torch.softmax(torch.cat([gate_scores, own_scores], dim=-1), dim=-1)
    gates, own_weights = group.split([n_memory, own_scores.shape[-1]], dim=-1)
    memory_weights = (gates.unsqueeze(-1) * inner).flatten(-2).to(value.dtype)
    out = torch.einsum("bhcqn,bhnd->bhcqd", memory_weights, token_value.flatten(2, 3))
    return out + torch.einsum("bhcqk,bhckd->bhcqd", own_weights.to(value.dtype), own_value)


def grouped_softmax_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                              block: int, scaling: float, query_chunk: int = 1024,
                              ) -> torch.Tensor:
    """Full-sequence landmark attention, q/k/v [B, H, T', D] with T' expanded positions.

    Returns [B, H, T', D]. Chunks of whole blocks are checkpointed when gradients are on."""
    batch, heads, length, dim = query.shape
    period = block + 1
    n_blocks = -(-length // period)
    block_len = period if n_blocks > 1 else length  # one block: no padding at all
    padded = n_blocks * block_len
    if padded != length:  # padding goes after every real position, so causality hides it
        pad = (0, 0, 0, padded - length)
        query, key, value = F.pad(query, pad), F.pad(key, pad), F.pad(value, pad)
    shape = (batch, heads, n_blocks, block_len, dim)
    query, key, value = query.view(shape), key.view(shape), value.view(shape)
    chunk_blocks = max(1, query_chunk // block_len)
    outputs = []
    for first in range(0, n_blocks, chunk_blocks):
        last = min(first + chunk_blocks, n_blocks)
        args = (query, key, value, block, scaling, first, last)
        if torch.is_grad_enabled() and n_blocks > chunk_blocks:
            outputs.append(checkpoint(_grouped_chunk, *args, use_reentrant=False))
        else:
            outputs.append(_grouped_chunk(*args))
    out = torch.cat(outputs, dim=2).view(batch, heads, padded, dim)
    return out[:, :, :length]


def retrieval_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, block: int,
                        scaling: float, topk: int) -> torch.Tensor:
    """Landmark attention for the last Q positions of a cached sequence (decoding).

    query [B, H, Q, D]; key/value [B, H, K, D] hold every position so far, landmarks
    included. Each query reads its own block directly and the `topk` earlier blocks whose
    landmarks score highest; returns [B, H, Q, D]."""
    batch, heads, n_query, dim = query.shape
    n_keys, period = key.shape[2], block + 1
    position = torch.arange(n_keys - n_query, n_keys, device=query.device)
    query_block = position // period
    own_start = int(query_block.min()) * period
    own_key, own_value = key[:, :, own_start:], value[:, :, own_start:]
    own_scores = torch.einsum("bhqd,bhkd->bhqk", query, own_key).float() * scaling
    key_position = torch.arange(own_start, n_keys, device=query.device)
    visible = (key_position[None, :] <= position[:, None]) & \
              (key_position[None, :] // period == query_block[:, None])
    own_scores = own_scores.masked_fill(~visible, _NEG_INF)
    n_memory = int(query_block.max())
    if n_memory == 0:
        weights = torch.softmax(own_scores, dim=-1).to(value.dtype)
        return torch.einsum("bhqk,bhkd->bhqd", weights, own_value)
    blocked = (batch, heads, n_memory, period, dim)
    token_key = key[:, :, :n_memory * period].reshape(blocked)[..., :block, :]
    token_value = value[:, :, :n_memory * period].reshape(blocked)[..., :block, :]
    gate_scores = torch.einsum("bhqd,bhmd->bhqm", query,
                               key[:, :, block:n_memory * period:period]).float() * scaling
    readable = torch.arange(n_memory, device=query.device)[None, :] < query_block[:, None]
    gate_scores = gate_scores.masked_fill(~readable, _NEG_INF)
    if topk >= n_memory:  # every block: the same sums without gathering a copy per query
        return _all_blocks(query, own_scores, own_value, gate_scores, token_key, token_value,
                           scaling)
    top_scores, top_blocks = gate_scores.topk(min(topk, n_memory), dim=-1)
    index = top_blocks[..., None, None].expand(-1, -1, -1, -1, block, dim)
    chosen_key = token_key.unsqueeze(2).expand(-1, -1, n_query, -1, -1, -1).gather(3, index)
    chosen_value = token_value.unsqueeze(2).expand(-1, -1, n_query, -1, -1, -1).gather(3, index)
    inner = torch.einsum("bhqd,bhqmkd->bhqmk", query, chosen_key).float() * scaling
    inner = torch.softmax(inner, dim=-1)
    group = torch.softmax(torch.cat([top_scores, own_scores], dim=-1), dim=-1)
    gates, own_weights = group.split([top_scores.shape[-1], own_scores.shape[-1]], dim=-1)
    memory_weights = (gates.unsqueeze(-1) * inner).to(value.dtype)
    out = torch.einsum("bhqmk,bhqmkd->bhqd", memory_weights, chosen_value)
    return out + torch.einsum("bhqk,bhkd->bhqd", own_weights.to(value.dtype), own_value)


def _all_blocks(query: torch.Tensor, own_scores: torch.Tensor, own_value: torch.Tensor,
                gate_scores: torch.Tensor, token_key: torch.Tensor, token_value: torch.Tensor,
                scaling: float) -> torch.Tensor:
    """`retrieval_attention` with every earlier block open (= the grouped softmax)."""
    inner = torch.softmax(torch.einsum("bhqd,bhmkd->bhqmk", query, token_key).float() * scaling,
                          dim=-1)
    group = torch.softmax(torch.cat([gate_scores, own_scores], dim=-1), dim=-1)
    gates, own_weights = group.split([gate_scores.shape[-1], own_scores.shape[-1]], dim=-1)
    memory_weights = (gates.unsqueeze(-1) * inner).to(token_value.dtype)
    out = torch.einsum("bhqmk,bhmkd->bhqd", memory_weights, token_value)
    return out + torch.einsum("bhqk,bhkd->bhqd", own_weights.to(own_value.dtype), own_value)


def landmark_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor, attention_mask: torch.Tensor | None,
                       scaling: float | None = None, dropout: float = 0.0, **kwargs,
                       ) -> tuple[torch.Tensor, None]:
    """The function Transformers calls in place of sdpa/eager (see `register`).

    Takes q [B, H, Q, D] and k/v [B, H_kv, K, D] (the cache included) and returns the output
    as [B, Q, H, D], like the built-in attention functions."""
    config = module.config
    block = config.landmark_block_size
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    groups = query.shape[1] // key.shape[1]
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    if query.shape[2] == key.shape[2]:
        out = grouped_softmax_attention(query, key, value, block, scaling,
                                        config.landmark_query_chunk)
    else:
        out = retrieval_attention(query, key, value, block, scaling,
                                  config.landmark_retrieval_topk)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Make `attn_implementation="landmark"` available to Transformers models (idempotent)."""
    AttentionInterface.register(LANDMARK_ATTENTION, landmark_attention)
