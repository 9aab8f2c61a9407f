"""The round table: one row per complete round, as JSON lines and as Markdown.

Both files are rebuilt from the rounds' manifests after every round (not appended to), so a
loop killed between a manifest and the table, and rerun, has each round exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = (  # (header, key in the row, format)
    ("round", "round", "{}"), ("success", "success_rate", "{:.3f}"),
    ("syntax err", "syntax_error_rate", "{:.3f}"),
    ("call exact", "next_call_exact_match", "{:.3f}"),
    ("ACT acc", "act_token_accuracy", "{:.3f}"), ("schema valid", "schema_valid_rate", "{:.3f}"),
    ("copy", "copy_rate", "{:.3f}"),
    ("ACT CE", "act_ce", "{:.3f}"), ("IRR", "irr", "{:.3f}"), ("IRR n", "irr_n", "{}"),
    ("rollouts", "rollouts", "{}"), ("rollout success", "rollout_success_rate", "{:.3f}"),
    ("repairs", "repairs", "{}"), ("replay", "replay_rows", "{}"),
    ("train rows", "train_rows", "{}"), ("steps", "train_steps", "{}"),
    ("wall s", "wall_seconds", "{:.0f}"))


def round_row(manifest: dict[str, Any]) -> dict[str, Any]:
    """The table's row of one round manifest."""
    data, mix = manifest.get("generate") or {}, manifest.get("mix") or {}
    rollouts = data.get("rollouts") if manifest["round"] > 0 else None
    return {"round": manifest["round"], **manifest["eval"],
            "rollouts": rollouts,
            "rollout_success_rate": data["succeeded"] / rollouts if rollouts else None,
            "repairs": data.get("repairs") if manifest["round"] > 0 else None,
            "replay_rows": mix.get("replay_rows"),
            "train_rows": mix.get("rows", data.get("rollouts") if manifest["round"] == 0 else None),
            "train_steps": (manifest.get("train") or {}).get("steps"),
            "dpo_steps": (manifest.get("dpo") or {}).get("steps"),
            "checkpoint": manifest["checkpoint"], "wall_seconds": manifest["seconds"],
            "phase_seconds": manifest["phase_seconds"], "note": manifest.get("note")}


def _cell(value: Any, pattern: str) -> str:
    if value is None:
        return "-"
    return pattern.format(value)


def markdown(rows: list[dict[str, Any]]) -> str:
    header = "| " + " | ".join(name for name, _, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---:" for _ in COLUMNS) + "|"
    lines = [header, rule]
    lines += ["| " + " | ".join(_cell(row.get(key), pattern) for _, key, pattern in COLUMNS)
              + " |" for row in rows]
    notes = [f"- round {row['round']}: {row['note']}" for row in rows if row.get("note")]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def write_table(out: Path, manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """rounds.jsonl and rounds.md from the manifests of the complete rounds, in order."""
    rows = [round_row(m) for m in sorted(manifests, key=lambda m: m["round"])]
    tmp = out / ".rounds.jsonl.tmp"
    tmp.write_text("".join(json.dumps(row, default=str) + "\n" for row in rows))
    tmp.replace(out / "rounds.jsonl")
    (out / ".rounds.md.tmp").write_text(markdown(rows))
    (out / ".rounds.md.tmp").replace(out / "rounds.md")
    return rows
