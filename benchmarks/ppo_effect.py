"""What PPO does to a SAD (or DPO) checkpoint, on held-out tasks (a script, not a test; prints
a table and writes the reports):

    before   `trainer eval --only episodes` of the starting checkpoint (greedy, hybrid mode
             off: the policy's own unforced errors), per eval seed
    fit      `python -m trainer fit --config configs/ppo_tiny.yaml` (recipe: ppo) from that
             checkpoint for --iterations iterations, once per training seed (`run.seed`)
    after    the same evaluation of each PPO run's newest checkpoint

Reported: success rate, syntax-error rate (malformed attempted calls / attempted calls, as
`trainer eval`), attempted calls, mean steps. PPO should lower the syntax-error rate without
lowering success. The held-out tasks (trainer.heldout) are a task space the rollouts'
TaskSource never produces.

    python benchmarks/ppo_effect.py --start runs/tiny --tokenizer runs/tokenizer \\
        --seeds 0 1 --eval-seeds 0 --iterations 10 --envs sql --out runs/ppo_effect
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.dpo_effect import _cell  # noqa: E402 - the same table cells
from trainer.config import load_config  # noqa: E402
from trainer.eval import EvalConfig, evaluate, resolve_checkpoint  # noqa: E402
from trainer.fit import fit  # noqa: E402

METRICS = [("success rate", "success_rate"), ("syntax-error rate", "syntax_error_rate"),
           ("attempted calls", "tool_calls"), ("mean steps", "mean_steps")]


def run_eval(checkpoint: str, args: argparse.Namespace, eval_seed: int) -> dict[str, Any]:
    config = EvalConfig(checkpoint=checkpoint, envs=tuple(args.envs), num_tasks=args.num_tasks,
                        eval_seed=eval_seed, steps=False, preferences=False, negatives=False,
                        safety=False, irr_tasks=0, hybrid=False, max_steps=args.max_turns,
                        max_new_tokens=args.max_tokens_per_turn, threads=args.threads)
    return evaluate(config)["episodes"]


def run_fit(args: argparse.Namespace, seed: int, run_dir: Path) -> str:
    """One PPO run from the starting checkpoint; its newest checkpoint."""
    overrides = [f"model.init_from={args.start}", f"tokenizer={args.tokenizer}",
                 f"run_dir={run_dir}", f"run.seed={seed}", f"run.max_steps={args.iterations}",
                 f"run.save_every={args.iterations}", "run.progress=false",
                 f"ppo.envs={json.dumps(args.envs)}",
                 f"ppo.max_turns={args.max_turns}",
                 f"ppo.max_tokens_per_turn={args.max_tokens_per_turn}", *args.set]
    started = time.perf_counter()
    fit(load_config(args.config, overrides))  # the job `python -m trainer fit` runs
    print(f"fit seed {seed}: {time.perf_counter() - started:.0f} s -> {run_dir}", flush=True)
    return resolve_checkpoint(str(run_dir))


def table(before: list[dict], after: dict[int, list[dict]]) -> str:
    seeds = sorted(after)
    header = ["metric", "start (before)"] + [f"PPO seed {s}" for s in seeds] + ["PPO mean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, key in METRICS:
        cells = [_cell([r.get(key) for r in before])]
        cells += [_cell([r.get(key) for r in after[s]]) for s in seeds]
        cells.append(_cell([r.get(key) for s in seeds for r in after[s]]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True, help="SAD/DPO checkpoint or run dir")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--config", default="configs/ppo_tiny.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="PPO run seeds")
    parser.add_argument("--eval-seeds", type=int, nargs="+", default=[0],
                        help="held-out task families (trainer eval --eval-seed)")
    parser.add_argument("--envs", nargs="+", default=["sql"])
    parser.add_argument("--num-tasks", type=int, default=30, help="held-out episodes")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-tokens-per-turn", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more overrides of the PPO config (e.g. model.use_landmark=false)")
    parser.add_argument("--out", default="runs/ppo_effect")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    before = [run_eval(resolve_checkpoint(args.start), args, s) for s in args.eval_seeds]
    print(f"before: {time.perf_counter() - started:.0f} s", flush=True)
    after: dict[int, list[dict]] = {}
    for seed in args.seeds:
        checkpoint = run_fit(args, seed, (out / f"ppo_seed{seed}").resolve())
        after[seed] = [run_eval(checkpoint, args, s) for s in args.eval_seeds]
    result = table(before, after)
    (out / "reports.json").write_text(json.dumps({"before": before, "after": after,
                                                  "args": vars(args)}, indent=1, default=str))
    (out / "table.md").write_text(result + "\n")
    print(result)
    print(f"total: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
