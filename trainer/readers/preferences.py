"""`preferences/` -> tokenised pairs (the DPO feed, a Ray Data stream) and MCH negatives
(the SAD feed), from the text the pipeline wrote: `prompt_text` (the conversation up to the
decision, ending with the assistant header), `chosen_text` and `rejected_text` (the two
competing turns), so `prompt_text + chosen_text` is exactly the trajectory's text up to that
turn. Nothing is re-rendered; span labels come from the contract's `chat_spans`.

Tokenising a pair follows TRL: the prompt alone and prompt + each completion are tokenised,
and the completion starts where their tokens diverge (the chat markers are special tokens,
so this is the prompt's end in practice). A pair longer than `max_seq_len` (prompt + either
completion) is dropped, not cut (a cut prompt loses the system turn and tools, a cut
completion its call), and counted; so is a pair with an empty completion. The DPO feed
shuffles each block's rows (seeded) before pooling them (`shuffled_pairs`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trainer.data_checks import check_not_null, check_shard_types
from trainer import pair_batches, pair_weights, tokens
from trainer.contract import PREFERENCE_COLUMNS, TOOL_CALL_OPEN, chat_spans
from trainer.documents import DocumentRows, ReadSettings, paired_rows
from trainer.pair_weights import KindWeights
from trainer.readers.compact_prompts import (COMPACT_MARKER, CONVERSATION_TABLES, is_compact,
                                             join_stage, with_prompt_text)
from trainer.readers.consistency import (ConsistencyMode, filter_counts, kept_only, kept_pairs,
                                         log_counts)
from trainer.shard_files import check_footers, exists, is_uri, join, part_files

NEGATIVE_SOURCE = "negative"
REFERENCE_COLUMNS = ("id", "ref_chosen", "ref_rejected")


@dataclass(frozen=True)
class PairSettings:
    """What the pair stream needs (built from the DPO recipe's config)."""

    shards: str                          # OUT root (holds preferences/)
    tokenizer: str
    max_seq_len: int = 2048
    sources: tuple[str, ...] = ("negative", "repair", "safety")
    pairs_per_batch: int = 4
    bucket_pool_batches: int = 8
    seed: int = 0
    kind_weights: KindWeights = ()       # pairs of a kind weighted 0 are left out of the feed
    reference_dir: str | None = None     # precomputed reference log-probs (part-K beside)
    consistency: ConsistencyMode = "auto"  # pairs of kept rollouts only (DataConfig.consistency)


# -- pairs (DPO) -----------------------------------------------------------------------------

def common_prefix(a: list[int], b: list[int]) -> int:
    size = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:size]) != np.asarray(b[:size]))
    return int(differ[0]) if len(differ) else size


@dataclass
class TokenisedPairs:
    table: pa.Table          # trainer.pair_batches.PAIR_SCHEMA (+ `path` when the input had it)
    too_long: int = 0
    empty: int = 0


PAIR_TEXTS = ("prompt_text", "chosen_text", "rejected_text")


