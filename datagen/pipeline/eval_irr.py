"""`datagen eval irr`: the incorrect-step recovery rate of an agent (see critics/irr.py).

    datagen eval irr [--num-tasks 60] [--seed 0] [--envs sql fs enterprise (the default)]
                     [--kinds type_error ...] [--extra-turns 2] [--json FILE]

Only the oracle agent runs today; a teacher backend plugs in as a `critics.irr.Policy`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import orjson

from datagen.envs import DEFAULT_ENVS
from mutators import ALL_KINDS


def add_parser(commands: Any) -> None:
    """Register `eval irr` on the CLI's subcommand table."""
    evaluate = commands.add_parser("eval", help="evaluate agents on held-out tasks")
    which = evaluate.add_subparsers(dest="evaluation", required=True)
    irr = which.add_parser("irr", help="recovery rate after an injected error")
    irr.add_argument("--num-tasks", type=int, default=60, help="held-out tasks (round-robin)")
    irr.add_argument("--seed", type=int, default=0, help="same seed -> same tasks and errors")
    irr.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    irr.add_argument("--kinds", nargs="+", default=list(ALL_KINDS), choices=list(ALL_KINDS))
    irr.add_argument("--extra-turns", type=int, default=2,
                     help="turns allowed beyond a perfect recovery")
    irr.add_argument("--agent", choices=["oracle"], default="oracle")
    irr.add_argument("--json", help="also write the summary as JSON here")


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"IRR overall: {summary['overall']['irr']:.3f} (n={summary['overall']['n']}, "
             f"skipped={summary['skipped']})"]
    for title in ("per_env", "per_kind"):
        lines.append(f"{title.replace('_', ' ')}:")
        lines += [f"  {name:<18} {row['irr']:.3f}  (n={row['n']})"
                  for name, row in summary[title].items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from critics.irr import evaluate_irr, oracle_policy

    started = time.perf_counter()
    report = evaluate_irr(oracle_policy, envs=tuple(args.envs), num_tasks=args.num_tasks,
                          seed=args.seed, kinds=tuple(args.kinds), extra_turns=args.extra_turns)
    summary = report.summary() | {"agent": args.agent, "seed": args.seed,
                                  "seconds": round(time.perf_counter() - started, 3)}
    print(format_summary(summary))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return 0
