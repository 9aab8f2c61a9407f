"""Two rounds of the distillation loop on the tiny CPU recipe, and their round table.

Round 0 is not trained here: to save CPU time it reuses an existing tiny SAD run as round 0's
student (`--start`, T3's `lines8k` checkpoint) and the teacher data it was trained on
(`--data`, the demo OUT) - the loop's `round0.checkpoint` / `round0.data`. Round 1 is the
loop proper: the round-0 student plays `--tasks` fresh tasks, the rule critic repairs its
failures from its first wrong step, the student trains on those repairs plus a replay share of
the demo data, and both rounds are evaluated on the same held-out tasks.

    python benchmarks/loop_rounds.py --out runs/loop_bench \
        --start runs/sweep/lines8k/checkpoint \
        --tokenizer runs/sweep/tokenizers/lines8000 \
        --data out/demo --envs sql

Prints the round table (rounds.md) and a few facts about the student's failures (their
kinds, and how many became repairs). Rerunning into the same --out continues the loop.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def loop_overrides(args: argparse.Namespace) -> list[str]:
    envs = "[" + ",".join(args.envs) + "]"
    return [
        f"out={args.out}", f"rounds={args.rounds}", f"seed={args.seed}",
        f"round0.data={args.data}", f"round0.checkpoint={args.start}",
        f"student.num_tasks={args.tasks}", f"student.chunk_size={args.tasks}",
        f"student.envs={envs}", f"student.max_turns={args.student_max_turns or args.max_turns}",
        f"student.max_tokens_per_turn={args.max_tokens}", f"student.temperature={args.temperature}",
        f"train.steps_per_round={args.steps}", f"train.replay_share={args.replay_share}",
        "train.set=[run.progress=false,run.save_every=0,data.max_seq_len=1024,"
        f"tokenizer={args.tokenizer},run.seed={args.seed}"
        + (f",optim.lr={args.lr}" if args.lr else "") + "]",
        f"eval.envs={envs}", f"eval.num_tasks={args.eval_tasks}",
        f"eval.eval_seed={args.eval_seed}", f"eval.max_steps={args.max_turns + 2}",
        f"eval.max_new_tokens={args.max_tokens}", f"eval.irr_tasks={args.irr_tasks}",
        "eval.threads=1"]


def failure_facts(out: Path) -> dict[str, object]:
    """What the student's failed rollouts were, per round: error kinds and first wrong step."""
    facts = {}
    for data in sorted(out.glob("round-*/data")):
        if not (data / "repairs").is_dir():
            continue
        rows = pq.read_table(data / "trajectories", columns=["success", "error_kind",
                                                             "n_steps"]).to_pylist()
        repairs = pq.read_table(data / "repairs", columns=["error_step"]).to_pylist()
        facts[data.parent.name] = {
            "rollouts": len(rows), "succeeded": sum(r["success"] for r in rows),
            "failure_kinds": dict(collections.Counter(r["error_kind"] for r in rows
                                                      if not r["success"]).most_common()),
            "repairs": len(repairs),
            "repaired_step": dict(collections.Counter(r["error_step"] for r in repairs))}
    return facts


RAY_START_ATTEMPTS = 3


def start_local_ray() -> None:
    """A Ray of our own: with no address, ray.init() joins the newest `ray start` cluster on
    the host, which on a shared machine is someone else's. On a loaded host the raylet can give
    up waiting for its agents ("node timed out during startup"): tried again."""
    import ray

    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            ray.init(address="local", include_dashboard=True, num_cpus=2,
                     logging_level="WARNING",
                     runtime_env={"env_vars": {"PYTHONPATH": str(ROOT),
                                               "TOKENIZERS_PARALLELISM": "false"}})
            return
        except Exception as exc:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(exc) or attempt == RAY_START_ATTEMPTS:
                raise
            print(f"local Ray did not start (attempt {attempt}): {exc}", file=sys.stderr)
            ray.shutdown()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/loop_bench")
    parser.add_argument("--start", required=True, help="round 0's student (checkpoint/run dir)")
    parser.add_argument("--data", required=True, help="round 0's teacher OUT")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--config", default=str(ROOT / "configs" / "loop_tiny.yaml"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--envs", nargs="+", default=["sql"])
    parser.add_argument("--tasks", type=int, default=40, help="fresh tasks per student round")
    parser.add_argument("--max-turns", type=int, default=6,
                        help="the evaluation's turn budget is this + 2")
    parser.add_argument("--student-max-turns", type=int, default=None,
                        help="the student rollouts' turn budget (default: --max-turns)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--steps", type=int, default=100, help="SAD steps per student round")
    parser.add_argument("--lr", type=float, default=None,
                        help="the student rounds' learning rate (default: the train config's)")
    parser.add_argument("--replay-share", type=float, default=0.5)
    parser.add_argument("--eval-tasks", type=int, default=30)
    parser.add_argument("--eval-seed", type=int, default=0)
    parser.add_argument("--irr-tasks", type=int, default=6,
                        help="held-out tasks for IRR each round (0: none)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the replay draw's and the student rounds' training seed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    from trainer.loop import load_loop_config, run_loop

    start_local_ray()
    started = time.perf_counter()
    result = run_loop(load_loop_config(args.config, loop_overrides(args)))
    print(Path(result.out, "rounds.md").read_text())
    print(json.dumps({"stopped": result.stopped, "seconds": round(time.perf_counter() - started),
                      "failures": failure_facts(Path(result.out))}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
