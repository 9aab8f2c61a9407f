"""What a DPO run does to a SAD checkpoint, on held-out data (a script, not a test; prints a
table and writes the reports):

    before   `trainer eval` of the SAD checkpoint, once per eval seed
    fit      `python -m trainer fit --config configs/dpo_tiny.yaml` (recipe: dpo) started from
             that checkpoint, once per training seed (`run.seed`)
    after    `trainer eval` of each DPO run's newest checkpoint, per eval seed, with the SAD
             checkpoint as the reference (implicit reward margin)

Sections evaluated: `preferences` (held-out pair accuracy overall, per source, and for safety
pairs per side: dangerous refusal > call, benign call > blunt refusal, benign call > the careful
refusal dangerous pairs choose), `negatives`
(how often the correct call beats each negative kind) and `safety` (refusal rate on dangerous
requests, over-refusal rate on benign look-alikes, played as episodes). The held-out tasks are
checked against the training shards (`--shards`), so a pair the run trained on cannot be
scored. A DPO run should raise the accuracies and the refusal rate and not raise the
over-refusal rate.

    python benchmarks/dpo_effect.py --sad runs/tiny --shards out/demo --tokenizer runs/tokenizer \\
        --seeds 0 1 --eval-seeds 0 1 --threads 1 --safety-worlds 12 --out runs/dpo_effect

The reports (runs/dpo_effect/reports.json) are saved after every evaluation. Measured figures:
README, "DPO before/after, measured".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.eval import EvalConfig, evaluate, resolve_checkpoint  # noqa: E402

# (row label, path into the report); kinds of the negatives section are added as found
METRICS = [("pref accuracy", ("preferences", "accuracy")),
           ("  negative", ("preferences", "per_source", "negative", "accuracy")),
           ("  repair", ("preferences", "per_source", "repair", "accuracy")),
           ("  safety", ("preferences", "per_source", "safety", "accuracy")),
           ("    dangerous: refusal > call", ("safety-group", "dangerous", "accuracy")),
           ("    benign: call > blunt refusal", ("safety-group", "benign", "accuracy")),
           ("    benign: call > careful refusal", ("safety-group", "contrast", "accuracy")),
           ("reward margin vs SAD", ("preferences", "reward_margin")),
           ("reward accuracy vs SAD", ("preferences", "reward_accuracy")),
           ("  negative", ("preferences", "per_source", "negative", "reward_accuracy")),
           ("  repair", ("preferences", "per_source", "repair", "reward_accuracy")),
           ("  safety", ("preferences", "per_source", "safety", "reward_accuracy")),
           ("negatives: prefer correct", ("negatives", "prefer_correct_rate")),
           ("safety: refusal rate", ("safety", "refusal_rate")),
           ("safety: over-refusal rate", ("safety", "over_refusal_rate")),
           ("safety: unworded answer (dangerous)",
            ("safety", "dangerous", "unworded_answer_rate")),
           ("safety: unworded answer (benign)", ("safety", "benign", "unworded_answer_rate")),
           ("safety: no decision (dangerous)", ("safety", "dangerous", "no_decision_rate")),
           ("safety: compliance (dangerous)", ("safety", "dangerous", "compliance_rate")),
           ("safety: no decision (benign)", ("safety", "benign", "no_decision_rate")),
           ("safety: compliance (benign)", ("safety", "benign", "compliance_rate")),
           ("safety: wrong target (benign)", ("safety", "benign", "wrong_target_rate"))]


def safety_group(kind: str) -> str:
    """The side of a safety pair's kind: dangerous, benign (call > blunt over-refusal) or
    contrast (call > the careful refusal dangerous pairs choose)."""
    if kind.startswith("benign_contrast_"):
        return "contrast"
    return "benign" if kind.startswith("benign_") else "dangerous"


def _safety_groups(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Held-out safety pair accuracy per side (kinds pooled, weighted by their pairs)."""
    kinds = report.get("preferences", {}).get("per_source", {}).get("safety", {}).get(
        "per_kind", {})
    totals: dict[str, list[float]] = {}
    for kind, entry in kinds.items():
        if entry.get("accuracy") is not None:
            pooled = totals.setdefault(safety_group(kind), [0.0, 0.0])
            pooled[0] += entry["accuracy"] * entry["pairs"]
            pooled[1] += entry["pairs"]
    return {group: {"accuracy": right / pairs, "pairs": pairs}
            for group, (right, pairs) in totals.items() if pairs}


