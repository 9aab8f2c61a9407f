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
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer.contract import ANSWER_PREFIX
from trainer.step_eval import leaves, same_json

FIRST_COPY = ("whole", "first_word_only", "other", "tool_not_called")


def agent_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for message in messages:
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls += [call["function"] for call in json.loads(message["tool_calls"])]
    return calls


def final_answer(messages: list[dict[str, Any]]) -> str | None:
    last = messages[-1] if messages else None
    if last and last["role"] == "assistant" and not last.get("tool_calls"):
        return (last["content"] or "").rpartition(ANSWER_PREFIX)[2].strip()
    return None


def first_copy(row: dict[str, Any]) -> str | None:
    """How the agent's first call of the first copying gold tool carried the quoted values;
    None when no gold call quotes the request."""
    for gold in json.loads(row["gold_calls"]):
        quoted = [v for _, v in leaves(gold["arguments"])
                  if isinstance(v, str) and len(v) >= 3 and v in row["task"]]
        if quoted:
            break
    else:
        return None
    made = next((call for call in agent_calls(row["messages"]) if call["name"] == gold["name"]),
                None)
    if made is None:
        return "tool_not_called"
    written = json.dumps(made["arguments"], ensure_ascii=False)
    if all(json.dumps(v, ensure_ascii=False)[1:-1] in written for v in quoted):
        return "whole"
    if all(v.split()[0] in written for v in quoted):
        return "first_word_only"
    return "other"


def first_divergence(row: dict[str, Any]) -> tuple[int | None, str | None]:
    """(index, how) of the first gold call the agent's calls depart from, in order: `tool`
    (another tool), `arguments` (other arguments, JSON types kept) or `stopped` (no call
    there); (None, None) when every gold call was made as written. Gold is one valid order:
    a task that allows another is counted as departing, so this is an upper bound."""
    made = agent_calls(row["messages"])
    for index, gold in enumerate(json.loads(row["gold_calls"])):
        if index >= len(made):
            return index, "stopped"
        if made[index]["name"] != gold["name"]:
            return index, "tool"
        if not same_json(made[index]["arguments"], gold["arguments"]):
            return index, "arguments"
    return None, None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    copies = Counter(kind for row in rows if (kind := first_copy(row)) is not None)
    answered = [(final_answer(row["messages"]), row["expected_answer"]) for row in rows
                if row["success"] or row["error_kind"] == "wrong_answer"]  # not broken turns
    answered = [(got, want) for got, want in answered if got is not None and want is not None]
    departures = [first_divergence(row) for row in rows]
    return {
        "episodes": len(rows), "successes": sum(bool(row["success"]) for row in rows),
        "failures": dict(Counter(row["error_kind"] for row in rows if not row["success"])),
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
