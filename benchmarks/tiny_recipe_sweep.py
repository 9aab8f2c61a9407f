"""Which tiny-recipe settings learn fastest per CPU-minute (a script, not a test).

Every variant trains a fresh student for the same CPU budget (its step count is the budget
divided by its own measured CPU seconds per step) with the library's training step in this
process (benchmarks/local_training.py: what `trainer fit` computes, without Ray around it),
then `trainer eval --only steps` scores it on the same held-out tasks. Variants are the
recipe before this sweep (`before`) with one or more settings changed; tokenizers are built
from the shards' text by scripts/build_tokenizer.py (`words` or `lines` pre-tokenizer).

    python benchmarks/tiny_recipe_sweep.py --shards out/demo --out runs/sweep --cpu-budget 180
    python benchmarks/tiny_recipe_sweep.py ... --only before lines8k lines8k_batch8

Results: one JSON line per variant in OUT/results.jsonl (a rerun skips variants already
there: resumable) and a Markdown table in OUT/results.md. One torch thread (a Ray Train
worker with one CPU runs one).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from heldout_scores import score_checkpoint  # noqa: E402
from local_training import composed_rows, steps_for_budget, train_locally  # noqa: E402
from trainer.config import load_config  # noqa: E402
from trainer.recipes.sad import data_settings  # noqa: E402

# The shipped tiny recipe before the sweep (configs/train_tiny.yaml at adb7a6a), spelled out
# so that it stays reproducible when the file changes.
BEFORE = ["model.builder=tiny", "model.split_embeddings=true", "model.use_landmark=true",
          "model.landmark_block_size=64", "model.use_mch=true", "data.max_seq_len=4096",
          "data.batch_size=2", "data.mch_rows=1", "data.bucket_pool_batches=8",
          "data.packing=false", "loss.objective=sad", "loss.teacher=onehot", "optim.lr=3.0e-3",
          "optim.warmup_steps=5", "optim.min_lr_ratio=0.1"]
NO_LANDMARK = ["model.use_landmark=false"]
SHORT = ["data.max_seq_len=1024"]  # the longest `lines` trajectory: 943 tokens at 4k
PRETRAINED = ["model.builder=null", "model.init_from={pretrained}", "model.use_landmark=false",
              "model.split_embeddings=false", "model.use_mch=false", "data.batch_size=1",
              "data.mch_rows=0", "data.max_seq_len=4096", "optim.lr=3.0e-4",
              "optim.warmup_steps=2"]
TOKENIZERS = {"words4000": ("words", 4000), "lines4000": ("lines", 4000),
              "lines8000": ("lines", 8000), "lines16000": ("lines", 16000)}
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "before": ("words4000", []),
    "no_landmark": ("words4000", NO_LANDMARK),
    "lines4k": ("lines4000", NO_LANDMARK + SHORT),
    "lines8k": ("lines8000", NO_LANDMARK + SHORT),
    "lines16k": ("lines16000", NO_LANDMARK + SHORT),
    "lines8k_no_mch": ("lines8000", NO_LANDMARK + SHORT + ["model.use_mch=false"]),
    "lines8k_batch8": ("lines8000", NO_LANDMARK + SHORT + ["data.batch_size=8", "data.mch_rows=2"]),
    "lines8k_packed": ("lines8000", NO_LANDMARK + SHORT + ["data.batch_size=8", "data.mch_rows=2",
                                                           "data.packing=true"]),
    "lines8k_small": ("lines8000", NO_LANDMARK + SHORT + ["model.builder=small"]),
    "lines8k_lr1e-2": ("lines8000", NO_LANDMARK + SHORT + ["optim.lr=1.0e-2"]),
    "lines8k_lr1e-3": ("lines8000", NO_LANDMARK + SHORT + ["optim.lr=1.0e-3"]),
    # SmolLM2-135M-Instruct (scripts/convert_smollm2.py; --pretrained DIR): as converted,
    # and with its top 4 of 30 layers fine-tuned (modifications off, one document a step)
    "smollm2_zero_shot": ("pretrained", []),
    "smollm2_top4": ("pretrained", PRETRAINED + ["model.train_layers=4"]),
}
ZERO_SHOT = {"smollm2_zero_shot"}  # scored as they are, no training


def build_tokenizer(shards: str, name: str, out: Path) -> str:
    directory = out / "tokenizers" / name
    if not (directory / "tokenizer.json").exists():
        pretokenizer, vocab = TOKENIZERS[name]
        spec = importlib.util.spec_from_file_location("build_tokenizer",
                                                      ROOT / "scripts" / "build_tokenizer.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(["--shards", shards, "--out", str(directory), "--vocab-size", str(vocab),
                     "--pretokenizer", pretokenizer])
    return str(directory)


def timed_scores(checkpoint: str, args: argparse.Namespace) -> dict:
    """Held-out scores plus the evaluation's own CPU and wall seconds: for a 135M model the
    evaluation, not the training, is most of a variant's cost on this machine."""
    cpu, wall = time.process_time(), time.perf_counter()
    scores, report = score_checkpoint(checkpoint, args.num_tasks, shards=[args.shards])
    return {**scores, "eval_cpu_s": round(time.process_time() - cpu, 1),
            "eval_wall_s": round(time.perf_counter() - wall, 1),
            "eval_seconds_by_part": (report.get("step_level") or {}).get("seconds_by_part")}


