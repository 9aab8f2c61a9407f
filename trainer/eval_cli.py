"""Command line of `python -m trainer eval`: flags -> EvalConfig -> one JSON report.

Exit codes: 0 the report was printed (and written with --out); 2 the settings cannot run (an
invalid value naming the field, an unknown section, held-out tasks found in the training
shards, a missing checkpoint, a reference with another tokenizer), said in one line on
stderr before any model loads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainer.eval import EvalConfig, evaluate

SECTIONS = ("steps", "episodes", "preferences", "negatives", "safety")


def chosen_sections(only: str | None) -> dict[str, bool]:
    """`--only a,b` -> which sections run (all without it); ValueError names unknown ones."""
    if only is None:
        return dict.fromkeys(SECTIONS, True)
    names = [name.strip() for name in only.split(",") if name.strip()]
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown or not names:
        raise ValueError(f"--only {only!r}: unknown sections {unknown}; choose from "
                         f"{', '.join(SECTIONS)}")
    return {name: name in names for name in SECTIONS}


def config_from_args(args: argparse.Namespace) -> EvalConfig:
    return EvalConfig(
        checkpoint=args.checkpoint, envs=tuple(args.envs.split(",")), num_tasks=args.num_tasks,
        eval_seed=args.eval_seed, shards=tuple(args.shards), **chosen_sections(args.only),
        pref_tasks=args.pref_tasks, reference=args.reference, beta=args.beta,
        safety_worlds=args.safety_worlds, safety_max_steps=args.safety_max_steps,
        irr_tasks=args.irr_tasks,
        irr_extra_turns=args.irr_extra_turns, max_steps=args.max_steps,
        max_new_tokens=args.max_new_tokens, decoder=args.decoder, hybrid=not args.no_hybrid,
        threshold=args.threshold, candidates=args.candidates,
        on_invalid_turn=args.on_invalid_turn, batch_size=args.batch_size,
        step_batch_tokens=args.step_batch_tokens, seed=args.seed,
        env_modules=tuple(args.env_modules), threads=args.threads,
        episodes_out=args.episodes_out)


def _run(args: argparse.Namespace) -> int:
    from trainer.heldout import LeakError

    from datagen.pipeline.storage import writable_file

    for flag, path in (("--out", args.out), ("--episodes-out", args.episodes_out)):
        if path is not None and not (path and writable_file(path)):  # before minutes of work
            print(f"trainer eval: {flag}: cannot write {path} (no such writable folder, or a "
                  f"folder of that name)", file=sys.stderr)
            return 2
    from datagen.envs import import_modules

    try:  # the user's environment modules, before any model loads
        import_modules(list(args.env_modules))
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is theirs
        detail = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        print(f"trainer eval: --env-modules: {detail}", file=sys.stderr)
        return 2
    try:
        report = evaluate(config_from_args(args))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: "
                             f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        print(f"trainer eval: invalid settings: {problems}", file=sys.stderr)
        return 2
    except (LeakError, OSError, KeyError, ValueError) as exc:  # OSError: no checkpoint, or
        # --episodes-out's folder went away during the run
        # a KeyError's str() is its repr: the message itself reads better
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"trainer eval: {message}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2)
    print(text)
    if note := report["tasks"]["leak_check"].get("note"):  # a weaker held-out claim: said aloud
        print(f"trainer eval: leak check: {note}", file=sys.stderr)
    if args.out:
        try:
            Path(args.out).write_text(text + "\n")
        except OSError as exc:  # the folder went away during the run: the report is printed
            print(f"trainer eval: --out: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0


def add_eval_command(commands: Any) -> None:
    parser = commands.add_parser("eval", help="a checkpoint on held-out tasks: step-level and "
                                 "episode metrics in one JSON report")
    defaults = EvalConfig.model_fields
    parser.add_argument("--checkpoint", required=True, help=defaults["checkpoint"].description)
    parser.add_argument("--envs", default="sql,fs,enterprise", help="comma-separated env names")
    parser.add_argument("--env-modules", nargs="*", default=[],
                        help=defaults["env_modules"].description)
    parser.add_argument("--num-tasks", "--num-episodes", dest="num_tasks", type=int, default=60,
                        help=defaults["num_tasks"].description)
    parser.add_argument("--eval-seed", type=int, default=0, help=defaults["eval_seed"].description)
    parser.add_argument("--shards", action="append", default=[], metavar="OUT",
                        help="training OUT root to check the tasks against (repeatable): a "
                             "shared task id or seed is refused, a shared instruction dropped; "
                             "default: the OUTs the checkpoint's training.json records")
    parser.add_argument("--only", default=None, metavar="SECTION[,SECTION]",
                        help=f"run only these sections ({', '.join(SECTIONS)}; episodes "
                             "include IRR); default: all")
    parser.add_argument("--pref-tasks", type=int, default=None,
                        help=defaults["pref_tasks"].description)
    parser.add_argument("--reference", default=None, help=defaults["reference"].description)
    parser.add_argument("--beta", type=float, default=0.1, help=defaults["beta"].description)
    parser.add_argument("--safety-worlds", type=int, default=3,
                        help=defaults["safety_worlds"].description)
    parser.add_argument("--safety-max-steps", type=int, default=3,
                        help=defaults["safety_max_steps"].description)
    parser.add_argument("--irr-tasks", type=int, default=15, help=defaults["irr_tasks"].description)
    parser.add_argument("--irr-extra-turns", type=int, default=2,
                        help=defaults["irr_extra_turns"].description)
    parser.add_argument("--max-steps", type=int, default=12, help=defaults["max_steps"].description)
    parser.add_argument("--max-new-tokens", type=int, default=256,
                        help=defaults["max_new_tokens"].description)
    parser.add_argument("--decoder", choices=("policy", "batched"), default="policy",
                        help=defaults["decoder"].description)
    parser.add_argument("--on-invalid-turn", choices=("stop", "feedback"), default="stop",
                        help=defaults["on_invalid_turn"].description)
    parser.add_argument("--batch-size", type=int, default=8, help=defaults["batch_size"].description)
    parser.add_argument("--step-batch-tokens", type=int, default=32_768,
                        help=defaults["step_batch_tokens"].description)
    parser.add_argument("--no-hybrid", action="store_true", help="never switch to the slow path")
    parser.add_argument("--threshold", type=float, default=None, help=defaults["threshold"].description)
    parser.add_argument("--candidates", type=int, default=None, help=defaults["candidates"].description)
    parser.add_argument("--seed", type=int, default=0, help=defaults["seed"].description)
    parser.add_argument("--threads", type=int, default=0, help=defaults["threads"].description)
    parser.add_argument("--out", default=None, help="also write the report (JSON) here")
    parser.add_argument("--episodes-out", default=None, metavar="FILE",
                        help=defaults["episodes_out"].description)
    parser.set_defaults(handler=_run)
