"""`preferences/` safety pairs -> SFT documents for SAD (`data.tables: [.., safety]`).

The safety pairs' chosen side is a decision the trajectories never show: a refusal or a
confirmation request on a dangerous request, the call on its benign look-alike. DPO alone
starts from a student that has never worded one (README "DPO before/after, measured"), so
SAD can train on them as text: one document per distinct (`prompt_text`, `chosen_text`) of
the `safety` rows (a benign case's two pairs share their chosen side), its prompt without
loss (PROMPT, also a poisoned context's earlier turns) and the chosen turn labelled by the
contract's `chat_spans` (REASON up to the call or `Final answer:`, ACT from there), exactly
as the DPO feed labels it. Tokenised like a pair (trainer.readers.preferences): the prompt
alone and prompt + chosen, the chosen part starting where their ids diverge. A document
longer than `max_seq_len` is dropped, not cut (the decision is its end).

Safety pairs name no trajectory of the stream (their `trajectory_id` is a made-up decision),
so each is read with one trajectory of its chunk: the one at rank crc32(prompt + chosen) of
the chunk's trajectory ids (sorted; the rollouts the consistency filter kept when it is on).
Every pool reads the pairs of the trajectories it holds, so each document is read once per
epoch and spread over the chunk's pools, like repairs."""

from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np
import pyarrow.parquet as pq

from trainer import tokens
from trainer.contract import PROMPT, chat_spans
from trainer.documents import DocumentRows, ReadSettings, paired_file
from trainer.readers.consistency import kept_in_chunk
from trainer.readers.preferences import common_prefix
from trainer.readers.trajectories import mch_steps, trained_tokens
from trainer.shard_files import exists

SAFETY_SOURCE = "safety"


@lru_cache(maxsize=64)
def _chunk_ids(trajectory_file: str, kept_only: bool) -> tuple[str, ...]:
    """The chunk's trajectory ids a safety document can go with (sorted; cached per worker)."""
    ids = pq.read_table(trajectory_file, columns=["id"]).column("id").to_pylist()
    if kept_only:
        kept = kept_in_chunk(trajectory_file, ids)
        ids = [i for i in ids if i in kept]
    return tuple(sorted(ids))


def owner(prompt: str, chosen: str, chunk_ids: tuple[str, ...]) -> str:
    """The trajectory a (prompt, chosen) document is read with."""
    return chunk_ids[zlib.crc32((prompt + chosen).encode()) % len(chunk_ids)]


def distinct_safety_texts(preference_file: str) -> list[tuple[str, str]]:
    """(prompt_text, chosen_text) of the file's safety rows, each once, in pair-id order."""
    table = pq.read_table(preference_file, columns=["id", "prompt_text", "chosen_text"],
                          filters=[("source", "=", SAFETY_SOURCE)])
    seen: dict[tuple[str, str], None] = {}
    for row in sorted(table.to_pylist(), key=lambda r: r["id"]):
        seen.setdefault((row["prompt_text"], row["chosen_text"]), None)
    return list(seen)


def safety_documents(sources: dict[str, str], settings: ReadSettings, lm_weight: float,
                     kept_only: bool = False) -> DocumentRows:
    """The safety documents read with the given trajectories (id -> trajectory shard path)."""
    texts: list[tuple[str, str]] = []
    for path in sorted(set(sources.values())):
        paired = paired_file(path, "preferences")
        chunk = _chunk_ids(path, kept_only)
        if not chunk or not exists(paired):
            continue
        texts += [(prompt, chosen) for prompt, chosen in distinct_safety_texts(str(paired))
                  if sources.get(owner(prompt, chosen, chunk)) == path]
    return tokenise_safety(texts, settings, lm_weight)


def tokenise_safety(texts: list[tuple[str, str]], settings: ReadSettings, lm_weight: float,
                    ) -> DocumentRows:
    """Documents of (prompt_text, chosen_text): prompt tokens PROMPT, the chosen turn's
    tokens labelled by `chat_spans`; the chosen call (a benign case's) an MCH step labelled 1."""
    rows = DocumentRows()
    if not texts:
        return rows
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    call_id = tokens.special_ids(tokenizer)["tool_call_start"]
    full = [prompt + chosen for prompt, chosen in texts]
    ids, offsets = tokenizer.encode([p for p, _ in texts] + full)
    for i, text in enumerate(full):
        prompt_ids, row_ids = ids[i], np.asarray(ids[len(texts) + i], dtype=np.int32)
        if len(row_ids) > settings.max_seq_len:
            continue
        spans = tokens.label_tokens(offsets[len(texts) + i], chat_spans(text))
        start = common_prefix(prompt_ids, row_ids.tolist())
        spans[:start] = PROMPT
        if not trained_tokens(spans):
            continue
        positions, labels = mch_steps(row_ids, spans, call_id, True, settings.max_seq_len) \
            if settings.use_mch else ([], [])
        rows.add(input_ids=row_ids, span_ids=spans, mch_positions=positions, mch_labels=labels,
                 lm_weight=lm_weight, complexity=tokens.complexity(
                     len(positions), spans, 0.0, settings.complexity_weights),
                 teacher_topk_ids=[], teacher_topk_logprobs=[])
    return rows
