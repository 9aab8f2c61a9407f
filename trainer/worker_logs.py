"""Ray workers' output on the driver's console without Python traceback frames.

Ray forwards every worker's stdout / stderr to the driver. When a fit fails on one bad row,
Ray Train's worker logs the whole chain (the train loop, Ray Data's iterator, the map task),
its controller logs it again, and Ray Data's coordinator a third time: ~600 lines of frames
in a 4,780-line stderr (Ray Data's bars included), some of them printed after the driver's
one-line `training failed: bad data: ...`.
The driver keeps every line but the frames: what each process said, and each exception's own
line ("trainer.data_checks.DataError: <shard>: row id=..."), so the console still tells what
failed where. The frames stay in Ray's log files (`logs_hint` says where).

Ray 2.60 has no public hook for this: the driver's printer is the handler named
"ray_print_logs" on `ray._private.ray_logging.global_worker_stdstream_dispatcher`; it is
wrapped, not replaced, and left alone if that name is not found (another Ray version).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from typing import Any, Callable

PRINTER = "ray_print_logs"
# Ray colours the remote task names inside an exception's text
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CHAINS = frozenset({"During handling of the above exception, another exception occurred:",
                    "The above exception was the direct cause of the following exception:"})


# "trainer.data_checks.DataError: ...", "ray.exceptions.RayTaskError(DataError): ...",
# "StopIteration": the line that ends a traceback, after which Ray's remote frames may follow
EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(\([\w.]+\))?(: |$)")
# a Ray task's error text inside a message ("get() failed after 0 rows: ray::MapBatches(...)
# (pid=...)"): the remote frames follow it
RAY_TASK_ERROR = re.compile(r"ray::\S+ \(pid=\d+")


class TracebackLines:
    """Which lines of one process's stream to print: a traceback's header, its frames (the
    indented lines from a `  File "..."` line on: source lines, `^^^` markers, and the remote
    frames Ray prints inside a RayTaskError's text, after its exception line) and the
    chaining sentences are dropped; the exception lines are kept. Any other unindented line
    ends the traceback. Stateful, as a traceback can arrive over several batches."""

    def __init__(self) -> None:
        self.inside = False
        self.hidden = 0

    def keep(self, line: str) -> bool:
        text = ANSI.sub("", line).rstrip()
        if text == "Traceback (most recent call last):" or text.startswith('  File "'):
            self.inside = True
        elif text in CHAINS or (self.inside and (not text or text[0].isspace())):
            pass
        else:
            self.inside = (self.inside and EXCEPTION_LINE.match(text) is not None
                           or RAY_TASK_ERROR.search(text) is not None)
            return True
        self.hidden += 1
        return False


class FramelessPrinter:
    """The driver's printer of worker logs, fed each batch without its traceback frames."""

    def __init__(self, print_batch: Callable[[dict[str, Any]], None]) -> None:
        self.print_batch = print_batch
        self.streams: dict[tuple[Any, bool], TracebackLines] = {}
        self.lock = threading.Lock()
        self.last_batch = time.monotonic()
        self.hiding = True

    def __call__(self, batch: dict[str, Any]) -> None:
        with self.lock:
            self.last_batch = time.monotonic()
            if not self.hiding:
                self.print_batch(batch)
                return
            stream = self.streams.setdefault((batch.get("pid"), bool(batch.get("is_err"))),
                                             TracebackLines())
            lines = [line for line in batch.get("lines", ()) if stream.keep(line)]
            if lines:
                self.print_batch({**batch, "lines": lines})

    @property
    def hidden(self) -> int:
        with self.lock:
            return sum(stream.hidden for stream in self.streams.values())


_installed: FramelessPrinter | None = None


def hide_worker_tracebacks(hide: bool = True) -> None:
    """Wrap this driver's printer of worker logs (after `ray.init`), hiding frames or, with
    `hide` false (`run.worker_tracebacks`), printing every line as Ray would."""
    global _installed
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:  # another Ray version: its printer is left as it is
        return
    with dispatcher._lock:
        for index, (name, handler) in enumerate(dispatcher.handlers):
            if name == PRINTER and not isinstance(handler, FramelessPrinter):
                _installed = FramelessPrinter(handler)
                dispatcher.handlers[index] = (name, _installed)
    if _installed is not None:
        with _installed.lock:
            _installed.hiding = hide


def wait_for_quiet_logs(quiet_s: float = 1.0, limit_s: float = 5.0) -> None:
    """Wait (at most `limit_s`) until no worker log has arrived for `quiet_s`: the workers'
    last lines about a failure reach the driver after the failure itself, and would print
    below the driver's one-line reason, which should be the console's last line."""
    if _installed is None:
        return
    deadline = time.monotonic() + limit_s
    while (now := time.monotonic()) < deadline and now - _installed.last_batch < quiet_s:
        time.sleep(0.1)
    _print_held_lines()


def _print_held_lines() -> None:
    """Print the lines Ray's deduplication holds back (a line like one another process
    printed waits up to 5 s to be counted as a repeat): Ray prints them at disconnect, after
    everything this process prints last. The same calls as `ray.shutdown`'s."""
    from ray._private import worker

    with _installed.lock:  # not while the printer prints a batch
        try:
            ignore_prefix = worker._should_ignore_worker_log_prefix(worker.global_worker)
            for deduplicator, sink in ((worker.stdout_deduplicator, sys.stdout),
                                       (worker.stderr_deduplicator, sys.stderr)):
                for held in deduplicator.flush():
                    worker.print_worker_logs(held, sink, ignore_prefix)
        except AttributeError:  # another Ray version: it prints them at disconnect
            pass


def settle_worker_logs() -> None:
    """Before a command's one-line failure: print the workers' last lines, then where the
    frames hidden from them are, so that the failure is the console's last line."""
    wait_for_quiet_logs()
    if hint := logs_hint():
        print(hint, file=sys.stderr)


def logs_hint() -> str:
    """Where the frames are, for the line after a failure; empty if none were hidden."""
    if not (hidden := _installed.hidden if _installed else 0):
        return ""
    import ray

    try:
        where = ray._private.worker._global_node.get_logs_dir_path()
    except AttributeError:
        where = "Ray's session logs"
    return (f"({hidden:,} lines of Ray workers' tracebacks not shown here: they are in "
            f"{where} on each node; run.worker_tracebacks: true prints them)")
