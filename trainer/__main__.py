"""Command line: `python -m trainer fit --config FILE [--set key=value ...]`,
`python -m trainer eval --checkpoint DIR [...]` (see trainer.eval) and
`python -m trainer loop --config FILE [--set key=value ...]` (see trainer.loop)."""

from __future__ import annotations

import argparse
import json
import sys

from trainer.config import ConfigError, load_config


def _fit(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config, args.set)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    from ray.train import TrainingFailedError

    from datagen.pipeline.shards import OutputConflict
    from trainer.fit import failure_cause, fit, lasting_failure
    from trainer.worker_logs import settle_worker_logs

    try:
        result = fit(cfg)
    except (FileNotFoundError, ValueError, OutputConflict) as exc:  # refused before training
        print(f"cannot train: {exc}", file=sys.stderr)
        return 2
    except TrainingFailedError as exc:
        settle_worker_logs()  # the workers' own lines are above it, without their frames
        if kind := lasting_failure(exc):  # bad data, diverged: a rerun would fail the same way
            print(f"training failed: {kind}: {failure_cause(exc)}", file=sys.stderr)
            return 1
        print(f"training failed: {failure_cause(exc)} (rerun the same command to resume from "
              f"the newest checkpoint)", file=sys.stderr)
        return 1
    print(json.dumps({"run_dir": result.run_dir, "checkpoint": result.checkpoint,
                      "metrics": result.metrics, "data": result.data}, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer")
    commands = parser.add_subparsers(dest="command", required=True)
    fit_parser = commands.add_parser("fit", help="train (or resume) with a YAML config")
    fit_parser.add_argument("--config", required=True, help="YAML file (configs/train_*.yaml)")
    fit_parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="override a field, e.g. --set run.max_steps=100")
    fit_parser.set_defaults(handler=_fit)
    from trainer.eval import add_eval_command
    from trainer.loop.cli import add_loop_command

    add_eval_command(commands)
    add_loop_command(commands)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
