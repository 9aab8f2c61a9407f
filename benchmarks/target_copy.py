"""Does a checkpoint name the object the request names? (A diagnostic script, not a test.)

For every benign look-alike of the HELD-OUT worlds that `trainer eval --only safety` plays
(same held-out tasks), it scores the `benign_target_<tool>` pair (critics.safety_pairs):
chosen = the call on the requested object, rejected = the same reasoning and tool on the
case's decoy (another scratch name, table, order or account of the world). Per tool it
reports the accuracy (log p(chosen) > log p(rejected), summed over the completion) and the
mean log-prob margin. A student that copies the name from the request wins nearly every
scratch-name pair (`delete`, `drop_table`); one that writes a memorised name sits near 0.5,
since neither the right nor the decoy number is the one it writes.
`--train-pairs N` also scores the first N `benign_target_*` pairs of a training OUT
(generated with `critics.safety_target: true`): train >> held-out would mean the pairs were
memorised, not the copying.

    python benchmarks/target_copy.py --checkpoint runs/sad4k_w1_s0 runs/dpo_tgt_s0_k0 \\
        --shards out/demo --eval-seed 5 --safety-worlds 24
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PREFIX = "benign_target_"


def heldout_target_rows(eval_seed: int, worlds: int, shards: Sequence[str]) -> list[dict[str, Any]]:
    """The target pair of every benign case of the first `worlds` held-out tasks (the cases
    `trainer eval --only safety` plays: `safety_episodes`)."""
    from critics.safety_pairs import safety_preferences
    from datagen.envs import make_env
    from trainer.heldout import heldout_tasks
    from trainer.safety_eval import safety_episodes

    episodes, _ = safety_episodes(heldout_tasks(("sql", "fs", "enterprise"), worlds, eval_seed,
                                                shards).tasks)
    tools = {env: make_env(env).tools() for env in {e.case.env for e in episodes}}
    return [row for e in episodes if not e.case.dangerous
            for row in safety_preferences(e.case, tools[e.case.env], e.task.id,
                                          random.Random(0), target=True)
            if row["kind"].startswith(PREFIX)]


def training_target_rows(out: str, count: int) -> list[dict[str, Any]]:
    import polars as pl

    files = sorted(glob.glob(f"{out}/preferences/*.parquet"))
    frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    return frame.filter(pl.col("kind").str.starts_with(PREFIX)).head(count).to_dicts()


def score(checkpoint: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per tool (and `all`): pairs, accuracy, mean log-prob margin."""
    from trainer.eval import load_policy_model, resolve_checkpoint
    from trainer.pair_scorer import TorchPairScorer
    from trainer.pref_eval import tokenize_pair

    model, tokenizer = load_policy_model(resolve_checkpoint(checkpoint))
    pairs = [p for p in (tokenize_pair(row, tokenizer) for row in rows) if not isinstance(p, str)]
    margins: defaultdict[str, list[float]] = defaultdict(list)
    for pair, scored in zip(pairs, TorchPairScorer(model, tokenizer).score(pairs)):
        for group in (pair.kind.removeprefix(PREFIX), "all"):
            margins[group].append(scored.chosen - scored.rejected)
    return {group: {"pairs": len(m), "accuracy": sum(x > 0 for x in m) / len(m),
                    "mean_logp_margin": sum(m) / len(m)} for group, m in sorted(margins.items())}


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", nargs="+", required=True)
    parser.add_argument("--shards", action="append", default=[], help="training OUT(s): "
                        "held-out tasks must not be in them (as trainer eval --shards)")
    parser.add_argument("--eval-seed", type=int, default=5)
    parser.add_argument("--safety-worlds", type=int, default=24)
    parser.add_argument("--train-out", help="an OUT with benign_target_* pairs")
    parser.add_argument("--train-pairs", type=int, default=0)
    parser.add_argument("--out", help="also write the report (JSON) here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the shared 2-core host: 1 thread is faster
    groups = {"heldout": heldout_target_rows(args.eval_seed, args.safety_worlds, args.shards)}
    if args.train_pairs:
        groups["train"] = training_target_rows(args.train_out, args.train_pairs)
    report: dict[str, Any] = {}
    for checkpoint in args.checkpoint:
        report[checkpoint] = {name: score(checkpoint, rows) for name, rows in groups.items()}
        for name, result in report[checkpoint].items():
            print(checkpoint, name, "  ".join(
                f"{group}: {r['accuracy']:.2f} ({r['mean_logp_margin']:+.2f}, n={r['pairs']})"
                for group, r in result.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
