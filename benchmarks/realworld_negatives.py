"""Hard negatives on real-world-like tool specs (issue 14, section 3): the three target
figures on the corpus under `tests/mutators/realworld/`.

    .venv/bin/python benchmarks/realworld_negatives.py [--seeds 3] [--as-written-only]
        [--only heldout2] [--show 20]

`--only` keeps one part of the corpus when given its name: `heldout2` (`specs_heldout2.json`,
written after every rule change and measured once, untuned), `heldout` (`specs_heldout.json`,
measured before the last round of rule changes, then tuned on), `untuned`, `tuned`; any
other text keeps the cases whose origin contains it (`specs_dev`).
Prints one row per part of the corpus (tuned / untuned / heldout / heldout2) and, over every gold call
of every spec (and of its two restyled variants) and every seed:
- false positives: gold calls the validator rejects (target 0);
- all three kinds: calls with at least one argument that get a type_error, a
  hallucinated_key and a logical_error (target >= 97%);
- wrong: negatives that are not what their kind says, judged by the independent
  `tests/mutators/realworld/checker.py` (target <= 0.5%);
then the logical-error subkinds, the reasons of missing kinds and the wrong negatives. The
test `tests/mutators/test_realworld.py` asserts the same targets on two seeds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.mutators.realworld.corpus import load_cases, load_entries  # noqa: E402
from tests.mutators.realworld.measure import corpus_set, measure, merged  # noqa: E402

TARGET_ALL_THREE = 0.97
TARGET_WRONG = 0.005
PARTS = ("tuned", "untuned", "heldout", "heldout2")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per call (0..N-1)")
    parser.add_argument("--as-written-only", action="store_true",
                        help="skip the two programmatic variants of each spec")
    parser.add_argument("--only", default="", help="one part of the corpus (" + ", ".join(PARTS)
                        + ") or cases whose origin contains this text (e.g. 'specs_dev')")
    parser.add_argument("--show", type=int, default=20, help="examples of each problem shown")
    args = parser.parse_args()

    cases = [c for c in load_cases(variants=not args.as_written_only)
             if (corpus_set(c) == args.only if args.only in PARTS else args.only in c.origin)]
    started = time.process_time()
    parts = {name: measure([c for c in cases if corpus_set(c) == name], seeds=range(args.seeds))
             for name in PARTS}
    figures = merged(list(parts.values()))
    seconds = time.process_time() - started

    specs = {(c.origin.split(" call ")[0], c.origin.rsplit("(", 1)[1]) for c in cases}
    print(f"corpus: {len(load_entries())} specs written, {len(specs)} spec variants used, "
          f"{len(cases)} gold calls, {args.seeds} seeds")
    print(f"false positives (gold calls rejected): {len(figures.false_positives)}   "
          f"target 0: {_verdict(not figures.false_positives)}")
    print(f"all three kinds: {figures.all_three}/{figures.calls} = {figures.coverage:.2%}   "
          f"target >= {TARGET_ALL_THREE:.0%}: {_verdict(figures.coverage >= TARGET_ALL_THREE)}")
    print(f"not what their kind says: {len(figures.wrong)}/{figures.negatives} = "
          f"{figures.wrong_rate:.2%}   target <= {TARGET_WRONG:.1%}: "
          f"{_verdict(figures.wrong_rate <= TARGET_WRONG)}")
    for name, part in parts.items():
        if part.calls:
            print(f"  {name:8s} calls {part.calls:5d}  false positives "
                  f"{len(part.false_positives)}  all three {part.coverage:.2%} "
                  f"({part.all_three}/{part.calls})  wrong {part.wrong_rate:.2%} "
                  f"({len(part.wrong)}/{part.negatives})")
    print(f"time: {seconds:.1f} CPU-s ({figures.calls / max(seconds, 1e-9):.0f} mutate_report "
          "calls/s incl. validation and checking)")

    print("\nlogical_error subkinds:")
    for (kind, subkind), count in sorted(figures.subkinds.items()):
        if kind == "logical_error":
            print(f"  {subkind:20s} {count}")
    if figures.missing:
        print("\nmissing kinds:", dict(figures.missing))
        reasons = Counter((kind, reason[:100]) for _, kind, reason in figures.missing_examples)
        for (kind, reason), count in reasons.most_common(args.show):
            print(f"  {count:4d} {kind}: {reason}")
    for origin, errors in figures.false_positives[:args.show]:
        print(f"FALSE POSITIVE {origin}: {errors[:2]}")
    for origin, kind, subkind, why in figures.wrong[:args.show]:
        print(f"WRONG {origin} {kind}/{subkind}: {why}")
    ok = (not figures.false_positives and figures.coverage >= TARGET_ALL_THREE
          and figures.wrong_rate <= TARGET_WRONG)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
