"""Structured Agent Distillation (SAD) and the baselines it is compared with.

SAD: `L = lambda_r * KL_REASON + lambda_a * KL_ACT`, each a mean over the tokens of its span
kind (PROMPT and OBS tokens never contribute). Position t predicts token t+1, so a position
counts under the span kind of the token it predicts. The teacher distribution comes from:
  (a) "topk":   stored top-k teacher log-probabilities per token, the remaining mass as one
                tail bucket (k = vocab gives the full KL); tokens without stored top-k fall
                back to (c);
  (b) "online": a teacher model with the same tokenizer, run forward in the same job;
  (c) "onehot": the token itself (scripted teachers): span-weighted cross-entropy.
Baselines: "token_kd" (one KL mean over all assistant tokens) and "sft" (cross-entropy over
assistant tokens; on teacher-written data this is sequence-level KD).

Everything is computed chunked over time from the final hidden states. When the full
logits would be large (auto: > 2 GiB; Qwen2.5-32B with V = 152k at 8k tokens is ~15 GiB),
each chunk's logits (student and teacher) exist only inside a checkpointed function and are
recomputed in backward, so peak memory is one [B, chunk, V] slab per model instead of
[B, T, V]. Below that, chunks keep their activations and cost the same as one big
cross-entropy (recomputing costs one extra head matmul per token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.contract import ACT, REASON

Objective = Literal["sad", "token_kd", "sft"]
TeacherKind = Literal["onehot", "topk", "online"]
_TAIL_EPS = 1e-6  # teacher tail mass below this is rounding error of a full top-k
_MIN_LOG_PROB = -1e4  # floor of a student bucket's log-probability inside the KL
RECOMPUTE_ABOVE_BYTES = 2 << 30


@dataclass
class TeacherSignal:
    """The teacher's view of a batch, aligned with input_ids [B, T]: entry t describes the
    distribution token t was drawn from (what position t-1 of the student predicts)."""

    kind: TeacherKind = "onehot"
    topk_ids: torch.Tensor | None = None        # [B, T, K] long
    topk_logprobs: torch.Tensor | None = None   # [B, T, K] float, -inf where padded
    topk_present: torch.Tensor | None = None    # [B, T] bool: teacher generated token t
    hidden: torch.Tensor | None = None          # [B, T, H_teacher] (online)
    head: nn.Module | None = None               # teacher lm_head (online)


@dataclass(frozen=True)
class LossSettings:
    objective: Objective = "sad"
    lambda_reason: float = 1.0
    lambda_act: float = 1.0
    temperature: float = 1.0
    chunk_size: int = 512
    recompute: bool | None = None  # None: recompute chunk logits in backward when the full
    #                                logits would take more than RECOMPUTE_ABOVE_BYTES


def topk_kl(student_logprobs: torch.Tensor, topk_ids: torch.Tensor,
            topk_logprobs: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || student) over k+1 buckets: the teacher's top-k tokens and one tail
    bucket holding the rest of each distribution. student_logprobs [..., V] (temperature 1);
    topk [..., K] (the teacher's raw log-probabilities, -inf where padded); returns [...].

    At temperature T both sides are re-tempered on the same buckets: p_i^(1/T) renormalised,
    the tail mass tempered as one bucket. The stored logprobs are the teacher's at T=1 and
    its tail is known only as a total, so this is the only tempering the two sides can share;
    then KL(teacher == student) = 0 at every T, and with k = vocab (no tail) it is exactly
    the full-vocabulary KL of softmax(logits / T). Tempering the student's logits over the
    whole vocabulary against untempered stored logprobs (as before) gave 0.095 at T=2 and
    0.87 at T=4 for identical models."""
    present = torch.isfinite(topk_logprobs)
    minus_inf = float("-inf")
    teacher_tail = (1.0 - topk_logprobs.exp().sum(-1)).clamp(min=0.0)
    has_tail = teacher_tail > _TAIL_EPS
    # A tail below rounding error is no bucket (k = vocab, or a full top-k): -inf, not log 1e-7,
    # which tempering at T=4 would inflate to a bucket of weight 1e-7^(1/4) = 0.018.
    teacher_tail_log = torch.where(has_tail, torch.log(teacher_tail.clamp(min=_TAIL_EPS)),
                                   torch.full_like(teacher_tail, minus_inf))
    student_k = student_logprobs.gather(-1, topk_ids).masked_fill(~present, minus_inf)
    # The student's tail by the same formula as the teacher's (so equal distributions give
    # equal buckets exactly), without the [.., V] pass an exact sum over the other tokens
    # would cost (+36% of a tiny model's step, measured). Where the teacher has a tail the
    # student's is floored at the same epsilon; where it has none, a student tail below it
    # is rounding error too and no bucket.
    student_tail = -torch.expm1(torch.logsumexp(student_k, dim=-1).clamp(max=-1e-12))
    student_tail_log = torch.where(
        has_tail | (student_tail > _TAIL_EPS), torch.log(student_tail.clamp(min=_TAIL_EPS)),
        torch.full_like(student_tail, minus_inf))
    teacher = torch.cat([topk_logprobs, teacher_tail_log.unsqueeze(-1)], dim=-1)
    student = torch.cat([student_k, student_tail_log.unsqueeze(-1)], dim=-1)
    if temperature != 1.0:
        teacher = torch.log_softmax(teacher / temperature, dim=-1)
        student = torch.log_softmax(student / temperature, dim=-1)
    teacher_p = teacher.exp()
    # 0 * log(0 / q) = 0 where the teacher bucket is empty (padding, no tail). The student's
    # bucket is -inf only where its ids cover the vocabulary; clamped, a teacher that still
    # claims a tail there (inconsistent data) costs a large finite loss, not inf/nan.
    terms = teacher_p * (teacher - student.clamp(min=_MIN_LOG_PROB))
    return torch.where(teacher_p > 0, terms, torch.zeros_like(terms)).sum(-1)


