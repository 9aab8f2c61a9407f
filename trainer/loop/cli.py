"""Command line of `python -m trainer loop --config FILE [--set key=value ...]`.

Exit codes: 0 the loop ran (or was already done) and printed its round table; 1 a phase of a
round failed (one line: round, phase, cause; rerunning continues there); 2 the config cannot
run (the message names the field), said before any work starts, or a state file under OUT
cannot be read (trainer.loop.rounds.StateFileError: the message names it and what to do)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer.config import ConfigError


def _run(args: argparse.Namespace) -> int:
    from datagen.pipeline.shards import OutputConflict
    from trainer.loop import load_loop_config, run_loop
    from trainer.loop.run import PhaseFailed
    from trainer.worker_logs import settle_worker_logs

    try:
        result = run_loop(load_loop_config(args.config, args.set))
    except (ConfigError, FileNotFoundError, OutputConflict) as exc:
        print(f"trainer loop: {exc}", file=sys.stderr)
        return 2
    except PhaseFailed as exc:
        settle_worker_logs()
        print(f"trainer loop: {exc}", file=sys.stderr)
        return 1
    print(Path(result.out, "rounds.md").read_text(), end="")
    print(json.dumps({"out": result.out, "rounds": len(result.rows), "stopped": result.stopped}))
    return 0


def add_loop_command(commands: Any) -> None:
    parser = commands.add_parser("loop", help="iterative distillation: rounds of student "
                                 "rollouts -> repairs of its failures -> retraining -> eval, "
                                 "resumable by round")
    parser.add_argument("--config", required=True, help="loop YAML (configs/loop_tiny.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field, e.g. --set rounds=3")
    parser.set_defaults(handler=_run)