def tokenize_pairs(table: pa.Table, tokenizer: tokens.TextTokenizer, max_seq_len: int,
                   ) -> TokenisedPairs:
    """Preference rows -> the pair table (module doc); reference log-probs left NaN. A pair
    whose text is longer than `tokens.text_bound` characters has more than `max_seq_len`
    tokens: counted too long without tokenising it (a 50 MB text aborts the tokenizer)."""
    check_not_null(table, PAIR_TEXTS)
    lengths = [pc.utf8_length(table.column(name)) for name in PAIR_TEXTS]
    chars = pc.add(lengths[0], pc.max_element_wise(lengths[1], lengths[2]))
    fits = pc.less_equal(chars, tokens.text_bound(tokenizer, max_seq_len))
    unread = table.num_rows - pc.sum(fits).as_py() if table.num_rows else 0
    table = table.filter(fits)
    prompts = table.column("prompt_text").to_pylist()
    chosen = table.column("chosen_text").to_pylist()
    rejected = table.column("rejected_text").to_pylist()
    texts = [text for p, c, r in zip(prompts, chosen, rejected) for text in (p, p + c, p + r)]
    ids, offsets = tokenizer.encode(texts)
    out: dict[str, list[Any]] = {name: [] for name in pair_batches.PAIR_SCHEMA.names}
    paths = table.column("path").to_pylist() if "path" in table.column_names else None
    kinds = (table.column("kind").to_pylist() if "kind" in table.column_names
             else [None] * table.num_rows)
    kept_paths, too_long, empty = [], unread, 0
    for i, (pair_id, source) in enumerate(zip(table.column("id").to_pylist(),
                                              table.column("source").to_pylist())):
        prompt, with_chosen, with_rejected = ids[3 * i], ids[3 * i + 1], ids[3 * i + 2]
        start = min(common_prefix(prompt, with_chosen), common_prefix(prompt, with_rejected))
        if start >= len(with_chosen) or start >= len(with_rejected):
            empty += 1
            continue
        if max(len(with_chosen), len(with_rejected)) > max_seq_len:
            too_long += 1
            continue
        chosen_spans = tokens.label_tokens(offsets[3 * i + 1], chat_spans(texts[3 * i + 1]))
        rejected_spans = tokens.label_tokens(offsets[3 * i + 2], chat_spans(texts[3 * i + 2]))
        out["id"].append(pair_id)
        out["source"].append(source)
        out["kind"].append(kinds[i] or "")
        out["prompt_ids"].append(with_chosen[:start])
        out["chosen_ids"].append(with_chosen[start:])
        out["rejected_ids"].append(with_rejected[start:])
        out["prompt_spans"].append(chosen_spans[:start])
        out["chosen_spans"].append(chosen_spans[start:])
        out["rejected_spans"].append(rejected_spans[start:])
        out["ref_chosen"].append(float("nan"))
        out["ref_rejected"].append(float("nan"))
        out["n_tokens"].append(max(len(with_chosen), len(with_rejected)))
        if paths is not None:
            kept_paths.append(paths[i])
    pairs = pa.Table.from_pydict(out, schema=pair_batches.PAIR_SCHEMA)
    if paths is not None:
        pairs = pairs.append_column("path", pa.array(kept_paths, pa.string()))
    return TokenisedPairs(pairs, too_long, empty)


def selected(table: pa.Table, sources: tuple[str, ...]) -> pa.Table:
    return table.filter(pc.is_in(table.column("source"), value_set=pa.array(list(sources))))


def weighted_in(table: pa.Table, kind_weights: KindWeights) -> pa.Table:
    """Leave out the pairs whose kind weighs 0 (`dpo.kind_weights`). The precompute pass
    does not (its log-probs then cover any kind filter a later run sets)."""
    if not kind_weights or not table.num_rows:
        return table
    drop = pair_weights.dropped(table.column("kind").to_pylist(), kind_weights)
    return table.filter(pa.array([not d for d in drop], pa.bool_()))


def attach_reference(pairs: pa.Table, reference_dir: str) -> pa.Table:
    """Fill ref_chosen / ref_rejected from the precomputed part-K files beside the pairs'
    shards (`path` column). A pair without one means the cache does not match the data."""
    values: dict[str, tuple[float, float]] = {}
    for path in sorted(set(pairs.column("path").to_pylist())):
        stored = join(reference_dir, path.rpartition("/")[2])  # a path or a URI
        if exists(stored):
            for row in pq.read_table(stored, columns=list(REFERENCE_COLUMNS)).to_pylist():
                values[row["id"]] = (row["ref_chosen"], row["ref_rejected"])
    ids = pairs.column("id").to_pylist()
    missing = [pair_id for pair_id in ids if pair_id not in values]
    if missing:
        raise ValueError(f"{len(missing)} pairs have no precomputed reference log-probs in "
                         f"{reference_dir} (e.g. {missing[0]}); delete that directory to "
                         f"recompute it")
    chosen = pa.array([values[pair_id][0] for pair_id in ids], pa.float64())
    rejected = pa.array([values[pair_id][1] for pair_id in ids], pa.float64())
    pairs = pairs.set_column(pairs.schema.get_field_index("ref_chosen"), "ref_chosen", chosen)
    return pairs.set_column(pairs.schema.get_field_index("ref_rejected"), "ref_rejected", rejected)


def pair_table(table: pa.Table, settings: PairSettings) -> pa.Table:
    """Ray Data stage of the precompute pass: preference rows -> pair table with `path`."""
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    return tokenize_pairs(selected(table, settings.sources), tokenizer, settings.max_seq_len).table


def shuffled_pairs(table: pa.Table, settings: PairSettings) -> pa.Table:
    """A block's rows of the trained sources, in a seeded random order (before pooling). A
    shard stores a trajectory's pairs together and the negatives stage's pairs before the
    critics stage's (repairs, safety: ~7% of the demo's pairs, in the shard's last rows), so
    pools cut from it in order held one trajectory's negatives, and a short run saw no
    repair or safety pair at all. The order depends on the seed and the block's first id,
    so a resumed run sees the same stream."""
    table = weighted_in(selected(table, settings.sources), settings.kind_weights)
    if table.num_rows < 2:
        return table
    key = zlib.crc32(f"{settings.seed}|{table.column('id')[0].as_py()}|{table.num_rows}".encode())
    order = np.random.default_rng(key).permutation(table.num_rows)
    return table.take(pa.array(order, pa.int64()))


