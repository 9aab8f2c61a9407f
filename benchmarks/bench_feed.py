"""The training data feed on real shards (a script, not a test; prints a table):
composed micro-batches (trainer.data.training_batches, run in-process without Ray) ->
padded or packed tensors -> one SAD training step of the tiny model each, per variant:

    padded + landmark   the shipped tiny recipe's layout (one padded row per document)
    padded              landmark attention off
    packed              data.packing (landmark off): documents share rows of max_seq_len

Every variant trains a fresh model (same seed) on the same batches. Reported: padding
(share of tensor slots that are padding), real tokens per CPU-second and per wall-second of
the training step (this process; robust to other jobs only in the CPU column), steps.

    python benchmarks/bench_feed.py --shards /tmp/t1-out --tokenizer /tmp/t1-tok --steps 20
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402

from trainer.collate import Collate  # noqa: E402
from trainer.config import load_config  # noqa: E402
from trainer.data import DataSettings, training_batches  # noqa: E402
from trainer.contract import TRAJECTORY_COLUMNS  # noqa: E402
from trainer.recipes.sad import data_settings, forward_backward  # noqa: E402
from trainer.student import build_student, round_up  # noqa: E402
from trainer.tokens import load_tokenizer, special_ids  # noqa: E402

VARIANTS = {"padded + landmark": ["model.use_landmark=true"],
            "padded": ["model.use_landmark=false"],
            "packed": ["model.use_landmark=false", "data.packing=true"]}


class LocalEngine:
    """What trainer.engines.DDPEngine does on one worker, without Ray Train."""

    def __init__(self, model: torch.nn.Module, lr: float) -> None:
        self.unwrapped = self.module = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def no_sync(self):
        import contextlib
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def composed_rows(settings: DataSettings, limit: int) -> list[dict]:
    """The first `limit` micro-batches of the stream, as the training loop receives them."""
    rows: list[dict] = []
    pool = settings.batch_size * settings.bucket_pool_batches
    for path in sorted(glob.glob(f"{settings.shards}/trajectories/part-*.parquet")):
        table = pq.read_table(path, columns=list(TRAJECTORY_COLUMNS))
        table = table.append_column("path", pa.array([path] * table.num_rows))
        for start in range(0, table.num_rows, pool):
            batches = training_batches(table.slice(start, pool), settings)
            for batch in batches.to_pylist():
                rows.append({name: [value] for name, value in batch.items()})
                if len(rows) >= limit:
                    return rows
    return rows


def run_variant(name: str, overrides: list[str], args: argparse.Namespace, rows: list[dict],
                ) -> dict[str, float]:
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml",
                      [f"run_dir={args.shards}/_bench", f"shards={args.shards}",
                       f"tokenizer={args.tokenizer}", *args.set, *overrides])
    tokenizer = load_tokenizer(cfg.tokenizer)
    special = special_ids(tokenizer)
    torch.manual_seed(0)
    model = build_student(cfg, special, round_up(len(tokenizer)), None, None)
    engine = LocalEngine(model, cfg.optim.lr)
    collate = Collate(special["pad"], pack_to=cfg.data.max_seq_len if cfg.data.packing else None)
    tokens = slots = model_rows = 0
    cpu, wall, losses = [], [], []
    for row in rows:
        batch = collate.tensors(collate.documents(row))
        started, started_cpu = time.perf_counter(), time.process_time()
        metrics, _ = forward_backward(cfg, engine, batch, None)
        engine.step()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        tokens += int((batch["span_ids"] >= 0).sum())
        slots += batch["span_ids"].numel()
        model_rows += batch["span_ids"].shape[0]
        losses.append(metrics["lm_loss"])
    return {"padding": 1 - tokens / slots, "tokens_per_cpu_s": tokens / sum(cpu),
            "tokens_per_wall_s": tokens / sum(wall), "rows_per_step": model_rows / len(rows),
            "cpu_s_per_step": statistics.median(cpu), "last_loss": statistics.fmean(losses[-5:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="OUT root of a datagen run")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--set", nargs="*", default=[], help="config overrides, key=value")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml",
                      ["run_dir=r", f"shards={args.shards}", f"tokenizer={args.tokenizer}",
                       *args.set])
    started = time.perf_counter()
    rows = composed_rows(data_settings(cfg), args.steps)
    print(f"{len(rows)} composed micro-batches ({cfg.data.batch_size} LM documents + "
          f"{cfg.data.mch_rows} MCH negatives, max_seq_len {cfg.data.max_seq_len}) in "
          f"{time.perf_counter() - started:.1f}s; {torch.get_num_threads()} thread(s)")
    print(f"{'variant':<20}{'padding':>9}{'rows/step':>10}{'CPU s/step':>11}"
          f"{'tokens/CPU-s':>14}{'tokens/wall-s':>15}{'LM loss (last 5)':>18}")
    for name in args.only:
        result = run_variant(name, VARIANTS[name], args, rows)
        print(f"{name:<20}{result['padding']:>9.1%}{result['rows_per_step']:>10.2f}"
              f"{result['cpu_s_per_step']:>11.3f}{result['tokens_per_cpu_s']:>14.0f}"
              f"{result['tokens_per_wall_s']:>15.0f}{result['last_loss']:>18.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
