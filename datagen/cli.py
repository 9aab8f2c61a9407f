"""`datagen` command line: generate and inspect datasets.

    datagen generate --config FILE [--num-trajectories N] [--out DIR] [--address RAY_ADDRESS]
                     [--overwrite] [--set key.sub=value ...]
    datagen inspect DIR [--samples K]
    datagen eval irr [--num-tasks N] [--seed S]
"""

from __future__ import annotations

import argparse
import sys

from datagen.config import ConfigError, load_config, parse_override
from datagen.eval_irr import add_parser as add_eval_parser
from datagen.eval_irr import run as run_eval
from datagen.shards import OutputConflict


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="datagen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="generate (or resume) a dataset")
    gen.add_argument("--config", help="YAML config (defaults apply when omitted)")
    gen.add_argument("--num-trajectories", type=int, help="override num_trajectories")
    gen.add_argument("--out", help="override the output directory")
    gen.add_argument("--address", help="Ray address; default $RAY_ADDRESS, else a local Ray")
    gen.add_argument("--overwrite", action="store_true", default=None,
                     help="replace an output directory written with a different config")
    gen.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    gen.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="KEY=VALUE", help="override any config field, e.g. seed=3")
    ins = commands.add_parser("inspect", help="summarise a generated dataset")
    ins.add_argument("out", help="output directory of a run")
    ins.add_argument("--samples", type=int, default=2, help="trajectories to print")
    ins.add_argument("--seed", type=int, default=0, help="which trajectories to sample")
    add_eval_parser(commands)
    return parser


def _generate(args: argparse.Namespace) -> int:
    from datagen.pipeline import run_generation  # imports Ray: keep `--help` fast

    overrides = dict(parse_override(item) for item in args.overrides)
    overrides.update({"num_trajectories": args.num_trajectories, "out": args.out,
                      "overwrite": args.overwrite, "progress": args.progress})
    config = load_config(args.config, overrides)
    summary = run_generation(config, address=args.address)
    print(summary.format())
    return 0 if summary.complete else 1


def _inspect(args: argparse.Namespace) -> int:
    from datagen.inspect import inspect_dataset

    print(inspect_dataset(args.out, samples=args.samples, seed=args.seed))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "eval":
            return run_eval(args)
        return _generate(args) if args.command == "generate" else _inspect(args)
    except (ConfigError, OutputConflict, FileNotFoundError) as exc:
        print(f"datagen: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("datagen: interrupted; complete chunks are kept, rerun to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