def _kept_pairs(table: pa.Table, tokenizer: tokens.TextTokenizer, settings: PairSettings,
                ) -> TokenisedPairs:
    tokenised = tokenize_pairs(table, tokenizer, settings.max_seq_len)
    pairs = tokenised.table
    if settings.reference_dir is not None and pairs.num_rows:
        pairs = attach_reference(pairs, settings.reference_dir)
    if "path" in pairs.column_names:
        pairs = pairs.drop_columns(["path"])
    return TokenisedPairs(pairs, tokenised.too_long, tokenised.empty)


def training_pair_batches(table: pa.Table, settings: PairSettings) -> pa.Table:
    """Ray Data stage of the DPO feed: a block of preference rows -> its micro-batches.
    The block's rows are shuffled (`shuffled_pairs`) and tokenised; the pairs that fit are
    cut into pools of `pairs_per_batch * bucket_pool_batches` and each pool length-bucketed
    into micro-batches. Pools are cut after the drops (too long, empty), so only the block's
    last pool can hold a short batch (and `plan_pair_batches` puts it last); the block's
    drops are counted on its first batch (none carries them if no pair of the block fits)."""
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    kept = _kept_pairs(shuffled_pairs(table, settings), tokenizer, settings)
    size = settings.pairs_per_batch * settings.bucket_pool_batches
    batches = [pair_batches.compose_pairs(kept.table.slice(start, size),
                                          settings.pairs_per_batch, settings.seed,
                                          *((kept.too_long, kept.empty) if start == 0 else (0, 0)))
               for start in range(0, kept.table.num_rows, size)]
    return pa.concat_tables(batches) if batches else pair_batches.compose_pairs(
        pair_batches.PAIR_SCHEMA.empty_table(), settings.pairs_per_batch, settings.seed)


def preference_files(shards: str | Path) -> list[str]:
    """The preference shards, checked for the contract's columns and their types (every
    local shard's footer; trainer.data_checks.CONTRACTS) before any work; in the compact
    layout the conversations the pairs' prompts are cut from (trajectories/, repairs/) too."""
    root = str(shards).rstrip("/") if is_uri(shards) else Path(shards)
    files = part_files(root, "preferences")
    if not files:
        raise FileNotFoundError(f"no preference shards under {root}/preferences (generate "
                                f"with negatives.enabled or critics.enabled)")
    check_footers(files, root)
    check_shard_types(files, "preferences")
    if is_compact(files[0]):
        for table in CONVERSATION_TABLES:
            conversations = part_files(root, table)
            check_footers(conversations, root)
            check_shard_types(conversations, table)
    return files


def count_sources(files: list[str]) -> dict[str, int]:
    """Pairs per source over all shards (one column read)."""
    counts: dict[str, int] = {}
    for file in files:
        for value in pc.value_counts(pq.read_table(file, columns=["source"]).column("source")
                                     .combine_chunks()).to_pylist():
            counts[value["values"]] = counts.get(value["values"], 0) + value["counts"]
    return counts


def build_pair_dataset(settings: PairSettings) -> tuple[Any, dict[str, Any]]:
    """The DPO training stream (one row per micro-batch of pairs) and what it was built
    from: Ray Data, lazily executed."""
    import ray

    files = preference_files(settings.shards)
    filtered = pair_consistency_counts(settings)
    counts = count_sources(files) if filtered is None else {
        name.removesuffix("_read"): value for name, value in filtered.items()
        if name.endswith("_read")}
    chosen = {source: counts.get(source, 0) for source in settings.sources}
    if not any(chosen.values()):
        raise ValueError(f"{settings.shards}/preferences holds no pairs of sources "
                         f"{list(settings.sources)}" + (" of rollouts the consistency filter "
                         "kept" if filtered is not None else "") + f" (it has {counts})")
    compact = is_compact(files[0])  # prompts joined back from the chunk's conversations
    # `path`: the reference, filter and compact joins find files by it, a DataError names it
    dataset = ray.data.read_parquet(files, include_paths=True)
    dataset = dataset.select_columns(list(PREFERENCE_COLUMNS) + ["path"]
                                     + ([COMPACT_MARKER] if compact else []))
    dataset = dataset.randomize_block_order(seed=settings.seed)
    if filtered is not None:  # before the shuffle and the pools: they see kept pairs only
        dataset = dataset.map_batches(kept_pairs, fn_kwargs={"root": str(settings.shards)},
                                      batch_format="pyarrow", batch_size=None)
    if compact:
        dataset = join_stage(dataset, settings.shards)
    dataset = dataset.map_batches(training_pair_batches, fn_kwargs={"settings": settings},
                                  batch_format="pyarrow", batch_size=None)  # a whole block
    info = {"preference_shards": len(files), "pairs_per_source": chosen,
            "reference": "precomputed" if settings.reference_dir is not None else "model",
            "reference_dir": settings.reference_dir,
            "consistency": "all rows" if filtered is None else filtered}
    return dataset, info


