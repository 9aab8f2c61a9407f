"""The DPO reference: a frozen copy of the starting weights, or its log-probabilities
precomputed once and stored beside the data.

- `dpo.reference: model`: every worker holds a frozen copy (built like the student from
  `dpo.reference_model` or `model.init_from`, or the same seeded random weights) and runs
  it forward on each batch. Costs a forward per step and a second model in memory.
- `dpo.reference: precomputed`: before training, one Ray Data pass tokenises the pairs as
  the training stream does, runs the reference in `dpo.reference_workers` actors
  (`dpo.reference_gpus` GPUs each) and writes `part-K.parquet` (id, ref_chosen,
  ref_rejected) for every preferences/part-K.parquet into a directory keyed by what the
  values depend on (reference weights, tokenizer, max_seq_len, sources, modifications,
  shards); the training stream reads them beside the pairs. A 32B job then holds one model.
  A complete directory (its `_COMPLETE` marker written last) is reused by later runs.

Where the directory lives: beside the data, `OUT/reference_logps/<key digest>/`, also when
OUT is an object store (`s3://...`), unless `dpo.reference_dir` names another place. Not a
local cache on the driver: the training stream attaches the values in Ray Data tasks on any
node, and the one place every node reaches (with the credentials it already needs for the
shards) is the store the shards are in. Its files are written whole (trainer.shard_files:
a rename locally, a single PUT on a store) and `_COMPLETE` last, so a pass killed part way is
never taken for a complete one; the key holds the preference shards' names, sizes and times,
so regenerated data gets a new directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import torch

from trainer.config import TrainConfig
from trainer.contract import CONSISTENCY_TABLE
from trainer.model import AgentQwen2ForCausalLM
from trainer.pair_batches import Pairs
from trainer.readers.consistency import kept_only, kept_pairs
from trainer.readers.preferences import PairSettings
from trainer.preference_loss import PreferenceSettings, sequence_logps_fn
from trainer.shard_files import (exists, join, part_files, read_bytes, stamps, write_bytes,
                                 write_parquet)

log = logging.getLogger(__name__)
COMPLETE = "_COMPLETE"
MANIFEST = "manifest.json"


def reference_source(cfg: TrainConfig) -> str | None:
    return cfg.dpo.reference_model or cfg.model.init_from


def build_reference(cfg: TrainConfig, special: dict[str, int], vocab_size: int,
                    device: torch.device) -> AgentQwen2ForCausalLM:
    """The frozen reference: the student's starting point, built the same way."""
    from trainer.student import build_student, freeze

    start = cfg.model_copy(update={"model": cfg.model.model_copy(
        update={"init_from": reference_source(cfg)})})
    return freeze(build_student(start, special, vocab_size, None, None), device)


def preference_settings(cfg: TrainConfig) -> PreferenceSettings:
    d = cfg.dpo
    return PreferenceSettings(d.loss_type, d.beta, d.label_smoothing, d.rpo_alpha,
                              d.chunk_size, d.recompute_chunks)


@torch.no_grad()
def reference_logps(model: AgentQwen2ForCausalLM, batch: dict[str, torch.Tensor],
                    settings: PreferenceSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Completion log-probabilities of the chosen [P] and rejected [P] rows, through the
    model's own forward (its split embeddings and landmark attention included)."""
    out = model(input_ids=batch["input_ids"], span_ids=batch["span_ids"], use_cache=False,
                loss_fn=sequence_logps_fn(batch["input_ids"], batch["completion_mask"], settings))
    pairs = out.loss.shape[0] // 2
    return out.loss[:pairs], out.loss[pairs:]


# -- the precompute pass ---------------------------------------------------------------------

def _files_key(directory: Path, patterns: tuple[str, ...]) -> list[list[Any]]:
    """Name, size and modification time of the files (cheap; a 32B checkpoint is not hashed)."""
    found = sorted({p for pattern in patterns for p in directory.glob(pattern) if p.is_file()})
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in found]


def reference_key(cfg: TrainConfig) -> dict[str, Any]:
    """Everything the stored log-probabilities depend on."""
    source = reference_source(cfg)
    tokenizer = Path(cfg.tokenizer) / "tokenizer.json"
    return {"reference": source,
            "reference_files": _files_key(Path(source), ("*.safetensors", "*.json")),
            "tokenizer_sha256": hashlib.sha256(tokenizer.read_bytes()).hexdigest(),
            "max_seq_len": cfg.data.max_seq_len, "sources": list(cfg.dpo.sources),
            "dtype": cfg.model.dtype, "chunk": cfg.dpo.chunk_size,
            "modifications": cfg.model.model_dump(mode="json", exclude={"init_from", "builder",
                                                                        "gradient_checkpointing"}),
            "shards": stamps(part_files(cfg.shards, "preferences")),
            # only when filtering, so the keys (and caches) of runs without it are unchanged
            **({"consistency": stamps(part_files(cfg.shards, CONSISTENCY_TABLE))}
               if kept_only(cfg.shards, cfg.data.consistency) else {})}


