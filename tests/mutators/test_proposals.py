"""Proposals: operators propose cheap records and a Candidate is built only when drawn.

The order functions draw from the records' `subkind` / `original` / `path` alone, so ordering
the proposals and building the drawn ones must give exactly the candidates that building
every proposal first and then ordering would give (the negatives a seed yields depend on it).
"""

from __future__ import annotations

import itertools
import random

from mutators import SPECS, mutate_report
from mutators.mutate import _context
from mutators.negative import Candidate, Proposal, materialise
from tests.mutators.fake_crm_env import (CREATE_TICKET, CRM_TOOLS, LIST_TICKETS,
                                         FakeCrmEnvForTests, function_tool)

NESTED = function_tool("search_orders", {
    "customer_id": {"type": "string"}, "limit": {"type": "integer", "minimum": 1},
    "created_after": {"type": "string", "format": "date"},
    "filters": {"type": "object", "additionalProperties": False, "properties": {
        "status": {"type": "string", "enum": ["open", "shipped", "closed"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "min_total": {"type": "number"}}},
}, ["customer_id"], additionalProperties=False)
CALLS = [
    ({"name": "create_ticket", "arguments": {"customer_id": "C-1001", "title": "Login fails",
                                             "priority": "high", "notify": True}},
     CREATE_TICKET),
    ({"name": "list_tickets", "arguments": {"customer_id": "C-1002", "status": "open",
                                            "limit": 5}}, LIST_TICKETS),
    ({"name": "search_orders", "arguments": {
        "customer_id": "C-1003", "limit": 10, "created_after": "2024-03-15",
        "filters": {"status": "open", "tags": ["red", "blue", "green"], "min_total": 2.5}}},
     NESTED),
]
KINDS = ("type_error", "hallucinated_key", "logical_error")


def _fields(candidate: Candidate) -> tuple:
    return (candidate.subkind, candidate.path, candidate.original, candidate.mutated,
            candidate.description, candidate.where, candidate.build())


def _proposed(kind: str, call: dict, tool: dict, env, seed: str):
    ctx = _context(call, tool, env, CRM_TOOLS + [NESTED])
    ctx.seed = seed
    spec = SPECS[kind]
    return ctx, spec, list(itertools.chain.from_iterable(op(ctx) for op in spec.operators))


def test_drawing_proposals_gives_the_candidates_drawing_built_ones_would():
    checked = 0
    for (call, tool), kind, seed in itertools.product(CALLS, KINDS, range(8)):
        text = f"{seed}:{kind}"
        ctx, spec, proposed = _proposed(kind, call, tool, FakeCrmEnvForTests(), text)
        assert any(type(p) is Proposal for p in proposed)  # the built-in operators are lazy
        lazily = [_fields(materialise(p, ctx))
                  for p in spec.order(proposed, random.Random(text))]
        built = [materialise(p, ctx) for p in proposed]
        eagerly = [_fields(c) for c in spec.order(built, random.Random(text))]
        assert lazily == eagerly
        checked += len(lazily)
    assert checked > 500


def test_a_proposal_carries_what_its_candidate_is_ordered_by():
    for (call, tool), kind in itertools.product(CALLS, KINDS):
        ctx, _, proposed = _proposed(kind, call, tool, FakeCrmEnvForTests(), "0")
        for proposal in proposed:
            candidate = materialise(proposal, ctx)
            assert (proposal.subkind, proposal.original) == (candidate.subkind,
                                                             candidate.original)
            if kind == "type_error":  # its order groups by path
                assert proposal.path == candidate.path


def test_only_drawn_proposals_are_built():
    built, proposed = [], []

    def counted(operator):
        def propose(ctx):
            for proposal in operator(ctx):
                proposed.append(proposal)
                make = proposal.make
                yield Proposal(proposal.subkind, proposal.original,
                               lambda c, *a, make=make: built.append(a) or make(c, *a),
                               proposal.args, proposal.path)
        return propose

    call, tool = CALLS[2]
    operators = {kind: [counted(op) for op in SPECS[kind].operators] for kind in KINDS}
    report = mutate_report(call, tool, 3, other_tools=CRM_TOOLS + [NESTED], kinds=KINDS,
                           operators=operators)
    assert [n.kind for n in report.negatives] == list(KINDS)
    assert 0 < len(built) <= 6 < len(proposed)  # 1-2 tried per kind of dozens proposed
    plain = mutate_report(call, tool, 3, other_tools=CRM_TOOLS + [NESTED], kinds=KINDS)
    assert [n.to_dict() for n in report.negatives] == [n.to_dict() for n in plain.negatives]


def test_operators_may_still_yield_built_candidates():
    def retitle(ctx):
        yield Candidate("retitled", ("title",), ctx.arguments["title"], "Other",
                        ctx.edited(lambda a: a.__setitem__("title", "Other")), "retitled")

    call, tool = CALLS[0]
    negative = mutate_report(call, tool, 0, kinds=["logical_error"],
                             operators={"logical_error": [retitle]}).get("logical_error")
    assert (negative.subkind, negative.mutated, negative.path) == ("retitled", "Other",
                                                                    "arguments.title")
