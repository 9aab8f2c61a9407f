"""The rule critic: a deterministic critique written from the structured validator error and
the environment's feedback.

It names the failing argument by its path, quotes what the environment said, states the rule
or fact that was violated, and says what to do instead; the corrected call is the gold call of
the step. Wording is drawn from small template sets with the caller's seeded rng, so the same
input gives the same text while thousands of repairs do not all read alike.
"""

from __future__ import annotations

import random

from critics.critique import Critique, CritiqueRequest, brief

_OPEN = (
    "That call to `{tool}` was a mistake.",
    "Looking back at my last call to `{tool}`, I got it wrong.",
    "My previous `{tool}` call was not right.",
    "I need to stop and check the `{tool}` call I just made: it was wrong.",
)
_SAW_ERROR = (
    "The environment rejected it: {obs}.",
    "The tool answered with an error: {obs}.",
    "The response makes the problem explicit: {obs}.",
)
_SAW_RESULT = (
    "It ran without an error, but the result ({obs}) is not what the task asks for.",
    "No error came back, yet the response ({obs}) answers a different question.",
    "The call went through and returned {obs}, which does not fit the task.",
)
_FIX = (
    "I'll call `{tool}` again with the correct arguments.",
    "Let me redo the call to `{tool}` properly.",
    "So I'll repeat the step with `{tool}`, fixing that.",
    "The fix is to call `{tool}` again, this time correctly.",
)


def _where(path: str | None) -> str:
    return (path or "the arguments").removeprefix("arguments.")


def _rule(request: CritiqueRequest) -> str:
    """The violated schema rule or fact, naming the failing argument."""
    where, tool = _where(request.path), request.wrong_call.name if request.wrong_call else "?"
    if request.path == "name":
        return (f"I called `{request.mutated}` where this step needs `{request.original}`; "
                f"the tool name itself was wrong.")
    if request.error_kind == "hallucinated_key":
        return (f"`{brief(request.mutated, 40)}` is not a parameter of `{tool}` "
                f"(at `{where}`); its schema only accepts the documented keys"
                + (f", and the right key is `{request.original}`." if request.original else "."))
    if request.errors:
        first = request.errors[0]
        return (f"The argument `{_where(first.path)}` breaks the tool's schema ({first.reason}): "
                f"{first.message}." + ("" if _where(first.path) == where else
                                       f" The faulty argument is `{where}`."))
    if request.path is not None:
        return (f"The value of `{where}` was {brief(request.mutated, 50)}, but the task needs "
                f"{brief(request.original, 50)}.")
    return "The arguments do not match what the task needs."


def rule_critic(request: CritiqueRequest, rng: random.Random) -> Critique:
    """Critique + corrected call for a failed step (the correction is the reference call)."""
    if request.wrong_call is None:
        failed = request.steps[request.error_step]
        if failed.error is not None and failed.answer is None:
            return _malformed_turn(request, failed.error, rng)
        return _early_answer(request, rng)
    tool = request.wrong_call.name
    parts = [rng.choice(_OPEN).format(tool=tool)]
    obs = request.observation
    if obs is not None:
        templates = _SAW_ERROR if obs.error else _SAW_RESULT
        parts.append(rng.choice(templates).format(obs=brief(obs.error or obs.content, 120)))
    parts.append(_rule(request))
    if request.reference_call is None:
        return Critique(" ".join(parts), None, "no reference call to correct with")
    parts.append(rng.choice(_FIX).format(tool=request.reference_call.name))
    return Critique(" ".join(parts), request.reference_call)


_EARLY = ("I answered too early: {answer} is not backed by what I have checked so far.",
          "That answer ({answer}) was premature; the task is not done yet.")


def _early_answer(request: CritiqueRequest, rng: random.Random) -> Critique:
    """A final answer given where the gold solution still had a tool call to make."""
    answer = brief(request.steps[request.error_step].answer or "", 60)
    text = rng.choice(_EARLY).format(answer=answer)
    gold = request.task.gold[request.error_step] if request.error_step < len(
        request.task.gold) else None
    if gold is None or request.reference_call is None:
        return Critique(text, None, "no reference call to correct with")
    return Critique(f"{text} I still need to {gold.purpose}, with `{gold.call.name}`.",
                    request.reference_call)


_MALFORMED = ("My last turn was not a usable tool call: {error}.",
              "That turn did not go through as a call ({error}).",
              "I wrote something the tools cannot run: {error}.")


def _malformed_turn(request: CritiqueRequest, error: str, rng: random.Random) -> Critique:
    """A turn that failed before reaching a tool (unparsable, unknown tool, invalid or cut-off
    call), as an LLM student writes them: name the failure, then the call the step needs."""
    text = rng.choice(_MALFORMED).format(error=brief(error, 120))
    if request.reference_call is None:
        return Critique(text, None, "no reference call to correct with")
    gold = request.task.gold[request.error_step]
    return Critique(f"{text} This step needs to {gold.purpose}, so I'll call "
                    f"`{gold.call.name}` with well-formed arguments.", request.reference_call)
