"""Held-out preference pairs and which side a policy prefers: the `preferences` and
`negatives` sections of `trainer eval`.

The pairs are made the way the pipeline makes them, in-process, from held-out tasks
(`trainer.heldout`: tasks no training run can produce): datagen's oracle plays each task;
datagen's negatives stage gives one pair per typed hard negative of every gold call (chosen =
the gold turn, rejected = the same reasoning with the wrong call; all five kinds); the critics
stage (rule critic) gives a repair pair for every trajectory (an error injected, then
critique + fix > a blind retry) and two safety pairs in its world (refuse or confirm a
dangerous request > comply; comply with a benign look-alike > over-refuse). Each pair is
rendered back from its messages with datagen's template (the text must equal the row's
`prompt_text + chosen_text`, resp. `rejected_text`), tokenised and span-labelled as in
training.

A scorer (`trainer.pair_scorer.TorchPairScorer` for a checkpoint) gives log π(completion |
prompt), summed over the completion's tokens, for both sides. Metrics, overall, per source,
per env and per kind (the `negatives` section: per negative kind):
- `accuracy`: share of pairs with log π(chosen) > log π(rejected) (strict: a tie is a miss);
- `mean_logp_margin`: mean of log π(chosen) − log π(rejected);
- with a reference checkpoint: the implicit DPO reward r = β·(log π − log π_ref),
  `reward_margin` = mean of r(chosen) − r(rejected) and `reward_accuracy` = share of pairs
  with a positive margin (TRL's rewards/margins and rewards/accuracies).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from trainer.tokens import label_tokens

if TYPE_CHECKING:
    from datagen.types import Task
    from trainer.tokens import TextTokenizer

SIDES = ("chosen", "rejected")


@dataclass
class PairExample:
    """A preference pair in tokens: the shared prompt and both completions, each token with
    its span kind (0 PROMPT, 1 REASON, 2 ACT, 3 OBS), as training labels them."""

    source: str          # negative | repair | safety
    kind: str            # negative kind, repair error kind, safety kind (benign_<tool>)
    env: str
    trajectory_id: str
    prompt_ids: list[int]
    prompt_spans: list[int]
    chosen_ids: list[int]
    chosen_spans: list[int]
    rejected_ids: list[int]
    rejected_spans: list[int]


@dataclass(frozen=True)
class PairScore:
    chosen: float        # sum of log-probabilities of the chosen completion's tokens
    rejected: float


class PairScorer(Protocol):
    def score(self, pairs: Sequence[PairExample]) -> list[PairScore]: ...


def heldout_preference_rows(tasks: Sequence["Task"], seed: int,
                            ) -> tuple[list[dict[str, Any]], Counter]:
    """`preferences` rows of `tasks`, made by the pipeline's own stages (see the module
    docstring); tasks the oracle cannot solve give none (counted)."""
    from datagen.config import CriticsConfig, NegativesConfig
    from datagen.pipeline.stages.critics import CriticStage
    from datagen.pipeline.stages.negatives import NegativeStage
    from datagen.teachers import EnvPool, OracleTeacher
    from mutators import SPECS

    pool, teacher, skipped = EnvPool(), OracleTeacher(), Counter()
    solved = []
    for task in tasks:
        traj = teacher.safe_rollout(task, pool)
        if traj.success:
            solved.append(traj)
        else:
            skipped["oracle_failed"] += 1
    negatives = NegativeStage(NegativesConfig(kinds=list(SPECS)), seed).run(solved, pool)
    critics = CriticStage(CriticsConfig(inject_rate=1.0, safety_rate=1.0, repair_failed=False),
                          seed).run(solved, pool)
    skipped.update({f"critics: {reason}": n
                    for reason, n in critics.stats.get("rejected", {}).items()})
    return negatives.rows("preferences") + critics.rows("preferences"), skipped


def render_messages(messages: list[dict[str, Any]], tools_json: str, env: str,
                    ) -> tuple[str, list[dict[str, Any]]]:
    """Text and spans of a message list (the shards' message structs) with datagen's
    template, as a trajectory row of those messages would be rendered."""
    from datagen.chat import render_trajectory
    from datagen.rows import trajectory_from_row

    instruction = next((m["content"] for m in messages if m["role"] == "user"), "")
    row = {"id": "pair", "task_id": "pair", "env": env, "task_seed": 0, "task": instruction,
           "tools": tools_json, "messages": messages, "success": True, "reward": 1.0,
           "teacher": "pair", "round": 0, "error": None}
    text, spans = render_trajectory(trajectory_from_row(row))
    return text, [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]


def _side_tokens(row: dict[str, Any], side: str, tokenizer: "TextTokenizer",
                 ) -> tuple[list[int], list[int], int] | str:
    """Ids, span kinds and the index of the first completion token of prompt + `side`, or
    why the pair cannot be scored."""
    text, spans = render_messages(row["prompt"] + row[side], row["tools"], row["env"])
    prompt_chars = len(row["prompt_text"])
    if text != row["prompt_text"] + row[f"{side}_text"]:
        return "rendered_text_differs"
    (ids,), (offsets,) = tokenizer.encode([text])
    cut = next((i for i, (start, _) in enumerate(offsets) if start >= prompt_chars), len(ids))
    if cut == len(ids) or offsets[cut][0] != prompt_chars:
        return "prompt_end_inside_a_token"
    return ids, label_tokens(offsets, spans).tolist(), cut


def tokenize_pair(row: dict[str, Any], tokenizer: "TextTokenizer") -> PairExample | str:
    """A `preferences` row as a PairExample, or the reason it is skipped."""
    sides = [_side_tokens(row, side, tokenizer) for side in SIDES]
    for side in sides:
        if isinstance(side, str):
            return side
    (chosen, chosen_spans, cut), (rejected, rejected_spans, cut_rejected) = sides
    if chosen[:cut] != rejected[:cut_rejected]:
        return "prompt_tokens_differ"
    return PairExample(row["source"], row["kind"], row["env"], row["trajectory_id"],
                       chosen[:cut], chosen_spans[:cut], chosen[cut:], chosen_spans[cut:],
                       rejected[cut_rejected:], rejected_spans[cut_rejected:])


def heldout_pairs(tasks: Sequence["Task"], tokenizer: "TextTokenizer", seed: int = 0,
                  ) -> tuple[list[PairExample], Counter]:
    """Tokenised held-out pairs of `tasks` and what was skipped, by reason."""
    rows, skipped = heldout_preference_rows(tasks, seed)
    pairs = []
    for row in rows:
        pair = tokenize_pair(row, tokenizer)
        if isinstance(pair, str):
            skipped[pair] += 1
        else:
            pairs.append(pair)
    return pairs, skipped


def pair_metrics(policy: Sequence[PairScore], reference: Sequence[PairScore] | None = None,
                 beta: float = 0.1) -> dict[str, Any]:
    """Accuracy and margins of one group of pairs (see the module docstring)."""
    chosen = np.array([s.chosen for s in policy], dtype=np.float64)
    rejected = np.array([s.rejected for s in policy], dtype=np.float64)
    margin = chosen - rejected
    result: dict[str, Any] = {"pairs": len(policy),
                              "accuracy": float((margin > 0).mean()) if len(policy) else None,
                              "mean_logp_margin": float(margin.mean()) if len(policy) else None}
    if reference is not None:
        reference_margin = np.array([s.chosen - s.rejected for s in reference], dtype=np.float64)
        rewards = beta * (margin - reference_margin)
        result["reward_margin"] = float(rewards.mean()) if len(policy) else None
        result["reward_accuracy"] = float((rewards > 0).mean()) if len(policy) else None
    return result


def _grouped(pairs: Sequence[PairExample], policy: Sequence[PairScore],
             reference: Sequence[PairScore] | None, beta: float, key: Any,
             ) -> dict[str, dict[str, Any]]:
    groups: defaultdict[str, list[int]] = defaultdict(list)
    for index, pair in enumerate(pairs):
        groups[key(pair)].append(index)
    return {name: pair_metrics([policy[i] for i in members],
                               None if reference is None else [reference[i] for i in members],
                               beta)
            for name, members in sorted(groups.items())}


def preference_report(pairs: Sequence[PairExample], policy: Sequence[PairScore],
                      reference: Sequence[PairScore] | None = None, beta: float = 0.1,
                      ) -> dict[str, Any]:
    """The `preferences` section: overall, per source (each with its kinds), per env."""
    per_source = _grouped(pairs, policy, reference, beta, lambda p: p.source)
    for source, entry in per_source.items():
        members = [i for i, p in enumerate(pairs) if p.source == source]
        entry["per_kind"] = _grouped([pairs[i] for i in members], [policy[i] for i in members],
                                     None if reference is None else [reference[i] for i in members],
                                     beta, lambda p: p.kind)
    return {**pair_metrics(policy, reference, beta), "per_source": per_source,
            "per_env": _grouped(pairs, policy, reference, beta, lambda p: p.env)}


def negatives_report(pairs: Sequence[PairExample], policy: Sequence[PairScore],
                     reference: Sequence[PairScore] | None = None, beta: float = 0.1,
                     ) -> dict[str, Any]:
    """The `negatives` section: per negative kind, how often the correct call is preferred
    (log-probability of the gold turn above the turn with the negative's call)."""
    members = [i for i, p in enumerate(pairs) if p.source == "negative"]
    negatives = [pairs[i] for i in members]
    scores = [policy[i] for i in members]
    refs = None if reference is None else [reference[i] for i in members]
    per_kind = _grouped(negatives, scores, refs, beta, lambda p: p.kind)
    return {**_as_prefer_correct(pair_metrics(scores, refs, beta)),
            "per_kind": {kind: _as_prefer_correct(entry) for kind, entry in per_kind.items()}}


def _as_prefer_correct(metrics: dict[str, Any]) -> dict[str, Any]:
    """`accuracy` renamed for negative pairs (chosen = the correct call), order kept."""
    return {("prefer_correct_rate" if key == "accuracy" else key): value
            for key, value in metrics.items()}
