"""The three figures of issue 14 on the real-world corpus, shared by the test and the
benchmark: gold calls that fail validation (false positives), calls (with at least one
argument) that get all three core kinds, and negatives that are not what their kind says
(judged by `checker.py`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mutators import KINDS, mutate_report, validate
from tests.mutators.realworld.checker import check
from tests.mutators.realworld.corpus import Case


@dataclass
class Figures:
    calls: int = 0                      # (case, seed) pairs with at least one argument
    all_three: int = 0
    negatives: int = 0
    wrong: list[tuple[str, str, str, str]] = field(default_factory=list)  # origin, kind, sub, why
    false_positives: list[tuple[str, list[str]]] = field(default_factory=list)
    missing: Counter = field(default_factory=Counter)    # kind -> calls without it
    missing_examples: list[tuple[str, str, str]] = field(default_factory=list)
    subkinds: Counter = field(default_factory=Counter)

    @property
    def coverage(self) -> float:
        return self.all_three / self.calls if self.calls else 0.0

    @property
    def wrong_rate(self) -> float:
        return len(self.wrong) / self.negatives if self.negatives else 0.0


def corpus_set(case: Case) -> str:
    """Which part of the corpus a case is from: 'heldout2' (`specs_heldout2.json`, written
    after every rule change and measured once, untuned), 'heldout' (`specs_heldout.json`,
    measured, then tuned on once), 'untuned' (`specs_untuned.json`, measured once, then
    tuned on) or 'tuned'."""
    stem = case.origin.split("[", 1)[0]
    return {"specs_heldout2": "heldout2", "specs_heldout": "heldout",
            "specs_untuned": "untuned"}.get(stem, "tuned")


def merged(parts: list[Figures]) -> Figures:
    total = Figures()
    for part in parts:
        total.calls += part.calls
        total.all_three += part.all_three
        total.negatives += part.negatives
        total.wrong += part.wrong
        total.false_positives += part.false_positives
        total.missing += part.missing
        total.missing_examples += part.missing_examples
        total.subkinds += part.subkinds
    return total


def measure(cases: list[Case], seeds: range = range(3)) -> Figures:
    figures = Figures()
    for case in cases:
        errors = validate(case.call, case.tool)
        if errors:
            figures.false_positives.append((case.origin, errors))
            continue
        if not case.call["arguments"]:
            continue
        for seed in seeds:
            report = mutate_report(case.call, case.tool, seed)
            figures.calls += 1
            figures.all_three += len(report.negatives) == len(KINDS)
            for kind, reason in report.impossible.items():
                figures.missing[kind] += 1
                figures.missing_examples.append((case.origin, kind, str(reason)))
            for negative in report.negatives:
                figures.negatives += 1
                figures.subkinds[(negative.kind, negative.subkind)] += 1
                why = check(negative, case)
                if why is not None:
                    figures.wrong.append((case.origin, negative.kind, negative.subkind,
                                          f"{why} [{negative.description}]"))
    return figures