def full_kl(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) over the whole vocabulary; returns [...]."""
    return (teacher_logprobs.exp() * (teacher_logprobs - student_logprobs)).sum(-1)


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-position cross-entropy [B, c] (flattened: the fast contiguous kernel)."""
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="none")
    return flat.view(targets.shape)


def _chunk_divergence(hidden: torch.Tensor, targets: torch.Tensor, topk_ids: torch.Tensor | None,
                      topk_logprobs: torch.Tensor | None, topk_present: torch.Tensor | None,
                      teacher_hidden: torch.Tensor | None, *, head: nn.Module,
                      teacher_head: nn.Module | None, kind: TeacherKind,
                      temperature: float) -> torch.Tensor:
    """Per-position divergence [B, c] for one time chunk (recomputed in backward)."""
    logits = head(hidden).float()
    if kind == "onehot":
        return _cross_entropy(logits, targets)
    if kind == "online":
        with torch.no_grad():
            teacher_logits = teacher_head(teacher_hidden).float()
        vocab = min(logits.shape[-1], teacher_logits.shape[-1])  # 151936 vs 152064 padding
        student = F.log_softmax(logits[..., :vocab] / temperature, dim=-1)
        teacher = F.log_softmax(teacher_logits[..., :vocab] / temperature, dim=-1)
        return full_kl(student, teacher) * temperature ** 2
    logprobs = F.log_softmax(logits, dim=-1)
    divergence = topk_kl(logprobs, topk_ids, topk_logprobs, temperature) * temperature ** 2
    cross_entropy = -logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # no-top-k tokens
    return torch.where(topk_present, divergence, cross_entropy)


