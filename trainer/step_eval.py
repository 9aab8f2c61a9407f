"""Step-level, teacher-forced metrics on held-out gold trajectories.

The gold trajectories are made here, in-process: datagen's oracle teacher rolls out each
held-out task in its environment, `datagen.chat.render_trajectory` renders it (text + spans,
exactly as in the shards) and `trainer.tokens` tokenises and labels it as training does. A
scorer (`trainer.step_scorer.TorchStepScorer` for a checkpoint) then reports per trajectory:

- the log-probability of every REASON and ACT token given the gold history (position t-1
  predicts token t, counted under token t's span kind, as in the losses) and, for ACT,
  whether it was the argmax;
- at every gold tool-call step, the turn the model generates greedily from the gold history
  (prompt = everything before the step's reasoning);
- with an MCH, its confidence at every gold call (label 1) and at typed hard negatives of
  that call (label 0): `mutators.mutate_report` on the gold call with the environment
  replayed to that step, rendered as the trainer renders MCH negatives.

Metrics (overall and per environment): `reason_ce`, `act_ce` (mean nats per token),
`act_token_accuracy`; over gold call steps: `next_call_exact_match` (the generated turn parses
with datagen's parser into the gold call: same name, same arguments with JSON types kept),
`right_tool_rate` (same name), `schema_valid_rate` (the call passes `mutators.validate`
against the tool it names); `mch.auroc` of gold vs negatives, overall and per negative kind.
A generated turn that does not close within its budget, does not parse or is a final answer
counts as a miss for all three.

Copying (`copy_rate`): every leaf of a gold call's arguments whose value occurs verbatim in the
text the model sees before the turn (a string of >= 3 characters, as is or JSON-escaped; a
number by its JSON text, not inside a longer number) is copyable; it is copied when the
generated call has the same value at the same key path. A miss is `other_context_value` (the
generated value occurs in the context too, outside the gold value: it copied the wrong thing),
`invented` (it does not), `missing_key` (no value at that path) or `unparsed` (the turn is
not a call).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from trainer.tokens import SPAN_KIND_ID, TOOL_CALL_OPEN, label_tokens, tool_call_step_ends

if TYPE_CHECKING:
    from datagen.types import Task, ToolCall, Trajectory
    from trainer.tokens import TextTokenizer

REASON, ACT = SPAN_KIND_ID["REASON"], SPAN_KIND_ID["ACT"]


@dataclass
class CallStep:
    """One gold tool call, located in the trajectory's tokens."""

    step: int            # index in the trajectory's steps
    prompt_len: int      # tokens before the turn (the prompt ends with the assistant header)
    act_start: int       # first token of the step's ACT span
    score_at: int        # last token of that ACT run (where the MCH reads, as in training)
    call: "ToolCall"
    context_chars: int   # characters of GoldExample.text before the turn (what the model sees)


@dataclass
class NegativeCall:
    """A typed hard negative of a gold call: the ACT tokens of the wrong call."""

    call_index: int      # into GoldExample.calls
    kind: str
    act_ids: list[int]


@dataclass
class GoldExample:
    env: str
    task_id: str
    tools: list[dict[str, Any]]
    ids: list[int]
    span_ids: np.ndarray
    calls: list[CallStep]
    negatives: list[NegativeCall] = field(default_factory=list)
    text: str = ""       # the rendered trajectory (the copy metric reads its context)


@dataclass
class GeneratedTurn:
    text: str            # without the closing <|im_end|>
    closed: bool         # the model emitted <|im_end|> within the budget


@dataclass
class ExampleScores:
    """What a scorer reports for one GoldExample."""

    reason_logprobs: np.ndarray
    act_logprobs: np.ndarray
    act_hits: np.ndarray                      # bool per ACT token: the argmax was the token
    turns: list[GeneratedTurn]                # one per gold call step
    gold_confidence: list[float] | None = None      # MCH, one per gold call step
    negative_confidence: list[float] | None = None  # MCH, one per negative


class StepScorer(Protocol):
    def score(self, examples: Sequence[GoldExample]) -> list[ExampleScores]: ...


def _span_dicts(spans: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"kind": s.kind, "start": s.start, "end": s.end, "step": s.step} for s in spans]


def _token_at(starts: list[int], char: int) -> int | None:
    """Index of the token that starts exactly at `char` (None when a token straddles it)."""
    index = bisect.bisect_left(starts, char)
    return index if index < len(starts) and starts[index] == char else None