def _dig(report: dict[str, Any], path: tuple[str, ...]) -> float | None:
    if path[0] == "safety-group":
        report, path = _safety_groups(report), path[1:]
    for key in path:
        report = report.get(key) if isinstance(report, dict) else None
    return report if isinstance(report, (int, float)) else None


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def run_eval(checkpoint: str, args: argparse.Namespace, eval_seed: int,
             reference: str | None) -> dict[str, Any]:
    config = EvalConfig(checkpoint=checkpoint, envs=tuple(args.envs), num_tasks=args.num_tasks,
                        eval_seed=eval_seed, shards=(args.shards,), steps=False, episodes=False,
                        reference=reference, safety_worlds=args.safety_worlds,
                        max_new_tokens=args.max_new_tokens, threads=args.threads)
    started, load_before = time.perf_counter(), load()
    report = evaluate(config)
    report["benchmark"] = {"wall_s": round(time.perf_counter() - started, 1),
                           "load_before": load_before, "load_after": load()}
    print(f"eval {checkpoint} (eval seed {eval_seed}): {report['benchmark']['wall_s']:.0f} s, "
          f"load {load_before} -> {report['benchmark']['load_after']}", flush=True)
    return report


def reused_before(path: str, sad: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The SAD evaluations of an earlier run's reports.json, one per eval seed in order;
    refused unless each was made with this run's checkpoint and evaluation settings."""
    try:
        before = json.loads(Path(path).read_text())["before"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--before {path}: not a reports.json of this benchmark ({exc})")
    by_seed = {report.get("config", {}).get("eval_seed"): report for report in before}
    wanted = {"checkpoint": sad, "shards": [args.shards], "envs": list(args.envs),
              "num_tasks": args.num_tasks, "safety_worlds": args.safety_worlds,
              "max_new_tokens": args.max_new_tokens}
    reports = []
    for seed in args.eval_seeds:
        config = by_seed.get(seed, {}).get("config")
        if config is None:
            raise SystemExit(f"--before {path}: no SAD evaluation for eval seed {seed}")
        differ = [key for key, value in wanted.items() if config.get(key) != value]
        if differ:
            raise SystemExit(f"--before {path}: eval seed {seed} was made with other {differ}")
        reports.append(by_seed[seed])
    return reports


def check_recipe(config: str) -> None:
    """Refuse, before any work, a config that is not a DPO recipe."""
    path = Path(config)
    if not path.is_file():
        raise SystemExit(f"{config}: no such config (the DPO recipe's tiny config); give "
                         "--config, or --dpo-runs to evaluate finished runs")
    recipe = (yaml.safe_load(path.read_text()) or {}).get("recipe")
    if recipe != "dpo":
        raise SystemExit(f"{config}: recipe is {recipe!r}, not 'dpo'")


def run_fit(args: argparse.Namespace, seed: int, run_dir: Path) -> str:
    """One DPO run from the SAD checkpoint; its newest checkpoint."""
    overrides = [f"model.init_from={args.sad}", f"shards={args.shards}",
                 f"tokenizer={args.tokenizer}", f"run_dir={run_dir}", f"run.seed={seed}"]
    if args.max_steps:
        overrides.append(f"run.max_steps={args.max_steps}")
    overrides += args.set
    command = [sys.executable, "-m", "trainer", "fit", "--config", args.config]
    for override in overrides:
        command += ["--set", override]
    started, load_before = time.perf_counter(), load()
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"trainer fit failed (rc {completed.returncode}):\n"
                         f"{completed.stderr[-3000:]}")
    print(f"fit seed {seed}: {time.perf_counter() - started:.0f} s -> {run_dir}, load "
          f"{load_before} -> {load()}", flush=True)
    return resolve_checkpoint(str(run_dir))


def _cell(values: list[float | None]) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    if len(present) == 1:
        return f"{present[0]:.3f}"
    return f"{statistics.fmean(present):.3f} ± {statistics.stdev(present):.3f}"


def table(before: list[dict], after: dict[int, list[dict]]) -> str:
    kinds = sorted({kind for report in before for kind in
                    report.get("negatives", {}).get("per_kind", {})})
    per_kind = [(f"  {kind}", ("negatives", "per_kind", kind, "prefer_correct_rate"))
                for kind in kinds]
    at = next(i for i, (label, _) in enumerate(METRICS) if label.startswith("negatives:")) + 1
    rows = METRICS[:at] + per_kind + METRICS[at:]
    seeds = sorted(after)
    header = ["metric", "SAD (before)"] + [f"DPO seed {s}" for s in seeds] + ["DPO mean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, path in rows:
        cells = [_cell([_dig(r, path) for r in before])]
        cells += [_cell([_dig(r, path) for r in after[s]]) for s in seeds]
        cells.append(_cell([_dig(r, path) for s in seeds for r in after[s]]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sad", required=True, help="SAD checkpoint or run dir (the start)")
    parser.add_argument("--shards", required=True, help="the OUT both stages trained on")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--config", default="configs/dpo_tiny.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="DPO run seeds")
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[0],
                        help="held-out task families (trainer eval --eval-seed)")
    parser.add_argument("--envs", nargs="+", default=["sql", "fs", "enterprise"])
    parser.add_argument("--num-tasks", type=int, default=30, help="held-out tasks for pairs")
    parser.add_argument("--safety-worlds", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-steps", type=int, default=0, help="override run.max_steps")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="more config overrides for the DPO runs (trainer fit --set)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dpo-runs", nargs="*", default=None, metavar="RUN_DIR",
                        help="evaluate these finished DPO runs (one per seed) instead of fitting")
    parser.add_argument("--before", metavar="REPORTS_JSON", default=None,
                        help="reuse the SAD evaluations of an earlier run's reports.json "
                        "(same --sad, --shards, eval settings) instead of evaluating again")
    parser.add_argument("--out", default="runs/dpo_effect")
    args = parser.parse_args(argv)
    if args.dpo_runs is None:
        check_recipe(args.config)
    if args.dpo_runs is not None and len(args.dpo_runs) != len(args.seeds):
        raise SystemExit(f"--dpo-runs: {len(args.dpo_runs)} runs for {len(args.seeds)} --seeds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sad = resolve_checkpoint(args.sad)
    before: list[dict] = []
    after: dict[int, list[dict]] = {}

    def save() -> None:  # after every evaluation: a run stopped later keeps what it measured
        (out / "reports.json").write_text(json.dumps({"before": before, "after": after},
                                                     indent=2))

    if args.before:
        before.extend(reused_before(args.before, sad, args))
    for seed in args.eval_seeds if not args.before else ():
        before.append(run_eval(sad, args, seed, None))
        save()
    runs = args.dpo_runs or [str(out / f"dpo-seed-{seed}") for seed in args.seeds]
    for seed, run_dir in zip(args.seeds, runs):
        checkpoint = (resolve_checkpoint(run_dir) if args.dpo_runs is not None
                      else run_fit(args, seed, Path(run_dir)))
        after[seed] = []
        for eval_seed in args.eval_seeds:
            after[seed].append(run_eval(checkpoint, args, eval_seed, sad))
            save()
    print(table(before, after))
    print(f"(eval seeds {args.eval_seeds}, {args.num_tasks} held-out tasks, "
          f"{args.safety_worlds} safety worlds; reports in {out / 'reports.json'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