def _shift(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """Entries for the token each position predicts (t -> t+1)."""
    return None if tensor is None else tensor[:, 1:]


def per_token_losses(hidden: torch.Tensor, head: nn.Module, input_ids: torch.Tensor,
                     teacher: TeacherSignal, settings: LossSettings,
                     trained: torch.Tensor | None = None) -> torch.Tensor:
    """Divergence at every prediction position [B, T-1], computed chunk by chunk.

    With `trained` ([B, T-1] bool: the positions whose loss is used), the heads run on those
    positions alone and every other entry is 0. Prompts and observations are most of an
    agent trajectory (73% of the demo's tokens with a 4k BPE, ~60% with the `lines` one),
    and the head is most of a small model's per-token cost, so this saves a large share of
    a training step for the same loss and gradients."""
    kind = "onehot" if settings.objective == "sft" else teacher.kind
    hidden, targets = hidden[:, :-1], input_ids[:, 1:]  # the last position predicts nothing
    extras = (_shift(teacher.topk_ids), _shift(teacher.topk_logprobs),
              _shift(teacher.topk_present),
              None if teacher.hidden is None else teacher.hidden[:, :-1])
    if kind == "topk" and extras[0] is None:
        raise ValueError("teacher kind 'topk' needs topk_ids/topk_logprobs in the batch")
    if kind == "online" and (extras[3] is None or teacher.head is None):
        raise ValueError("teacher kind 'online' needs the teacher's hidden states and head")
    options = dict(head=head, teacher_head=teacher.head, kind=kind,
                   temperature=settings.temperature)
    if trained is None:
        return _chunked(hidden, targets, extras, options, settings)
    def pick(x: torch.Tensor | None) -> torch.Tensor | None:  # [B, T-1, ...] -> [1, N, ...]
        return None if x is None else x[trained].unsqueeze(0)
    picked = _chunked(pick(hidden), pick(targets), tuple(map(pick, extras)), options, settings)
    return torch.zeros(trained.shape, dtype=picked.dtype, device=picked.device) \
        .masked_scatter(trained, picked[0])


def _chunked(hidden: torch.Tensor, targets: torch.Tensor, extras: tuple, options: dict,
             settings: LossSettings) -> torch.Tensor:
    """_chunk_divergence over time chunks of `settings.chunk_size`, concatenated."""
    recompute = settings.recompute
    if recompute is None:  # float32 logits, their log-softmax and gradient: ~3 copies
        vocab = getattr(options["head"], "out_features", None) or 0
        recompute = 3 * 4 * targets.numel() * vocab > RECOMPUTE_ABOVE_BYTES
    pieces = []
    for start in range(0, targets.shape[1], settings.chunk_size):
        window = slice(start, start + settings.chunk_size)
        args = [hidden[:, window], targets[:, window]] + \
               [None if x is None else x[:, window] for x in extras]
        if recompute and torch.is_grad_enabled():
            pieces.append(checkpoint(_chunk_divergence, *args, use_reentrant=False, **options))
        else:
            pieces.append(_chunk_divergence(*args, **options))
    if not pieces:  # no position to compute: zeros that still reach the graph (backward works)
        return hidden.sum(-1).float() * 0.0
    return torch.cat(pieces, dim=1)


def span_means(token_losses: torch.Tensor, span_ids: torch.Tensor,
               weight: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Weighted sums, token counts and means of per-position losses by the span kind of the
    predicted token. `weight` is per row [B] or per token [B, T] (packed rows: the weight of
    each token's document): a mean is sum(w * loss) / sum(w), so weight-0 tokens (MCH
    negatives) contribute nothing and a table weighted 0.5 counts half."""
    target_span = span_ids[:, 1:]
    if weight is None:
        weight = torch.ones_like(target_span, dtype=token_losses.dtype)
    elif weight.dim() == 1:
        weight = weight.to(token_losses.dtype).unsqueeze(1).expand_as(target_span)
    else:
        weight = weight[:, 1:].to(token_losses.dtype)
    parts: dict[str, torch.Tensor] = {}
    for name, kind in (("reason", REASON), ("act", ACT)):
        mask = (target_span == kind) & (weight > 0)
        weighted = torch.where(mask, weight, torch.zeros_like(weight))
        total = (token_losses * weighted).sum()
        parts[f"{name}_sum"], parts[f"{name}_tokens"] = total, mask.sum()
        parts[f"{name}_weight"] = weighted.sum()
        parts[name] = total / parts[f"{name}_weight"].clamp(min=1e-6)
    return parts


def combine(parts: dict[str, torch.Tensor], settings: LossSettings) -> torch.Tensor:
    """The objective's scalar from span sums (see module docstring)."""
    if settings.objective == "sad":
        return settings.lambda_reason * parts["reason"] + settings.lambda_act * parts["act"]
    weight = (parts["reason_weight"] + parts["act_weight"]).clamp(min=1e-6)
    return (parts["reason_sum"] + parts["act_sum"]) / weight


def make_loss_fn(input_ids: torch.Tensor, span_ids: torch.Tensor, teacher: TeacherSignal,
                 settings: LossSettings, row_weight: torch.Tensor | None = None,
                 ) -> Callable[[torch.Tensor, nn.Module], tuple[torch.Tensor, dict]]:
    """The `loss_fn(hidden, lm_head)` the model calls inside its forward; `row_weight` is
    the LM weight per row [B] or per token [B, T] (see span_means). Only the positions
    span_means counts (REASON/ACT targets of weight > 0) are computed: MCH negatives (weight
    0) and prompts cost no head."""
    trained = torch.isin(span_ids[:, 1:], torch.tensor([REASON, ACT], device=span_ids.device))
    if row_weight is not None:
        weight = row_weight.unsqueeze(1) if row_weight.dim() == 1 else row_weight[:, 1:]
        trained = trained & (weight > 0)

    def loss_fn(hidden: torch.Tensor, head: nn.Module) -> tuple[torch.Tensor, dict]:
        token_losses = per_token_losses(hidden, head, input_ids, teacher, settings, trained)
        parts = span_means(token_losses, span_ids, row_weight)
        return combine(parts, settings), parts
    return loss_fn


def pcgrad_combine(grads_reason: list[torch.Tensor | None], grads_act: list[torch.Tensor | None],
                   ) -> tuple[list[torch.Tensor | None], bool]:
    """PCGrad (Yu et al. 2020) for two tasks: when the REASON and ACT gradients conflict
    (negative dot product), project each onto the normal plane of the other, then sum.
    Returns the combined per-parameter gradients and whether a projection happened."""
    pairs = [(r, a) for r, a in zip(grads_reason, grads_act) if r is not None and a is not None]
    dot = sum((r * a).sum() for r, a in pairs) if pairs else torch.tensor(0.0)
    conflict = bool(dot < 0)
    if conflict:
        norm_r = sum((r * r).sum() for r, _ in pairs).clamp(min=1e-20)
        norm_a = sum((a * a).sum() for _, a in pairs).clamp(min=1e-20)
    combined: list[torch.Tensor | None] = []
    for r, a in zip(grads_reason, grads_act):
        if r is None or a is None:
            combined.append(r if a is None else a)
        elif conflict:
            combined.append((r - dot / norm_a * a) + (a - dot / norm_r * r))
        else:
            combined.append(r + a)
    return combined, conflict


def balanced_mch_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Class-balanced binary cross-entropy of the MCH over labelled steps (labels 1 correct,
    0 wrong, -1 ignored): the mean over correct steps and the mean over wrong ones, averaged
    over the classes present. A batch holds ~4-5 correct steps per LM document against a
    fixed number of negatives; an unweighted mean would let the head settle on "always
    correct", and the loss scale would follow the batch's class mix.

    Returns the loss (0 with a graph when nothing is labelled, so DDP still sees the head)
    and the number of labelled steps."""
    labelled = labels >= 0
    count = int(labelled.sum())
    if count == 0:
        return logits.sum() * 0.0, 0
    targets = labels[labelled].float()
    per_step = F.binary_cross_entropy_with_logits(logits[labelled], targets, reduction="none")
    means = [per_step[targets == value].mean() for value in (0.0, 1.0)
             if bool((targets == value).any())]
    return torch.stack(means).mean(), count
