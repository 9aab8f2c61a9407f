"""The built-in output tables: schema (from datagen/rows.py, the contract with trainers), what
a row is, and what each column means (the dataset card prints these with the Arrow types).
`preferences` is written by two stages (negatives, then critics), so it is declared once here.
"""

from __future__ import annotations

import pyarrow as pa

from datagen.pipeline.stages.base import Table
from datagen.rows import (NEGATIVE_SCHEMA, PREFERENCE_SCHEMA, REPAIR_SCHEMA, TEACHER_FIELDS,
                          TOKEN_FIELDS, TRAJECTORY_SCHEMA)

_TRAJECTORY_COLUMNS = {
    "id": "trajectory id, deterministic in (task, teacher, round)",
    "env": "environment",
    "task_id": "task id",
    "task_seed": "the seed that regenerates the task (`env.generate_task(task_seed, task_id)`)",
    "task": "the user instruction",
    "tools": "OpenAI-style tool specs offered to the agent (JSON)",
    "messages": "the conversation; `tool_calls` is JSON",
    "text": "the conversation rendered with the Qwen2.5 chat template",
    "spans": "PROMPT / REASON / ACT / OBS character ranges tiling `text`",
    "success": "the environment checker's verdict",
    "reward": "1.0 on success, else 0.0",
    "error": "why the episode failed (null when it did not)",
    "error_kind": "the failure's kind, to count by: task_generation_failed, rollout_raised, "
                  "tool_raised, checker_rejected; LLM teachers: wrong_answer, max_turns, "
                  "engine_lost, invalid_arguments, unknown_tool, invalid_json, truncated, ... "
                  "(null on success)",
    "n_steps": "tool calls in the trajectory",
    "teacher": "who produced it",
    "round": "distillation round",
    "input_ids": "only with a tokenizer: the token ids of `text`",
    "span_ids": "only with a tokenizer: span kind per token (0 PROMPT, 1 REASON, 2 ACT, 3 OBS)",
    "tokenizer": "only with token ids: the tokenizer that made them (a trainer checks it "
                 "matches its own)",
    "teacher_topk_ids": "LLM teachers: top-k token ids per generated token (empty elsewhere)",
    "teacher_topk_logprobs": "LLM teachers: their log-probabilities",
    "teacher_meta": "LLM teachers: sampling, tokens, latency, cost of the episode (JSON)",
}

TRAJECTORIES = Table(
    "trajectories", TRAJECTORY_SCHEMA, "one row per trajectory", _TRAJECTORY_COLUMNS,
    optional=(*TOKEN_FIELDS, *(pa.field(name, kind) for name, kind in TEACHER_FIELDS.items())))

NEGATIVES = Table("negatives", NEGATIVE_SCHEMA, "one row per typed hard negative of a correct "
                  "tool call (the meta-cognitive head's incorrect-step labels)", {
    "trajectory_id": "the trajectory whose call was mutated",
    "env": "environment",
    "step": "assistant turn of the call",
    "kind": "negative kind (a name from the mutators' registry: type_error, "
            "hallucinated_key, logical_error, wrong_function, missing_required)",
    "subkind": "how it was made (synonym, borrowed, wrong_entity, swapped, shifted_date ...)",
    "path": "where the call changed (`arguments.filters.status`)",
    "tool": "the tool called",
    "original": "the correct call (JSON)",
    "mutated": "the negative call (JSON)",
    "original_value": "the value at `path` before (JSON)",
    "mutated_value": "the value at `path` after (JSON)",
    "errors": "what the validator says about the mutated call",
    "schema_valid": "whether the mutated call validates (only logical errors do)",
    "outcome_changed": "a logical error was executed in the environment and changed the "
                       "observation or state (null when not executed)",
    "description": "the change in words",
})

REPAIRS = Table("repairs", REPAIR_SCHEMA, "one row per repaired trajectory: an injected error "
                "or a failed rollout, critiqued and continued to success", {
    **_TRAJECTORY_COLUMNS,
    "error": "null: a repaired trajectory succeeds",
    "error_kind": "the kind of the repaired fault: a negative kind (injected) or "
                  "failed_rollout",
    "spans": "as in trajectories, plus ERROR for the wrong call (kept for context, no loss)",
    "source_id": "the trajectory that was repaired",
    "error_step": "assistant turn of the wrong call",
    "critique": "the critic's text (the REASON of the corrected turn)",
})

# `preferences.layout: compact`: a negative or repair pair leaves `prompt` and `prompt_text`
# null and says how much of its trajectory's `messages` and `text` (trajectories/, resp.
# repairs/) the prompt is instead (datagen.preferences.join_prompts puts them back).
PROMPT_REFERENCE_FIELDS = (pa.field("prompt_messages", pa.int16()),
                           pa.field("prompt_chars", pa.int32()))

PREFERENCES = Table("preferences", PREFERENCE_SCHEMA, "one chosen/rejected pair per row "
                    "(TRL's conversational DPO format)", {
    "id": "pair id, deterministic",
    "trajectory_id": "the trajectory the prompt comes from",
    "env": "environment",
    "step": "assistant turn the pair decides",
    "source": "negative | repair | safety",
    "kind": "finer label: the negative kind, the repaired error kind, the safety kind",
    "tools": "tool specs (JSON)",
    "prompt": "messages up to the decision",
    "chosen": "the preferred assistant turn",
    "rejected": "the dispreferred assistant turn",
    "prompt_text": "`prompt` with the chat template (ends with the assistant header)",
    "chosen_text": "`chosen` rendered; `prompt_text + chosen_text` is the trajectory's text "
                   "up to that turn",
    "rejected_text": "`rejected` rendered",
    "prompt_messages": "compact layout only: the prompt is the first `prompt_messages` "
                       "messages of row `trajectory_id` of trajectories/ (a repair pair: of "
                       "repairs/) in the same chunk (null: `prompt` holds it)",
    "prompt_chars": "compact layout only: `prompt_text` is the first `prompt_chars` "
                    "characters of that trajectory's `text`",
}, optional=PROMPT_REFERENCE_FIELDS, shared_text=("tools", "prompt_text"))


def preferences_table(layout: str) -> Table:
    """The preferences table as a run of `layout` (full | compact) writes it."""
    if layout == "full":
        return PREFERENCES
    schema = PREFERENCES.schema
    for field in PROMPT_REFERENCE_FIELDS:
        schema = schema.append(field)
    return Table(PREFERENCES.name, schema, PREFERENCES.about, PREFERENCES.columns,
                 shared_text=PREFERENCES.shared_text)