def _step_spans(spans: list[dict[str, Any]], step: int) -> tuple[int, dict[str, Any]]:
    """Char offset where turn `step` starts (its reasoning, else its action) and its ACT span."""
    own = [s for s in spans if s["step"] == step and s["kind"] in ("REASON", "ACT")]
    return own[0]["start"], next(s for s in own if s["kind"] == "ACT")


def _negatives(traj: "Trajectory", env: Any, calls: list[CallStep], text: str,
               spans: list[dict[str, Any]], tokenizer: "TextTokenizer") -> list[NegativeCall]:
    """Typed hard negatives of every gold call, the environment replayed to each step (so
    logical errors use real entities and are checked to change the outcome)."""
    import orjson

    from datagen.types import stable_seed
    from mutators import KINDS, mutate_report
    from trainer.negatives import negative_example

    tools = {tool["function"]["name"]: tool for tool in traj.tools}
    by_step = {c.step: i for i, c in enumerate(calls)}
    out: list[NegativeCall] = []
    env.reset(traj.task)
    for index, step in enumerate(traj.steps):
        if step.call is None:
            continue
        if index in by_step:
            report = mutate_report(step.call.as_dict(), tools[step.call.name],
                                   seed=stable_seed("heldout-negatives", traj.task.id, index),
                                   env=env, other_tools=traj.tools, kinds=KINDS)
            _, act = _step_spans(spans, index)
            for negative in report.negatives:
                example = negative_example(text, spans, index, orjson.dumps(negative.call).decode())
                if example is not None:
                    (act_ids,), _ = tokenizer.encode([example[0][act["start"]:]])
                    out.append(NegativeCall(by_step[index], negative.kind, act_ids))
        env.step(step.call.as_dict())
    return out


def gold_example(traj: "Trajectory", tokenizer: "TextTokenizer", env: Any = None,
                 skipped: Counter | None = None) -> GoldExample:
    """Tokenise and locate a gold trajectory; with `env`, add its negatives. Call steps whose
    boundaries fall inside a token are left out (counted in `skipped`)."""
    from datagen.chat import render_trajectory

    skipped = skipped if skipped is not None else Counter()
    text, span_objects = render_trajectory(traj)
    spans = _span_dicts(span_objects)
    (ids,), (offsets,) = tokenizer.encode([text])
    span_ids = label_tokens(offsets, spans)
    starts = [offset[0] for offset in offsets]
    marker = tokenizer.token_id(TOOL_CALL_OPEN)
    ends = tool_call_step_ends(np.asarray(ids), span_ids, marker) if marker is not None else []
    call_indices = [i for i, step in enumerate(traj.steps) if step.call is not None]
    calls = []
    for step, score_at in zip(call_indices, ends):
        turn_start, act = _step_spans(spans, step)
        prompt_len, act_start = _token_at(starts, turn_start), _token_at(starts, act["start"])
        if prompt_len is None or act_start is None:
            skipped["call_step_boundary_inside_a_token"] += 1
            continue
        calls.append(CallStep(step, prompt_len, act_start, score_at, traj.steps[step].call,
                              turn_start))
    example = GoldExample(traj.task.env, traj.task.id, traj.tools, ids, span_ids, calls,
                          text=text)
    if env is not None and calls:
        example.negatives = _negatives(traj, env, calls, text, spans, tokenizer)
    return example


def gold_examples(tasks: Sequence["Task"], tokenizer: "TextTokenizer", with_negatives: bool,
                  ) -> tuple[list[GoldExample], Counter]:
    """Oracle rollouts of `tasks`, tokenised; tasks the oracle cannot solve are skipped."""
    from datagen.teachers import EnvPool, OracleTeacher

    pool, teacher, skipped, examples = EnvPool(), OracleTeacher(), Counter(), []
    for task in tasks:
        traj = teacher.safe_rollout(task, pool)
        if not traj.success:
            skipped["oracle_failed"] += 1
            continue
        env = pool.get(task.env) if with_negatives else None
        examples.append(gold_example(traj, tokenizer, env, skipped))
    return examples, skipped