def reference_dir(cfg: TrainConfig, key: dict[str, Any]) -> str:
    """`dpo.reference_dir`, else OUT/reference_logps/<digest of the key> (a path or URI)."""
    if cfg.dpo.reference_dir:
        return cfg.dpo.reference_dir
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return join(cfg.shards, f"reference_logps/{digest}")


class ReferenceScorer:
    """Ray Data actor: holds the reference model; a batch of tokenised pairs (with `path`)
    -> (id, path, ref_chosen, ref_rejected)."""

    def __init__(self, train: dict[str, Any]) -> None:
        from trainer.student import round_up
        from trainer.tokens import load_tokenizer, special_ids

        self.cfg = TrainConfig.model_validate(train)
        tokenizer = load_tokenizer(self.cfg.tokenizer)
        self.special = special_ids(tokenizer)
        gpu = self.cfg.dpo.reference_gpus > 0 and torch.cuda.is_available()
        self.device = torch.device("cuda" if gpu else "cpu")
        self.model = build_reference(self.cfg, self.special, round_up(len(tokenizer)), self.device)
        self.settings = preference_settings(self.cfg)

    def __call__(self, table: pa.Table) -> pa.Table:
        from trainer.pair_collate import pair_tensors

        pairs = Pairs.from_table(table)
        batch = pair_tensors(pairs, self.special["pad"], self.special["tool_call_start"],
                             tuple(self.cfg.dpo.sources), {})
        batch = {name: value.to(self.device) for name, value in batch.items()}
        chosen, rejected = reference_logps(self.model, batch, self.settings)
        return pa.table({"id": table.column("id"), "path": table.column("path"),
                         "ref_chosen": pa.array(chosen.double().cpu().numpy()),
                         "ref_rejected": pa.array(rejected.double().cpu().numpy())})


def precompute_reference(cfg: TrainConfig, settings: PairSettings) -> str:
    """The directory of the reference log-probabilities of every pair the run trains on
    (`settings`: the training stream's, which tokenises the pairs the same way), computed
    now unless a complete one for the same key exists."""
    import ray

    from trainer.readers.compact_prompts import is_compact, join_stage
    from trainer.readers.preferences import pair_table, preference_files

    key = reference_key(cfg)
    directory = reference_dir(cfg, key)
    manifest = join(directory, MANIFEST)
    if exists(join(directory, COMPLETE)):
        if json.loads(read_bytes(manifest)) != key:
            raise ValueError(f"{directory} holds reference log-probs of another reference, "
                             f"tokenizer or data (its {MANIFEST} differs); choose another "
                             f"dpo.reference_dir or delete it")
        log.info("reference log-probs: reusing %s", directory)
        return directory
    files = preference_files(cfg.shards)
    dataset = ray.data.read_parquet(files, include_paths=True)
    if kept_only(cfg.shards, settings.consistency):  # only the pairs the run trains on
        dataset = dataset.map_batches(kept_pairs, fn_kwargs={"root": str(cfg.shards)},
                                      batch_format="pyarrow", batch_size=None)
    if is_compact(files[0]):  # preferences.layout: compact
        dataset = join_stage(dataset, cfg.shards)
    dataset = dataset.map_batches(pair_table, fn_kwargs={"settings": settings},
                                  batch_format="pyarrow", batch_size=256)
    dataset = dataset.map_batches(
        ReferenceScorer, fn_constructor_kwargs={"train": cfg.model_dump(mode="json")},
        concurrency=cfg.dpo.reference_workers, batch_size=cfg.dpo.reference_batch_size,
        batch_format="pyarrow",
        **({"num_gpus": cfg.dpo.reference_gpus} if cfg.dpo.reference_gpus else {}))
    parts: dict[str, list[pa.Table]] = {}
    for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
        for path in set(batch.column("path").to_pylist()):
            rows = batch.filter(pc.equal(batch.column("path"), path))
            parts.setdefault(Path(path).name, []).append(rows.drop_columns(["path"]))
    for name, tables in parts.items():
        write_parquet(pa.concat_tables(tables), join(directory, name))
    write_bytes(manifest, json.dumps(key, indent=1, sort_keys=True).encode())
    rows = sum(t.num_rows for ts in parts.values() for t in ts)
    write_bytes(join(directory, COMPLETE), f"{rows}\n".encode())  # last: the pass is complete
    log.info("reference log-probs: %d shards -> %s", len(parts), directory)
    return directory
