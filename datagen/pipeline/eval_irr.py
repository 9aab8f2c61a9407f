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

from datagen.config import MAX_SEED
from datagen.config_files import ConfigError
from datagen.envs import DEFAULT_ENVS, resolve_env
from datagen.pipeline.storage import writable_file
from mutators import ALL_KINDS

# An oracle episode takes ~1-5 ms: 100,000 tasks is minutes, not a run that never ends; a
# perfect recovery needs a few turns, so 32 extra turns is far past any useful budget.
MAX_TASKS = 100_000
MAX_EXTRA_TURNS = 32


def int_between(low: int, high: int) -> Any:
    """An argparse type: an integer in low .. high, else a one-line usage error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}")
        return value
    return parse


def add_parser(commands: Any) -> None:
    """Register `eval irr` on the CLI's subcommand table."""
    evaluate = commands.add_parser("eval", help="evaluate agents on held-out tasks")
    which = evaluate.add_subparsers(dest="evaluation", required=True)
    irr = which.add_parser("irr", help="recovery rate after an injected error")
    irr.add_argument("--num-tasks", type=int_between(1, MAX_TASKS), default=60,
                     help="held-out tasks (round-robin)")
    irr.add_argument("--seed", type=int_between(0, MAX_SEED), default=0,
                     help="same seed -> same tasks and errors")
    irr.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    irr.add_argument("--kinds", nargs="+", default=list(ALL_KINDS), choices=list(ALL_KINDS))
    irr.add_argument("--extra-turns", type=int_between(0, MAX_EXTRA_TURNS), default=2,
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


def _check_inputs(args: argparse.Namespace) -> None:
    """Environments that resolve and a --json file that can be written, before any work."""
    for name in args.envs:
        try:
            resolve_env(name)
        except Exception as exc:  # noqa: BLE001 - unknown name, module not importable, not a class
            raise ConfigError(f"--envs: {name!r} is not an environment ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    if args.json and not writable_file(args.json):
        raise ConfigError(f"--json: cannot write {args.json} (no such writable folder, "
                          f"or a folder of that name)")


def run(args: argparse.Namespace) -> int:
    from critics.irr import evaluate_irr, oracle_policy

    _check_inputs(args)
    started = time.perf_counter()
    report = evaluate_irr(oracle_policy, envs=tuple(args.envs), num_tasks=args.num_tasks,
                          seed=args.seed, kinds=tuple(args.kinds), extra_turns=args.extra_turns)
    summary = report.summary() | {"agent": args.agent, "seed": args.seed,
                                  "seconds": round(time.perf_counter() - started, 3)}
    print(format_summary(summary))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return 0