def same_json(left: Any, right: Any) -> bool:
    """JSON equality that keeps types apart (1 != 1.5, True != 1, "1" != 1; 2 == 2.0)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same_json(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(same_json, left, right))
    return type(left) is type(right) and left == right


def parsed_call(turn: GeneratedTurn) -> "ToolCall | None":
    """The call of a generated turn; None when it is cut off, does not parse or answers."""
    from datagen.chat import parse_assistant

    parsed = parse_assistant(turn.text) if turn.closed else None
    return parsed.call if parsed is not None and parsed.error is None else None


def judge_call(call: "ToolCall | None", gold: "ToolCall", tools: list[dict[str, Any]],
               ) -> tuple[bool, bool, bool]:
    """(exact match, right tool, schema-valid) of a generated turn's call (`parsed_call`;
    None: a miss for all three) against the gold call."""
    from mutators import validate

    if call is None:
        return False, False, False
    tool = next((t for t in tools if t["function"]["name"] == call.name), None)
    valid = tool is not None and not validate(call.as_dict(), tool)
    right_tool = call.name == gold.name
    return right_tool and same_json(call.arguments, gold.arguments), right_tool, valid


def leaves(value: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """(key path, value) of every leaf of a JSON value (dict keys and list indices)."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in leaves(item, path + (key,))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in leaves(item, path + (index,))]
    return [(path, value)]


def value_at(value: Any, path: tuple) -> tuple[bool, Any]:
    """(found, value) at a key path; a list index only reads a list, a key only a dict."""
    for key in path:
        if isinstance(key, int) and isinstance(value, list) and key < len(value):
            value = value[key]
        elif isinstance(key, str) and isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return False, None
    return True, value


def value_kind(value: Any) -> str | None:
    """`numeric` or `text` for a value that can be copied from text; None for the rest
    (booleans, null, strings under 3 characters: they occur anywhere, copying means nothing)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "numeric"
    if isinstance(value, str) and len(value) >= 3:
        return "text"
    return None


def occurs_in(value: Any, context: str) -> bool:
    """Whether a copyable value occurs verbatim in the context: a string as is or as JSON
    writes it inside quotes (observations are JSON), a number by its JSON text but not inside
    a longer number (17 is not in 417 or 1.17)."""
    import orjson

    kind = value_kind(value)
    if kind == "text":
        return value in context or orjson.dumps(value).decode()[1:-1] in context
    if kind == "numeric":
        number = re.escape(orjson.dumps(value).decode())
        return re.search(rf"(?<![\d.]){number}(?!\.?\d)", context) is not None
    return False


def copy_outcomes(call: "ToolCall | None", gold: "ToolCall", context: str,
                  ) -> list[tuple[str, str]]:
    """(value kind, outcome) per copyable gold argument leaf: `copied`, `other_context_value`,
    `invented`, `missing_key` or `unparsed` (see the module docstring)."""
    out = []
    for path, value in leaves(gold.arguments):
        kind = value_kind(value)
        if kind is None or not occurs_in(value, context):
            continue
        found, generated = value_at(call.arguments, path) if call is not None else (False, None)
        if call is None:
            outcome = "unparsed"
        elif not found:
            outcome = "missing_key"
        elif same_json(generated, value):
            outcome = "copied"
        else:
            elsewhere = occurs_in(generated, _without(context, value))
            outcome = "other_context_value" if elsewhere else "invented"
        out.append((kind, outcome))
    return out


def _without(context: str, value: Any) -> str:
    """The context with a text value's occurrences cut out: a piece of the right name (cut
    off early) is not another value of the context."""
    import orjson

    if value_kind(value) != "text":
        return context
    return context.replace(value, "\0").replace(orjson.dumps(value).decode()[1:-1], "\0")


COPY_MISSES = ("other_context_value", "invented", "missing_key", "unparsed")


def copy_metrics(counts: Counter) -> dict[str, Any]:
    """Rates from (kind, outcome) counts: overall and per kind; misses as shares of misses."""
    def rate(kinds: tuple[str, ...]) -> float | None:
        total = sum(n for (kind, _), n in counts.items() if kind in kinds)
        return sum(counts[(kind, "copied")] for kind in kinds) / total if total else None

    misses: Counter = Counter()
    for (_, outcome), n in counts.items():
        misses[outcome] += n if outcome != "copied" else 0
    missed = sum(misses.values())
    shares = {o: misses[o] / missed if missed else None for o in COPY_MISSES}
    return {"copy_rate": rate(("numeric", "text")), "copy_rate_numeric": rate(("numeric",)),
            "copy_rate_text": rate(("text",)), "copyable_arguments": sum(counts.values()),
            "copyable_numeric": sum(n for (kind, _), n in counts.items() if kind == "numeric"),
            "copy_misses": {"count": missed, **shares}}


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """P(score of a positive > score of a negative), ties counting half (Mann-Whitney)."""
    if not positives or not negatives:
        return None
    negative = np.sort(np.asarray(negatives, dtype=np.float64))
    positive = np.asarray(positives, dtype=np.float64)
    below = np.searchsorted(negative, positive, side="left")
    ties = np.searchsorted(negative, positive, side="right") - below
    return float((below + 0.5 * ties).sum() / (len(positive) * len(negative)))


class _Tally:
    """Sums for one group of examples (all, or one environment)."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.sums: defaultdict[str, float] = defaultdict(float)
        self.copies: Counter = Counter()   # (value kind, outcome) of copyable gold arguments

    def add(self, example: GoldExample, scores: ExampleScores) -> None:
        self.counts.update(trajectories=1, reason_tokens=len(scores.reason_logprobs),
                           act_tokens=len(scores.act_logprobs), act_hits=int(scores.act_hits.sum()))
        self.sums["reason_nll"] -= float(scores.reason_logprobs.sum())
        self.sums["act_nll"] -= float(scores.act_logprobs.sum())
        for call, turn in zip(example.calls, scores.turns):
            generated = parsed_call(turn)  # parsed once: judged and checked for copies
            exact, right_tool, valid = judge_call(generated, call.call, example.tools)
            self.counts.update(call_steps=1, exact=exact, right_tool=right_tool, valid=valid,
                               closed_turns=turn.closed)
            context = example.text[:call.context_chars]
            self.copies.update(copy_outcomes(generated, call.call, context))

    def metrics(self) -> dict[str, Any]:
        c, calls = self.counts, max(self.counts["call_steps"], 1)
        return {"trajectories": c["trajectories"], "call_steps": c["call_steps"],
                "reason_ce": self.sums["reason_nll"] / max(c["reason_tokens"], 1),
                "act_ce": self.sums["act_nll"] / max(c["act_tokens"], 1),
                "act_token_accuracy": c["act_hits"] / max(c["act_tokens"], 1),
                "next_call_exact_match": c["exact"] / calls,
                "right_tool_rate": c["right_tool"] / calls,
                "schema_valid_rate": c["valid"] / calls,
                "closed_turn_rate": c["closed_turns"] / calls, **copy_metrics(self.copies),
                "reason_tokens": c["reason_tokens"], "act_tokens": c["act_tokens"]}


