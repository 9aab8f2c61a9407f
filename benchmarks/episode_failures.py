"""Why held-out episodes fail, read from `trainer eval --episodes-out` files (a diagnostic
script, not a test).

Per file and pooled: episodes, successes, failure kinds, and two checks that locate the failure
in the episode:

- **first copy**: the first gold call with an argument value quoted from the request (a name,
  path, city, ...; >= 3 characters, verbatim in the task text), and the agent's first call of
  that tool: did it carry every such value whole, only the value's first word (`Esther
  Haddad` for `Esther Lindqvist`), something else, or did the agent never call that tool;
- **first divergence**: the first gold call (by index) the agent's calls depart from, and how
  (another tool, other arguments, no call there): how far along the reference path it gets;
- **final answer** of the episodes that reached one: equal to the expected answer, or not.

    python -m trainer eval --checkpoint C --only episodes --num-tasks 30 --eval-seed E \\
        --max-new-tokens 128 --irr-tasks 0 --threads 1 --shards out/demo --episodes-out C.ep_E.parquet
    python benchmarks/episode_failures.py C.ep_*.parquet
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from datagen.rows import trajectory_from_row
from datagen.types import ToolCall
from trainer.step_eval import leaves, same_json, value_kind

FIRST_COPY = ("whole", "first_word_only", "other", "tool_not_called")


@dataclass(slots=True)
class Episode:
    """One row of an --episodes-out file, parsed once: the request, the reference calls, the
    agent's calls in order and its final answer (None when it gave none)."""

    task: str
    gold: list[dict[str, Any]]
    calls: list[ToolCall]
    answer: str | None
    success: bool
    error_kind: str | None
    expected: str | None


def episode(row: dict[str, Any]) -> Episode:
    steps = trajectory_from_row(row).steps  # the shards' own message parser
    answer = steps[-1].answer if steps else None
    return Episode(task=row["task"], gold=json.loads(row["gold_calls"]),
                   calls=[step.call for step in steps if step.call is not None],
                   answer=answer.strip() if answer is not None else None,
                   success=bool(row["success"]), error_kind=row["error_kind"],
                   expected=row["expected_answer"])


def first_copy(played: Episode) -> str | None:
    """How the agent's first call of the first copying gold tool carried the quoted values;
    None when no gold call quotes the request."""
    for gold in played.gold:
        quoted = [v for _, v in leaves(gold["arguments"])
                  if value_kind(v) == "text" and v in played.task]  # the step eval's copyables
        if quoted:
            break
    else:
        return None
    made = next((call for call in played.calls if call.name == gold["name"]), None)
    if made is None:
        return "tool_not_called"
    written = json.dumps(made.arguments, ensure_ascii=False)
    if all(json.dumps(v, ensure_ascii=False)[1:-1] in written for v in quoted):
        return "whole"
    if all(v.split()[0] in written for v in quoted):
        return "first_word_only"
    return "other"


def first_divergence(played: Episode) -> tuple[int | None, str | None]:
    """(index, how) of the first gold call the agent's calls depart from, in order: `tool`
    (another tool), `arguments` (other arguments, JSON types kept) or `stopped` (no call
    there); (None, None) when every gold call was made as written. Gold is one valid order:
    a task that allows another is counted as departing, so this is an upper bound."""
    for index, gold in enumerate(played.gold):
        if index >= len(played.calls):
            return index, "stopped"
        if played.calls[index].name != gold["name"]:
            return index, "tool"
        if not same_json(played.calls[index].arguments, gold["arguments"]):
            return index, "arguments"
    return None, None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    episodes = [episode(row) for row in rows]
    copies = Counter(kind for played in episodes if (kind := first_copy(played)) is not None)
    answered = [(played.answer, played.expected) for played in episodes
                if (played.success or played.error_kind == "wrong_answer")  # not broken turns
                and played.answer is not None and played.expected is not None]
    departures = [first_divergence(played) for played in episodes]
    return {
        "episodes": len(episodes), "successes": sum(played.success for played in episodes),
        "failures": dict(Counter(p.error_kind for p in episodes if not p.success)),
        "first_copy": {kind: copies.get(kind, 0) for kind in FIRST_COPY},
        "first_divergence": {
            "at_call": dict(sorted(Counter(i for i, _ in departures if i is not None).items())),
            "how": dict(Counter(how for _, how in departures if how is not None)),
            "none": sum(i is None for i, _ in departures)},
        "final_answers": len(answered),
        "final_answer_equal": sum(got == want for got, want in answered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="trainer eval --episodes-out files")
    args = parser.parse_args()
    pooled = []
    for path in args.files:
        rows = pq.read_table(path).to_pylist()
        pooled += rows
        print(path, json.dumps(summarise(rows)))
    if len(args.files) > 1:
        print("pooled", json.dumps(summarise(pooled)))


if __name__ == "__main__":
    main()
