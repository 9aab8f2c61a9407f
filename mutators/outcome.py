"""Execute candidate calls in an environment to see whether they change the outcome.

The environment is duck-typed and never imported: `snapshot() -> state`, `restore(state)`,
`step(call) -> obs` with `obs.content` and `obs.error`. Every call runs from the same
snapshot (restored before each step), and `close()` restores it, so the environment is left
exactly as it was found. A candidate whose step raises is a failed candidate, not a crash.

"The outcome changed" means the observation differs, or the state after the step differs
(a `create_*` call often answers "created E-5" whatever its arguments). The original is run
once for the baseline, in the live environment right after the snapshot (it is in the
snapshot's state: no restore needed). The first time a tool of an environment class is probed,
the original is run twice: if its observations differ the environment is not deterministic and
nothing can be verified (and the check is repeated on every later call); if only its
after-states differ, states are not comparable (an opaque snapshot without equality) and only
observations are compared, and no state is snapshotted after a candidate. A verdict of
"deterministic" is kept per (environment class, tool): the second run of every call cost ~12%
of the demo pipeline's CPU.

`close(advance=True)` leaves the environment in the state after the original call (the
baseline run's), for a caller that would step the original next anyway (the negatives stage
replaying a trajectory): that saves it the step.

Read-only calls: an environment may declare `read_only(call) -> bool` (calls that cannot
change its state, whatever their arguments: lookups, searches). When the original is
read-only the probe takes no snapshot: the original and every read-only candidate run on the
live state, which none of them can change, and only observations are compared (an after-state
equals the state before). A candidate that is not read-only (a custom operator may change the
tool) is run from a snapshot taken then, compared by observation only, and the state is put
back. In the demo pipeline most gold calls are lookups; for `sql` this also spares SQLite
re-reading its schema after every restore. With `CHECK_READ_ONLY` on (the tests; environment
variable `MUTATORS_CHECK_READ_ONLY=1`) every live run is bracketed by snapshots and a state
change raises `ReadOnlyViolation` (compared by the environment's `same_state(a, b)` when it
has one, else by `==`).

Time limits: an environment may declare `timed_out(observation) -> bool` (a call its clock
stopped, e.g. `sql`'s 1 s watchdog). Such an outcome hangs on wall time, not on the
arguments: an original that timed out is not probed at all (it was replayed ~7 times, 1 s
each, and a candidate could differ from it only by timing), and a candidate that timed out
is not counted as a changed outcome.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from mutators.jsonvalues import copy_json

_UNSET = object()
# (environment class, tool name, probed live) -> whether after-states compare, for tools whose
# original call gave the same observation twice; a class adds one entry per tool (a live
# verdict is always False: read-only runs keep no after-state)
_DETERMINISTIC: dict[tuple[type, str, bool], bool] = {}
_MAX_VERDICTS = 4096  # (class, tool) pairs kept; past that the checks simply run again
# bracket every live (read-only) run by snapshots and raise when the state changed: a debug and
# test check of the environments' declarations (costs two snapshots per run)
CHECK_READ_ONLY = os.environ.get("MUTATORS_CHECK_READ_ONLY") == "1"


class ReadOnlyViolation(AssertionError):
    """A call the environment declared read-only changed its state (`CHECK_READ_ONLY`)."""


def is_read_only(env: Any, call: Any) -> bool:
    """Whether `env` declares `call` unable to change its state (`env.read_only(call)`); an
    undeclared call is simply run from a snapshot."""
    return _declares(env, "read_only", call)


def timed_out(env: Any, obs: Any) -> bool:
    """Whether `env` declares `obs` a call stopped by its time limit (`env.timed_out(obs)`);
    an undeclared observation is compared as usual."""
    return _declares(env, "timed_out", obs)


def _declares(env: Any, method: str, argument: Any) -> bool:
    """Whether `env.<method>(argument)` is True; False when `env` has no such method or it
    fails (a declaration is optional and must not fail a probe)."""
    declared = getattr(env, method, None)
    if not callable(declared):
        return False
    try:
        return declared(argument) is True
    except Exception:  # noqa: BLE001
        return False


class TimedOut(Exception):
    """A run that the environment's time limit stopped: its outcome says nothing."""


def observation_key(obs: Any) -> Any:
    """What "the same observation" means: equal content and equal error."""
    if hasattr(obs, "content"):
        return (getattr(obs, "content", None), getattr(obs, "error", None))
    try:
        return orjson.dumps(obs, option=orjson.OPT_SORT_KEYS, default=repr)
    except (TypeError, orjson.JSONEncodeError):
        return repr(obs)


def _same_state(first: Any, second: Any) -> bool:
    try:
        return bool(first == second)
    except Exception:  # noqa: BLE001 - e.g. numpy arrays: not comparable, treat as unequal
        return False


