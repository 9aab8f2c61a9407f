"""What the trainer's consistency filter (`data.consistency`) costs and drops, on a pipeline OUT
written with the filter on (a script, not a test; prints a table).

Generates (or reuses) an OUT with `consistency.enabled`, k rollouts per task, negatives,
critics and safety pairs on, the teacher the FAKE `wrong_sample_fake` of the tests (the
oracle, except sample 1 answers a made-up figure and sample 2 of even-seeded tasks ends
without an answer: a fixed disagreement pattern, not a model). Then, in this process and
without Ray, per shard: the filter stages (`kept_trajectories`, `kept_pairs`) against the
stage they run before (`training_batches`: tokenising and composing the pool; the DPO feed's
`training_pair_batches`), and the driver's one pass that counts rows read and dropped
(`filter_counts`). CPU seconds of this process (`time.process_time`), so other jobs on the
host do not count.

    python benchmarks/consistency_feed.py --out /tmp/cons-out --tasks 400 --k 3 \
        --tokenizer DIR
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from trainer.contract import PREFERENCE_COLUMNS, TRAJECTORY_COLUMNS  # noqa: E402
from trainer.data import DataSettings, training_batches  # noqa: E402
from trainer.readers.consistency import filter_counts, kept_pairs, kept_trajectories  # noqa: E402
from trainer.readers.preferences import PairSettings, training_pair_batches  # noqa: E402


def generate(out: Path, tasks: int, k: int, chunk: int, seed: int) -> None:
    import ray

    from datagen.config import GenerateConfig
    from datagen.pipeline import run_generation

    ray.init(address="local", num_cpus=2, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        summary = run_generation(GenerateConfig(
            out=str(out), num_trajectories=tasks, chunk_size=chunk, progress=False,
            num_workers=1, seed=seed, envs=[{"name": "sql"}],
            env_modules=["tests.datagen.consistency_fakes"],
            teacher={"backend": "wrong_sample_fake"}, consistency={"enabled": True, "k": k}))
        assert summary.complete, summary
    finally:
        ray.shutdown()


def _with_path(shard: Path, columns: list[str]) -> pa.Table:
    table = pq.read_table(shard, columns=columns)
    return table.append_column("path", pa.array([str(shard)] * table.num_rows, pa.string()))


def _cpu(work) -> tuple[float, object]:
    started = time.process_time()
    result = work()
    return time.process_time() - started, result


def measure(out: Path, tokenizer: str) -> dict[str, float]:
    root = str(out)
    settings = DataSettings(shards=root, tokenizer=tokenizer, max_seq_len=4096, batch_size=4,
                            use_mch=False, tables=("trajectories", "repairs"))
    pairs = PairSettings(shards=root, tokenizer=tokenizer, max_seq_len=4096)
    figures = dict.fromkeys(("rows", "kept", "filter_s", "feed_s", "feed_all_s", "pairs",
                             "pairs_kept", "pair_filter_s", "pair_feed_s"), 0.0)
    for shard in sorted((out / "trajectories").glob("part-*.parquet")):
        rows = _with_path(shard, list(TRAJECTORY_COLUMNS))
        seconds, kept = _cpu(lambda: kept_trajectories(rows, root))
        figures["rows"] += rows.num_rows
        figures["kept"] += kept.num_rows
        figures["filter_s"] += seconds
        figures["feed_s"] += _cpu(lambda: training_batches(kept, settings))[0]
        figures["feed_all_s"] += _cpu(lambda: training_batches(rows, settings))[0]
        pair_rows = _with_path(out / "preferences" / shard.name, list(PREFERENCE_COLUMNS))
        seconds, kept = _cpu(lambda: kept_pairs(pair_rows, root))
        figures["pairs"] += pair_rows.num_rows
        figures["pairs_kept"] += kept.num_rows
        figures["pair_filter_s"] += seconds
        figures["pair_feed_s"] += _cpu(lambda: training_pair_batches(kept, pairs))[0]
    figures["counts_s"], counts = _cpu(
        lambda: filter_counts(root, ("trajectories", "repairs", "preferences")))
    figures["counts"] = counts
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the OUT (generated when missing)")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=100, help="tasks per chunk")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    if not (out / "manifest.json").exists():
        started = time.perf_counter()
        generate(out, args.tasks, args.k, args.chunk, args.seed)
        print(f"generated {out} in {time.perf_counter() - started:.0f} s")
    f = measure(out, args.tokenizer)
    us = 1e6
    print(f"| rows | kept | filter us/row | feed us/kept row | filter / feed | pairs | kept "
          f"| pair filter us/pair | pair feed us/kept pair | driver counts s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {f['rows']:.0f} | {f['kept']:.0f} | {f['filter_s'] / f['rows'] * us:.1f} "
          f"| {f['feed_s'] / f['kept'] * us:.0f} | {f['filter_s'] / f['feed_s']:.1%} "
          f"| {f['pairs']:.0f} | {f['pairs_kept']:.0f} | {f['pair_filter_s'] / f['pairs'] * us:.1f} "
          f"| {f['pair_feed_s'] / f['pairs_kept'] * us:.0f} | {f['counts_s']:.2f} |")
    print(f"feed CPU over every row (data.consistency: all): {f['feed_all_s']:.2f} s; "
          f"over kept rows: {f['feed_s']:.2f} s")
    print(f"counts: {f['counts']}")


if __name__ == "__main__":
    main()