def mch_metrics(examples: Sequence[GoldExample], scores: Sequence[ExampleScores],
                ) -> dict[str, Any] | None:
    """AUROC of the MCH confidence: gold calls vs their hard negatives (overall, per kind)."""
    if not scores or any(s.gold_confidence is None for s in scores):
        return None
    gold = [c for s in scores for c in s.gold_confidence]
    by_kind: defaultdict[str, list[float]] = defaultdict(list)
    for example, score in zip(examples, scores):
        for negative, confidence in zip(example.negatives, score.negative_confidence or []):
            by_kind[negative.kind].append(confidence)
    negatives = [c for values in by_kind.values() for c in values]
    return {"auroc": auroc(gold, negatives), "gold_steps": len(gold),
            "negatives": len(negatives),
            "mean_confidence_gold": float(np.mean(gold)) if gold else None,
            "mean_confidence_negative": float(np.mean(negatives)) if negatives else None,
            "per_kind": {kind: {"n": len(values), "auroc": auroc(gold, values)}
                         for kind, values in sorted(by_kind.items())}}


def step_metrics(examples: Sequence[GoldExample], scores: Sequence[ExampleScores],
                 ) -> dict[str, Any]:
    """The report's `step_level` section (see the module docstring)."""
    overall, per_env = _Tally(), defaultdict(_Tally)
    for example, score in zip(examples, scores):
        overall.add(example, score)
        per_env[example.env].add(example, score)
    return {**overall.metrics(), "per_env": {env: t.metrics() for env, t in sorted(per_env.items())},
            "mch": mch_metrics(examples, scores)}


def evaluate_steps(tasks: Sequence["Task"], tokenizer: "TextTokenizer", scorer: StepScorer,
                   with_negatives: bool) -> dict[str, Any]:
    """Gold trajectories of `tasks`, scored and summarised."""
    examples, skipped = gold_examples(tasks, tokenizer, with_negatives)
    result = step_metrics(examples, scorer.score(examples))
    result["skipped"] = dict(skipped)
    return result