class OutcomeProbe:
    """Compares the observation of candidate calls with the original's, from one snapshot.
    At most `budget` candidates are executed; `failure` says why probing is impossible."""

    def __init__(self, env: Any, original_call: dict[str, Any], budget: int = 12) -> None:
        self.env = env
        self.original = copy_json(original_call)
        self.budget = budget
        self.used = 0
        self.failure: str | None = None
        self._state: Any = _UNSET
        self._baseline: Any = _UNSET
        self._after: Any = _UNSET  # the state after the original (baseline) run
        self._states_comparable = False
        # the original is read-only: no snapshot, read-only calls run on the live state
        self._live = is_read_only(env, self.original)
        self.last_change = ""

    def _run(self, call: dict[str, Any], restore: bool = True,
             keep_state: bool = True) -> tuple[Any, Any]:
        """(observation key, state after or None) of `call` executed from the snapshot
        (`restore=False`: the environment is in the snapshot's state already)."""
        if restore:
            self.env.restore(self._state)
        observation = self._step(call)
        return observation, self.env.snapshot() if keep_state else None

    def _step(self, call: dict[str, Any]) -> Any:
        """The observation key of one step of `call`; TimedOut if the time limit stopped it."""
        obs = self.env.step(copy_json(call))
        if timed_out(self.env, obs):
            raise TimedOut
        return observation_key(obs)

    def _run_live(self, call: dict[str, Any]) -> tuple[Any, None]:
        """(observation key, None) of a read-only `call` run on the live state."""
        if not CHECK_READ_ONLY:
            return self._step(call), None
        before = self.env.snapshot()
        observation = self._step(call)
        after = self.env.snapshot()
        same = getattr(self.env, "same_state", None)
        if not (same(before, after) if callable(same) else _same_state(before, after)):
            raise ReadOnlyViolation(f"{call.get('name')!r} is declared read-only by "
                                    f"{type(self.env).__name__} but changed its state")
        return observation, None

    def _run_writing(self, call: dict[str, Any]) -> tuple[Any, Any]:
        """A call that is not read-only under a live probe: run from a snapshot of the state
        before the original (taken now: every run so far left it unchanged), then put back."""
        if self._state is _UNSET:
            self._state = self.env.snapshot()
        try:
            return self._run(call, keep_state=False)
        finally:
            self.env.restore(self._state)

    def _ready(self) -> bool:
        """Snapshot and run the original (twice where determinism is not known yet), once;
        False (with `failure`) if impossible."""
        if self._baseline is not _UNSET or self.failure is not None:
            return self.failure is None
        if not self._live:
            try:
                self._state = self.env.snapshot()
            except Exception as exc:  # noqa: BLE001 - any env failure becomes a reason
                self.failure = f"env.snapshot() failed: {type(exc).__name__}: {exc}"
                return False
        name = self.original.get("name") if isinstance(self.original, dict) else None
        # live verdicts apart: they say nothing about comparing after-states
        key = (type(self.env), str(name), self._live)
        try:
            first = self._run_live(self.original) if self._live else \
                self._run(self.original, restore=False)
            self._after = first[1]
            comparable = _DETERMINISTIC.get(key)
            if comparable is None:
                comparable = self._check_determinism(first)
        except ReadOnlyViolation:
            raise
        except TimedOut:
            self.failure = ("the original call was stopped by the environment's time limit, "
                            "so whether a candidate changes its outcome would depend on timing")
            return False
        except Exception as exc:  # noqa: BLE001
            self.failure = f"env.step raised on the original call: {type(exc).__name__}: {exc}"
            return False
        if comparable is None:
            return False
        if len(_DETERMINISTIC) >= _MAX_VERDICTS:
            _DETERMINISTIC.clear()
        _DETERMINISTIC[key] = self._states_comparable = comparable
        self._baseline = first
        return True

    def _check_determinism(self, first: tuple[Any, Any]) -> bool | None:
        """Run the original a second time: whether after-states compare, or None (with
        `failure`) when the observations differ."""
        second = self._run_live(self.original) if self._live else self._run(self.original)
        if first[0] != second[0]:
            self.failure = ("the environment is not deterministic (the original call gave two "
                            "different observations), so a changed outcome cannot be verified")
            return None
        return not self._live and _same_state(first[1], second[1])

    def changes_outcome(self, call: dict[str, Any]) -> bool:
        """True when `call` executes to a different observation (or after-state) than the
        original; `last_change` then says which."""
        if not self._ready() or self.used >= self.budget:
            return False
        self.used += 1
        try:
            if not self._live:
                observation, state = self._run(call, keep_state=self._states_comparable)
            elif is_read_only(self.env, call):
                observation, state = self._run_live(call)
            else:
                observation, state = self._run_writing(call)
        except ReadOnlyViolation:
            raise
        except Exception:  # noqa: BLE001 - a candidate that crashes the env is just rejected
            return False
        if observation != self._baseline[0]:
            self.last_change = "observation differs"
            return True
        if self._states_comparable and not _same_state(state, self._baseline[1]):
            self.last_change = "state after the call differs"
            return True
        return False

    def describe_failure(self) -> str:
        if self.failure is not None:
            return self.failure
        if self.used >= self.budget:
            return (f"none of the {self.used} candidates executed (the budget) changed the "
                    "outcome (observation or state)")
        return "no executed candidate changed the outcome (observation or state)"

    def close(self, advance: bool = False) -> bool:
        """Leave the environment as it was found (restore the snapshot, if one was taken);
        with `advance`, in the state after the original call when the probe ran it cleanly
        in a deterministic environment (a read-only original: the state as found is that
        state). Returns whether it is in that after-state."""
        if self._live:
            # the state is the one before the call, which a read-only call leaves as it is
            # (restored after a candidate that was not read-only)
            return advance
        if self._state is _UNSET:
            return False
        advanced = advance and self._after is not _UNSET and self._baseline is not _UNSET
        try:
            self.env.restore(self._after if advanced else self._state)
        except Exception as exc:  # noqa: BLE001
            self.failure = self.failure or f"env.restore() failed: {exc}"
            return False
        return advanced
