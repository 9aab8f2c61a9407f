"""Does distillation teach here, and does SAD beat its baselines? (a script, not a test)

    python benchmarks/learning_effect.py --shards out/demo --tokenizer runs/tokenizer --out runs/learning_effect

1. Soft teacher: a `small` model (hidden 256, 4 layers; twice the student's width and
   depth) trained once with SFT on the oracle shards (the shipped tiny recipe otherwise,
   MCH off), saved under OUT/teacher and reused by every later run; or `--teacher-from`
   an existing checkpoint (e.g. the shipped tiny recipe trained ~7x a student's steps:
   the README's run, when a `small` teacher did not fit the session's CPU share).
2. Students: the shipped tiny recipe (configs/train_tiny.yaml; random init) distilled from
   that teacher with `sft` (one-hot oracle targets), `token_kd` and `sad` (online teacher:
   its full distribution at every REASON/ACT position), each with every seed of `--seeds`,
   all for the same number of steps over the same batches per seed (an equal token budget;
   KD arms also pay the teacher's forward, so their CPU time is higher: reported).
3. The untrained student (0 steps) and the teacher are scored too, as floor and ceiling.
4. Every checkpoint: `trainer eval` on the same held-out tasks: step-level metrics, nats per
   REASON/ACT character, and episodes (success reported even when 0); IRR for the repairs
   table's arms.
5. Second table: SAD with and without repairs in the data (`data.tables: [trajectories,
   repairs]`), IRR and step metrics.

Writes OUT/results.md (both tables, mean +- half the range over seeds, the `uptime` load),
OUT/learning_effect.png and OUT/arms/*.json. Resumable: an arm whose JSON exists is not
redone, a checkpoint without a JSON is only evaluated. One torch thread per process.
Parallel: processes with disjoint `--arms` x `--seeds` may share OUT (start KD arms only
once OUT/arms/teacher.json exists, or two processes train the teacher); a last run with all
arms reads them back and writes the report.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from heldout_scores import score_checkpoint  # noqa: E402
from learning_tables import conclusion, markdown_table, plot  # noqa: E402
from local_training import ComposedRows, composed_rows, steps_for_budget, train_locally  # noqa: E402
from trainer.config import TrainConfig, load_config  # noqa: E402
from trainer.data import DataSettings  # noqa: E402
from trainer.recipes.sad import data_settings  # noqa: E402

OBJECTIVES = {"sft": ["loss.objective=sft", "loss.teacher=onehot"],
              "token_kd": ["loss.objective=token_kd", "loss.teacher=online"],
              "sad": ["loss.objective=sad", "loss.teacher=online"]}
REPAIRS = ["data.tables=[trajectories, repairs]"]
ARMS = ("sft", "token_kd", "sad", "sad+repairs")
TEACHER = ["model.builder=small", "model.use_mch=false", "loss.objective=sft",
           "loss.teacher=onehot"]


def load(args: argparse.Namespace, run_dir: Path, *overrides: str) -> TrainConfig:
    return load_config(ROOT / "configs" / "train_tiny.yaml",
                       [f"run_dir={run_dir}", f"shards={args.shards}",
                        f"tokenizer={args.tokenizer}", *overrides, *args.set])


@lru_cache(maxsize=2)
def epoch_rows(settings: DataSettings) -> ComposedRows:
    """The stream's epoch for these settings, composed once per process (the arms of one
    seed read the same batches; composing an epoch costs ~12 CPU-s)."""
    return composed_rows(settings)


def trained_elsewhere(checkpoint: Path) -> dict[str, Any]:
    """The training summary of a `--teacher-from` checkpoint, from the metrics.jsonl that
    benchmarks/local_training.py writes (steps and CPU seconds), when it is there."""
    metrics = checkpoint / "metrics.jsonl"
    if not metrics.exists():
        return {"steps": None, "cpu_s": float("nan"), "teacher_from": str(checkpoint)}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return {"steps": len(records), "cpu_s": records[-1].get("cpu_total_s", float("nan")),
            "teacher_from": str(checkpoint)}


def load_text() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Bench:
    """The arms, their checkpoints and results under one output directory."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, Path(args.out)
        (self.out / "arms").mkdir(parents=True, exist_ok=True)
        self.teacher_dir = Path(args.teacher_from) if args.teacher_from else self.out / "teacher"
        self.started_file = self.out / "started"
        if not self.started_file.exists():
            self.started_file.write_text(str(time.time()))

    def elapsed_minutes(self) -> float:
        return (time.time() - float(self.started_file.read_text())) / 60

    def result_file(self, arm: str) -> Path:
        return self.out / "arms" / f"{arm}.json"

    def done(self, arm: str) -> dict[str, Any] | None:
        path = self.result_file(arm)
        return json.loads(path.read_text()) if path.exists() else None

    def train(self, arm: str, cfg: TrainConfig, steps: int, cpu_budget_s: float,
              deadline: float | None = None) -> dict[str, Any]:
        """Train into OUT/<arm> unless a checkpoint is there; the training summary."""
        checkpoint = self.out / arm
        summary_file = checkpoint / "train_summary.json"
        if summary_file.exists():
            return json.loads(summary_file.read_text())
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"max_steps": steps})})
        rows = epoch_rows(data_settings(cfg)) if steps else None
        started_load = load_text()
        run = train_locally(cfg, rows.take(steps) if rows else [], checkpoint,
                            max_cpu_s=self.args.max_cpu_factor * cpu_budget_s, deadline=deadline)
        summary = {**run.summary(), "planned_steps": steps,
                   "epochs": round(rows.epochs(run.steps), 2) if rows else 0,
                   "load_train": [started_load, load_text()]}
        summary_file.write_text(json.dumps(summary, indent=2))
        return summary

    def evaluate(self, arm: str, checkpoint: Path, training: dict[str, Any], irr: bool,
                 ) -> dict[str, Any]:
        started_load = load_text()
        scores, report = score_checkpoint(
            str(checkpoint), self.args.num_tasks, episodes=True,
            irr_tasks=self.args.irr_tasks if irr else 0, shards=[self.args.shards],
            max_new_tokens=self.args.max_new_tokens)
        (self.out / arm).mkdir(parents=True, exist_ok=True)  # not into a --teacher-from dir
        (self.out / arm / "eval_report.json").write_text(json.dumps(report, indent=2, default=str))
        result = {"arm": arm, **training, **scores, "load_eval": [started_load, load_text()]}
        self.result_file(arm).write_text(json.dumps(result, indent=2))
        print(json.dumps(result), flush=True)
        return result

    def teacher(self) -> dict[str, Any]:
        cached = self.done("teacher")
        if cached:
            return cached
        if self.args.teacher_from:
            return self.evaluate("teacher", self.teacher_dir, trained_elsewhere(self.teacher_dir),
                                 irr=False)
        cfg = load(self.args, self.teacher_dir, *TEACHER, f"run.seed={self.args.seeds[0]}")
        steps = self.args.teacher_steps or steps_for_budget(
            cfg, epoch_rows(data_settings(cfg)).spread(6), self.args.teacher_cpu_s)
        training = self.train("teacher", cfg, steps, self.args.teacher_cpu_s,
                              deadline=self.args.teacher_deadline)
        return self.evaluate("teacher", self.teacher_dir, training, irr=False)

    def student(self, arm: str, objective: str, seed: int, steps: int, repairs: bool,
                ) -> dict[str, Any]:
        cached = self.done(arm)
        if cached:
            return cached
        overrides = OBJECTIVES[objective] + (REPAIRS if repairs else [])
        if "loss.teacher=online" in overrides:
            overrides.append(f"loss.teacher_model={self.teacher_dir}")
        cfg = load(self.args, self.out / arm, *overrides, f"run.seed={seed}")
        training = self.train(arm, cfg, steps, self.args.student_cpu_s)
        return self.evaluate(arm, self.out / arm, training, irr=objective == "sad")

    def untrained(self, seed: int) -> dict[str, Any]:
        arm = f"untrained-s{seed}"
        cached = self.done(arm)
        if cached:
            return cached
        cfg = load(self.args, self.out / arm, *OBJECTIVES["sft"], f"run.seed={seed}")
        training = self.train(arm, cfg, 0, 0.0)
        return self.evaluate(arm, self.out / arm, training, irr=False)

    def finished(self) -> dict[str, list[dict[str, Any]]]:
        """Results of every arm with a JSON, per arm name (seeds of `--seeds` only)."""
        names = {"teacher": ["teacher"], "untrained": [f"untrained-s{self.args.untrained_seed}"]}
        names |= {arm: [f"{arm}-s{seed}" for seed in self.args.seeds] for arm in ARMS}
        return {arm: [r for r in map(self.done, files) if r] for arm, files in names.items()}

    def planned_steps(self) -> int:
        plan_file = self.out / "plan.json"
        return json.loads(plan_file.read_text())["student_steps"] if plan_file.exists() else 0

    def student_steps_for_budget(self) -> int:
        """Steps of the SFT arm in `--student-cpu-s` (fixed once, in OUT/plan.json)."""
        plan_file = self.out / "plan.json"
        if plan_file.exists():
            return json.loads(plan_file.read_text())["student_steps"]
        cfg = load(self.args, self.out / "plan", *OBJECTIVES["sft"])
        steps = self.args.student_steps or steps_for_budget(
            cfg, epoch_rows(data_settings(cfg)).spread(6), self.args.student_cpu_s)
        plan_file.write_text(json.dumps({"student_steps": steps, "load": load_text()}))
        return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="OUT root of an oracle datagen run "
                        "(with negatives/ and repairs/)")
    parser.add_argument("--tokenizer", required=True, help="the shipped recipe's tokenizer")
    parser.add_argument("--out", required=True, help="results, checkpoints (resumable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1],
                        help="student seeds; runs with disjoint seeds may share OUT in "
                        "parallel once OUT/plan.json exists (teacher and floor done)")
    parser.add_argument("--untrained-seed", type=int, default=0, help="the floor's init seed")
    parser.add_argument("--teacher-cpu-s", type=float, default=600.0,
                        help="CPU seconds of teacher training (sets its steps)")
    parser.add_argument("--teacher-steps", type=int, default=None, help="instead of the budget")
    parser.add_argument("--teacher-deadline", type=float, default=None,
                        help="Unix time at which teacher training stops and saves what it has "
                        "(a shared machine may not give the CPU budget in time; the steps done "
                        "are reported next to the planned ones)")
    parser.add_argument("--teacher-from", default=None, help="an existing checkpoint as the "
                        "soft teacher instead of training the `small` one (e.g. the shipped "
                        "tiny recipe trained 7x longer than a student)")
    parser.add_argument("--student-cpu-s", type=float, default=180.0,
                        help="CPU seconds of an SFT student; every arm gets its step count")
    parser.add_argument("--student-steps", type=int, default=None, help="instead of the budget")
    parser.add_argument("--max-cpu-factor", type=float, default=4.0,
                        help="stop an arm past this multiple of its budget (unattended guard)")
    parser.add_argument("--num-tasks", type=int, default=30, help="held-out tasks")
    parser.add_argument("--irr-tasks", type=int, default=15, help="IRR tasks (SAD arms)")
    parser.add_argument("--max-new-tokens", type=int, default=256,
                        help="tokens per generated turn in the episodes (a demo turn with "
                        "the 8k `lines` tokenizer is well under 128)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                        help="student arms to run (the report needs all: run once more with "
                        "all arms to write it; finished arms are read back)")
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every run")
    parser.add_argument("--teacher-only", action="store_true", help="train and score the "
                        "soft teacher, then stop (KD arms in other processes can start on "
                        "its checkpoint with --teacher-from OUT/teacher meanwhile)")
    parser.add_argument("--report-only", action="store_true", help="write the report from "
                        "the arms finished so far (missing ones are listed), train nothing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench = Bench(args)
    if args.report_only:
        write_report(bench, bench.finished(), bench.planned_steps())
        return 0
    if args.teacher_only:
        bench.teacher()
        return 0
    results: dict[str, list[dict]] = {}
    if "sft" in args.arms:  # the floor goes with the baseline (no teacher needed for either)
        results["untrained"] = [bench.untrained(args.untrained_seed)]
    # A teacher to train comes first (KD arms need it); one given is scored with the floor.
    if (set(args.arms) - {"sft"} and not args.teacher_from) or \
            ("sft" in args.arms and args.teacher_from):
        results["teacher"] = [bench.teacher()]
    steps = bench.student_steps_for_budget()  # OUT/plan.json
    for arm in args.arms:
        objective, repairs = arm.removesuffix("+repairs"), arm.endswith("+repairs")
        results[arm] = [bench.student(f"{arm}-s{seed}", objective, seed, steps, repairs)
                        for seed in args.seeds]
    if set(args.arms) == set(ARMS):
        write_report(bench, results, steps)
    return 0


def write_report(bench: Bench, results: dict[str, list[dict]], steps: int) -> None:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    main_arms = ["untrained", "sft", "token_kd", "sad", "teacher"]
    repair_arms = ["sad", "sad+repairs"]
    loads = [r[key] for rs in results.values() for r in rs for key in ("load_train", "load_eval")
             if key in r]
    flat = [x for pair in loads for one in pair for x in one[:1]] or [float("nan")]
    missing = [arm for arm in main_arms + repair_arms if not results.get(arm)]
    seeds_short = [arm for arm in ARMS if 0 < len(results.get(arm, [])) < len(bench.args.seeds)]
    text = [f"# Learning effect ({commit}, {bench.args.num_tasks} held-out tasks, seeds "
            f"{bench.args.seeds}, {steps} student steps, {bench.elapsed_minutes():.0f} min "
            f"since OUT was started; "
            f"1-minute load average during it {min(flat):.1f}-{max(flat):.1f})\n",
            markdown_table({arm: results[arm] for arm in main_arms if results.get(arm)}),
            "\n" + conclusion(results) + "\n",
            "\n## SAD with and without repairs\n",
            markdown_table({arm: results[arm] for arm in repair_arms if results.get(arm)},
                           with_irr=True)]
    if missing or seeds_short:
        text.append(f"\nNot finished: arms {missing or '-'}; fewer seeds than asked: "
                    f"{seeds_short or '-'}.\n")
    (bench.out / "results.md").write_text("\n".join(text))
    plot({arm: results[arm] for arm in main_arms + ["sad+repairs"] if results.get(arm)},
         bench.out / "learning_effect.png")
    print("\n".join(text))


if __name__ == "__main__":
    raise SystemExit(main())
