"""`trajectories/` (and any table with the trajectory contract columns) -> documents: the
stored tokens when the shard has them (an LLM teacher's exact ids), else tokenised here with
span labels from the `spans` column; tool-call steps of successful rows are MCH steps
labelled 1, a repair's ERROR calls steps labelled 0."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trainer import tokens
from trainer.contract import ERROR, TOKEN_COLUMNS, TOPK_COLUMNS, TRAINED_SPANS
from trainer.data_checks import (check_not_null, check_spans, check_token_lengths,
                                 check_token_values, check_topk_values)
from trainer.documents import DocumentRows, ReadSettings

log = logging.getLogger(__name__)


def has_stored_tokens(table: pa.Table) -> bool:
    return all(name in table.column_names for name in TOKEN_COLUMNS)


def cut_token_lists(table: pa.Table, names: tuple[str, ...], length: int) -> pa.Table:
    """`table` with its per-token list columns `names` cut to their first `length` entries,
    in Arrow: only the kept prefix becomes Python lists (a 20M-id row cost 734 MiB whole)."""
    for name in names:
        table = table.set_column(table.schema.get_field_index(name), name,
                                 pc.list_slice(table.column(name), 0, length))
    return table


def checked_prefix(table: pa.Table, vocab_size: int, max_seq_len: int, with_topk: bool,
                   ) -> pa.Table:
    """The stored token (and `with_topk`, top-k) columns checked and cut to max_seq_len + 1
    tokens (the one past the cut tells whether the last kept ACT run ends inside it:
    mch_steps). Row lengths are compared whole, before the cut (a longer top-k list shifts
    the teacher targets of the batch's later documents even when its excess lies past the
    cut); values in the kept prefix only: the rest is never read."""
    stored = has_stored_tokens(table)
    if stored:
        check_token_lengths(table, with_topk)
    table = cut_token_lists(table, (TOKEN_COLUMNS if stored else ()) +
                            (TOPK_COLUMNS if with_topk else ()), max_seq_len + 1)
    if stored:
        check_token_values(table, vocab_size)
    if with_topk:
        check_topk_values(table, vocab_size)
    return table


def _token_columns(table: pa.Table, tokenizer: tokens.TextTokenizer, max_seq_len: int,
                   ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Stored token ids when the shard has them (exact teacher tokens), else tokenised here:
    each text cut first to `tokens.text_bound` characters, which hold more than
    `max_seq_len` + 1 tokens, so the kept tokens and their labels (a token's span is the
    one holding its first character) are those of the whole text. Before, a 5 MB text took
    1.7 GB to tokenise and a 50 MB one aborted the process in the Rust tokenizer."""
    if has_stored_tokens(table):  # checked and cut: checked_prefix
        ids = [np.asarray(x, dtype=np.int32) for x in table.column("input_ids").to_pylist()]
        spans = [np.asarray(x, dtype=np.int8) for x in table.column("span_ids").to_pylist()]
        return ids, spans
    check_spans(table)
    texts = pc.utf8_slice_codeunits(table.column("text"), 0,
                                    tokens.text_bound(tokenizer, max_seq_len))
    encoded, labels = tokens.tokenize_with_spans(tokenizer, texts.to_pylist(),
                                                 table.column("spans").to_pylist())
    return [np.asarray(x, dtype=np.int32) for x in encoded], labels


def trained_tokens(span_ids: np.ndarray) -> int:
    return int(np.isin(span_ids, TRAINED_SPANS).sum())


def mch_steps(ids: np.ndarray, spans: np.ndarray, call_id: int, success: bool, limit: int,
           ) -> tuple[list[int], list[int]]:
    """MCH positions and labels of a trajectory-shaped document: its tool calls (1 when the
    document is a success, else -1 = not scored) and its ERROR calls (0), inside `limit`."""
    scored = [(end, 1 if success else -1)
              for end in tokens.tool_call_step_ends(ids, spans, call_id)]
    scored += [(end, 0) for end in tokens.tool_call_step_ends(ids, spans, call_id,
                                                              kind=ERROR)]
    scored = sorted(step for step in scored if step[0] < limit)
    return [end for end, _ in scored], [label for _, label in scored]


def trajectory_shaped_documents(table: pa.Table, settings: ReadSettings, lm_weight: float,
                                ) -> tuple[DocumentRows, list[float]]:
    """Documents of a table with the trajectory contract columns (trajectories, repairs),
    and the complexity of every input row (also of rows not emitted). A row whose kept
    prefix holds no REASON/ACT token is not emitted: it would be a step without LM loss."""
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    call_id = tokens.special_ids(tokenizer)["tool_call_start"]
    check_not_null(table, ("id", "success"))  # a null n_steps counts 0 (complexity)
    with_topk = settings.read_topk and "teacher_topk_ids" in table.column_names
    table = checked_prefix(table, len(tokenizer), settings.max_seq_len, with_topk)
    ids, spans = _token_columns(table, tokenizer, settings.max_seq_len)
    success, n_steps = table.column("success").to_pylist(), table.column("n_steps").to_pylist()
    topk_ids = table.column("teacher_topk_ids").to_pylist() if with_topk else None
    topk_lp = table.column("teacher_topk_logprobs").to_pylist() if with_topk else None
    limit, rows, scores, dropped = settings.max_seq_len, DocumentRows(), [], 0
    for i in range(table.num_rows):
        row_ids, row_spans = ids[i][:limit], spans[i][:limit]
        entropy = tokens.topk_entropy(topk_lp[i][:limit]) if with_topk else 0.0
        score = tokens.complexity(n_steps[i] or 0, row_spans, entropy, settings.complexity_weights)
        scores.append(score)
        if not trained_tokens(row_spans):
            dropped += 1
            continue
        positions, labels = mch_steps(ids[i], spans[i], call_id, bool(success[i]), limit) \
            if settings.use_mch else ([], [])
        rows.add(input_ids=row_ids, span_ids=row_spans, mch_positions=positions,
                 mch_labels=labels, lm_weight=lm_weight, complexity=score,
                 teacher_topk_ids=topk_ids[i][:limit] if with_topk else [],
                 teacher_topk_logprobs=topk_lp[i][:limit] if with_topk else [])
    log_dropped(table, dropped, limit)
    return rows, scores


def log_dropped(table: pa.Table, dropped: int, max_seq_len: int) -> None:
    """One line per table read: rows left out for want of a trained token in their prefix
    (before, dropped without a word; all of them ended the fit with no batch)."""
    if dropped:
        shards = sorted(set(table.column("path").to_pylist())) if "path" in table.column_names \
            else ["?"]
        log.warning("%d of %d rows of %s left out: data.max_seq_len %d keeps no REASON/ACT "
                    "token of theirs (a larger data.max_seq_len keeps them)", dropped,
                    table.num_rows, ", ".join(shards[:3]) + (" ..." if len(shards) > 3 else ""),
                    max_seq_len)
