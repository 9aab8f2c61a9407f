"""The DPO pair stream over both preference layouts: what reading `preferences.layout: compact`
costs the trainer (its prompts are joined back from the chunk's conversations).

    .venv/bin/datagen generate --config configs/demo.yaml --out /tmp/full
    .venv/bin/datagen generate --config configs/demo.yaml --out /tmp/compact \\
        --set preferences.layout=compact
    .venv/bin/python benchmarks/bench_pair_layouts.py --full /tmp/full --compact /tmp/compact \\
        --tokenizer runs/tokenizer --rounds 3

Each round builds the whole stream (`trainer.readers.preferences.build_pair_dataset`: read,
join for compact, shuffle, tokenise, pool, bucket) of each OUT, alternately, on one local Ray,
and drains it; printed per layout: pairs trained + dropped per wall second and the pairs'
digest (token ids of every pair in id order), which must be the same for both layouts.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from trainer.pair_batches import Pairs  # noqa: E402
from trainer.readers.preferences import PairSettings, build_pair_dataset  # noqa: E402


def drain(out: str, tokenizer: str, max_seq_len: int) -> tuple[float, int, str]:
    """Wall seconds, pairs seen (trained + dropped) and a digest of the trained pairs."""
    started = time.perf_counter()
    dataset, _ = build_pair_dataset(PairSettings(shards=out, tokenizer=tokenizer,
                                                 max_seq_len=max_seq_len))
    pairs, seen = {}, 0
    for row in dataset.iter_batches(batch_size=1, batch_format="numpy"):
        batch = Pairs.from_batch_row(row)
        seen += len(batch) + batch.too_long + batch.empty
        for i, pair_id in enumerate(batch.ids):
            pairs[pair_id] = b"|".join(getattr(batch, part)[i].tobytes() for part in (
                "prompt_ids", "chosen_ids", "rejected_ids"))
    digest = hashlib.sha256(b"".join(pairs[key] for key in sorted(pairs))).hexdigest()[:16]
    return time.perf_counter() - started, seen, digest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", required=True, help="OUT written with the full layout")
    parser.add_argument("--compact", required=True, help="the same run, compact layout")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max-seq-len", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import ray

    ray.init(logging_level="ERROR")
    outs = {"full": args.full, "compact": args.compact}
    drain(args.full, args.tokenizer, args.max_seq_len)  # warm-up: Ray Data's workers start
    for round_ in range(1, args.rounds + 1):
        order = list(outs) if round_ % 2 else list(outs)[::-1]
        for layout in order:
            load = os.getloadavg()[0]
            seconds, seen, digest = drain(outs[layout], args.tokenizer, args.max_seq_len)
            print(f"round {round_} {layout:<8} {seen:,} pairs in {seconds:.2f} s = "
                  f"{seen / seconds:,.0f} pairs/s (load {load:.1f}) digest {digest}", flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