def pair_consistency_counts(settings: PairSettings) -> dict[str, int] | None:
    """None when every pair is read; else the consistency filter's pairs read and dropped
    (per source too), logged."""
    if not kept_only(str(settings.shards), settings.consistency):
        return None
    counts = filter_counts(str(settings.shards), ("preferences",))
    log_counts(str(settings.shards), counts)
    return counts["preferences"]


# -- MCH negatives (SAD) -------------------------------------------------------------------

def negative_documents(table: pa.Table, settings: ReadSettings, wanted: int,
                       complexity: dict[str, float]) -> DocumentRows:
    """Up to `wanted` MCH negatives of the trajectories in `table` (which has `path`, and
    `text`, from which a compact OUT's prompts are cut): the `negative` pairs of preferences/
    of the same chunk, each `prompt_text + rejected_text` (the source trajectory cut after
    the wrong call), chosen by a fixed rank of the pair id
    (the same negatives every epoch and rerun). LM weight 0; the wrong call labelled 0 and
    the source's calls before it 1, so every negative holds both classes. Each carries its
    source trajectory's complexity, so the curriculum admits it together with its source."""
    if wanted <= 0:
        return DocumentRows()
    pool = table.select(["id", "success", "path"]).to_pylist()
    success = {row["id"]: bool(row["success"]) for row in pool}
    found = paired_rows({row["id"]: row["path"] for row in pool}, "preferences", "trajectory_id",
                        ["id", "trajectory_id", "prompt_text", "rejected_text", COMPACT_MARKER],
                        [("source", "=", NEGATIVE_SOURCE)])
    if found is None:
        return DocumentRows()
    if COMPACT_MARKER in found.column_names:  # preferences.layout: compact: each prompt is
        # the beginning of its trajectory's text, which this block already holds
        texts = dict(zip(table.column("id").to_pylist(), table.column("text").to_pylist()))
        found = with_prompt_text(found, texts, "this block of trajectories")
    check_not_null(found, ("prompt_text", "rejected_text"))
    candidates = sorted((pair for pair in found.to_pylist()
                         if TOOL_CALL_OPEN in pair["rejected_text"]),
                        key=lambda pair: zlib.crc32(pair["id"].encode()))
    rows = DocumentRows()
    # Candidates are tokenised in rounds: a wrong call beyond max_seq_len is no example.
    position = 0
    while len(rows) < wanted and position < len(candidates):
        batch = candidates[position:position + wanted - len(rows)]
        position += len(batch)
        texts = [pair["prompt_text"] + pair["rejected_text"] for pair in batch]
        owners = [(complexity.get(pair["trajectory_id"], 0.0), success[pair["trajectory_id"]])
                  for pair in batch]
        rows.extend(_tokenised_negatives(texts, owners, settings))
    return rows


def _tokenised_negatives(texts: list[str], owners: list[tuple[float, bool]],
                         settings: ReadSettings) -> DocumentRows:
    """Negative documents of texts ending with the wrong call; `owners`: the source's
    (complexity, success) per text."""
    rows = DocumentRows()
    if not texts:
        return rows
    tokenizer = tokens.load_tokenizer(settings.tokenizer)
    call_id = tokens.special_ids(tokenizer)["tool_call_start"]
    ids, labels = tokens.tokenize_with_spans(tokenizer, texts, [chat_spans(t) for t in texts])
    for row_ids, row_spans, (score, success) in zip(ids, labels, owners):
        ends = tokens.tool_call_step_ends(np.asarray(row_ids), row_spans, call_id)
        if ends and ends[-1] < settings.max_seq_len:  # else the wrong call would be cut off
            rows.add(input_ids=np.asarray(row_ids, dtype=np.int32), span_ids=row_spans,
                     mch_positions=ends, mch_labels=[1 if success else -1] * (len(ends) - 1) + [0],
                     lm_weight=0.0, complexity=score)
    return rows
