"""`datagen` command line: generate, check and inspect datasets.

    datagen generate --config FILE [--num-trajectories N] [--out DIR] [--address RAY_ADDRESS]
                     [--overwrite] [--no-progress] [--set key.sub=value ...]
    datagen verify DIR [--quick] [--repair]
    datagen inspect DIR [--samples K] [--seed S]
    datagen eval irr [--num-tasks N] [--seed S] [--envs ENV ...] [--kinds KIND ...]
                     [--extra-turns T] [--json FILE]

Exit codes: 0 done; 1 the run or the check found work left or damage; 2 the input cannot be
used (a config error, an OUT that is another run's, another config's, a file, not writable);
130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from datagen.config import ConfigError, load_config, parse_override
from datagen.pipeline.eval_irr import add_parser as add_eval_parser
from datagen.pipeline.eval_irr import int_between
from datagen.pipeline.eval_irr import run as run_eval
from datagen.pipeline.runlock import LockOwner, run_lock
from datagen.pipeline.shards import OutputConflict, OutputUnreadable
from datagen.pipeline.storage import StoreUnusable, is_uri

# What a user can cause and fix: one line on stderr, exit code 2. Anything else is a bug and
# keeps its traceback.
USER_ERRORS = (ConfigError, OutputConflict, OutputUnreadable)
MAX_SAMPLES = 1_000  # each sample reads its own row group; more is a job for Polars


class OutputUnusable(OutputConflict):
    """The filesystem refused OUT (not writable, a parent is a file, disk full ...)."""


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
    ver = commands.add_parser("verify", help="check every shard against the manifest and the "
                              "chunk markers (exists, size, rows, Parquet footer, sha256)")
    ver.add_argument("out", help="output directory of a run")
    ver.add_argument("--quick", action="store_true",
                     help="skip the sha256 (size, footer and rows only: what a resume checks)")
    ver.add_argument("--repair", action="store_true", help="drop the damaged chunks, so that "
                     "rerunning `datagen generate` with the same config regenerates them")
    ins = commands.add_parser("inspect", help="summarise a generated dataset")
    ins.add_argument("out", help="output directory of a run")
    ins.add_argument("--samples", type=int_between(0, MAX_SAMPLES), default=2,
                     help=f"trajectories to print (0 .. {MAX_SAMPLES:,})")
    ins.add_argument("--seed", type=_sample_seed, default=0,
                     help="which trajectories to sample (0 .. 2^64-1)")
    add_eval_parser(commands)
    return parser


def _sample_seed(text: str) -> int:
    """A seed polars' sample() takes: an integer in 0 .. 2^64-1."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
    if not 0 <= seed < 2**64:
        raise argparse.ArgumentTypeError("must be between 0 and 2^64-1")
    return seed


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """`--set` items, then the dedicated flags that were given (a flag left out leaves the
    config's or `--set`'s value alone)."""
    overrides = dict(parse_override(item) for item in args.overrides)
    flags = {"num_trajectories": args.num_trajectories, "out": args.out,
             "overwrite": args.overwrite, "progress": args.progress}
    overrides.update({key: value for key, value in flags.items() if value is not None})
    return overrides


def _generate(args: argparse.Namespace) -> int:
    from datagen.pipeline.driver import run_generation  # imports Ray: keep `--help` fast

    config = load_config(args.config, _overrides(args))
    with _out_errors(config.out):  # run_generation holds the run lock on OUT
        summary = run_generation(config, address=args.address)
    print(summary.format())
    return 0 if summary.complete else 1


def _verify(args: argparse.Namespace) -> int:
    from datagen.pipeline.verify import repair, verify_output

    with _store_errors(args.out):
        report = verify_output(args.out, checksum=not args.quick)
    print(report.format())
    if args.repair and report.problems and not report.repairable:
        print("repair: nothing to drop or delete (the result line says what fixes OUT)")
    elif args.repair and report.problems:
        with _out_errors(args.out), run_lock(args.out, LockOwner.current(report.fingerprint)):
            dropped, removed = repair(args.out, report)
        print(f"repair: dropped {len(dropped)} damaged chunk(s) "
              f"({', '.join(map(str, dropped)) or 'none'}) and {removed} stray file(s); rerun "
              "`datagen generate` with the same config to regenerate them")
    return 0 if report.ok else 1


def _eval(args: argparse.Namespace) -> int:
    with _out_errors(args.json) if args.json else nullcontext():
        return run_eval(args)


def _inspect(args: argparse.Namespace) -> int:
    from datagen.pipeline.inspect import inspect_dataset

    with _store_errors(args.out):
        print(inspect_dataset(args.out, samples=args.samples, seed=args.seed))
    return 0


@contextmanager
def _out_errors(out: str | Path) -> Iterator[None]:
    """Turns an OSError about the output `out`, a path inside it or one of its parents into
    OutputUnusable: the user's to fix, said in one line. OSErrors elsewhere stay bugs. For an
    object-store OUT every OSError is the store's (pyarrow.fs names no local file), and so is
    a URI pyarrow cannot open at all (StoreUnusable: an unknown scheme, no network)."""
    if is_uri(out):
        try:
            yield
        except StoreUnusable as exc:  # its message names the URI
            raise OutputUnusable(f"cannot use {str(exc).splitlines()[0][:400]}") from None
        except OSError as exc:
            raise OutputUnusable(f"cannot use {out}: {str(exc).splitlines()[0][:300]}"
                                 ) from None
        return
    out = Path(out).absolute()
    try:
        yield
    except OSError as exc:
        path = Path(str(exc.filename)).absolute() if exc.filename else None
        if path is None or not (path == out or out in path.parents or path in out.parents):
            raise
        raise OutputUnusable(f"cannot use {out}: {exc.strerror} ({path})") from None


def _store_errors(out: str) -> Any:
    """An object store's OSError (unreachable, denied) as a one-line error; a local OUT's
    errors as before."""
    return _out_errors(out) if is_uri(out) else nullcontext()


COMMANDS = {"generate": _generate, "verify": _verify, "inspect": _inspect, "eval": _eval}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except USER_ERRORS as exc:
        print(f"datagen: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("datagen: interrupted; complete chunks are kept, rerun to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