def run_variant(name: str, args: argparse.Namespace, out: Path) -> dict:
    tokenizer_name, overrides = VARIANTS[name]
    if tokenizer_name == "pretrained":
        if not args.pretrained:
            raise SystemExit(f"variant {name} needs --pretrained DIR (scripts/convert_smollm2.py)")
        tokenizer = args.pretrained
        if name in ZERO_SHOT:
            scores = timed_scores(args.pretrained, args)
            return {"variant": name, "tokenizer": tokenizer_name, "overrides": [], "steps": 0,
                    "cpu_s": 0.0, **scores, "load": os.getloadavg()}
        overrides = [o.format(pretrained=args.pretrained) for o in overrides]
    else:
        tokenizer = build_tokenizer(args.shards, tokenizer_name, out)
    cfg = load_config(ROOT / "configs" / "train_tiny.yaml",
                      [f"run_dir={out / name}", f"shards={args.shards}", f"tokenizer={tokenizer}",
                       f"run.seed={args.seed}", *BEFORE, *overrides, *args.set])
    rows = composed_rows(data_settings(cfg))
    # a 135M step costs ~100x a tiny one: two probe steps there
    steps = steps_for_budget(cfg, rows.spread(2 if tokenizer_name == "pretrained" else 8),
                             args.cpu_budget)
    cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"max_steps": steps})})
    run = train_locally(cfg, rows.take(steps), out / name / "checkpoint",
                        max_cpu_s=1.5 * args.cpu_budget, deadline=args.deadline)
    scores = timed_scores(str(out / name / "checkpoint"), args)
    return {"variant": name, "tokenizer": tokenizer_name, "overrides": overrides,
            **run.summary(), "planned_steps": steps, "epochs": round(rows.epochs(steps), 2),
            "compose_cpu_s": round(rows.cpu_seconds, 1), **scores, "load": os.getloadavg()}


COLUMNS = (("variant", "{}"), ("steps", "{}"), ("cpu_s", "{:.0f}"), ("tokens_per_cpu_s", "{:.0f}"),
           ("epochs", "{:.2f}"), ("final_lm_loss", "{:.3f}"), ("nats_per_char", "{:.3f}"),
           ("act_ce", "{:.3f}"), ("next_call_exact_match", "{:.3f}"), ("right_tool_rate", "{:.3f}"),
           ("schema_valid_rate", "{:.3f}"), ("closed_turn_rate", "{:.3f}"),
           ("mch_auroc", "{:.3f}"))


def markdown(results: list[dict]) -> str:
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " | load |",
             "|" + "---|" * (len(COLUMNS) + 1)]
    for result in results:
        cells = [fmt.format(result[key]) if result.get(key) is not None else "-"
                 for key, fmt in COLUMNS]
        load = "-".join(f"{x:.1f}" for x in result["load"][:2])
        lines.append("| " + " | ".join(cells) + f" | {load} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="OUT root of a datagen run")
    parser.add_argument("--out", required=True, help="directory for runs and results")
    parser.add_argument("--cpu-budget", type=float, default=180.0,
                        help="training CPU seconds per variant")
    parser.add_argument("--num-tasks", type=int, default=30, help="held-out tasks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every variant")
    parser.add_argument("--deadline", type=float, default=None, help="Unix time at which "
                        "training stops and saves what it has (steps done vs planned_steps)")
    parser.add_argument("--pretrained", default=None, help="converted SmolLM2 checkpoint "
                        "(scripts/convert_smollm2.py) for the smollm2_* variants")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.jsonl"
    done = {json.loads(line)["variant"]: json.loads(line)
            for line in results_file.read_text().splitlines()} if results_file.exists() else {}
    for name in args.only:
        if name in done:
            continue
        started = time.perf_counter()
        result = run_variant(name, args, out)
        result["wall_s_total"] = round(time.perf_counter() - started, 1)
        done[name] = result
        with open(results_file, "a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(json.dumps(result), flush=True)
    table = markdown([done[name] for name in VARIANTS if name in done])
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    (out / "results.md").write_text(f"CPU budget {args.cpu_budget:.0f} s per variant, "
                                    f"{args.num_tasks} held-out tasks, commit {commit}\n\n{table}")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
