"""An exclusive lock on an output directory, held for the whole of a `datagen generate` run.

Two runs into one OUT can both pass the ownership check of `ShardStore.claim` and then write
chunks of two configs into one dataset. Whoever holds the run lock is the only run in OUT; a
second one is refused with a message that names the first (host, pid, start, command).

`FileRunLock` (local and POSIX shared filesystems) takes `flock` on `OUT/_run.lock`. The kernel
drops the lock when the holding process dies, SIGKILL and OOM included, so a crashed run never
blocks its rerun and no stale-lock rule (age, pid probing) can guess wrong; the owner record
written into the file serves only the refusal message. On NFS, Linux maps `flock` to a
whole-file POSIX lock that the server frees when the client's lease expires; a filesystem
without working locks (some FUSE mounts) would make every run think it is alone.

An object-store OUT (s3://) has no flock: `S3LeaseLock` (s3lease.py) is a lease object created
with a conditional put (If-None-Match: *), renewed by a heartbeat thread and taken over once
older than its TTL. `run_lock(out, owner)` picks the implementation; both raise `RunLocked`.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from datagen.credentials import redact_argv
from datagen.pipeline.shards import LOCK_FILE, OutputConflict
from datagen.pipeline.storage import is_uri

_COMMAND_CHARS = 300  # the owner record names the command; a pasted config would be noise
_LOCK_ATTEMPTS = 4


@dataclass(frozen=True)
class LockOwner:
    """Who holds OUT: enough to find the other run and decide whether to wait or kill it."""

    host: str
    pid: int
    started: str  # UTC, ISO 8601
    command: str
    fingerprint: str

    @classmethod
    def current(cls, fingerprint: str) -> LockOwner:
        """This process, its command line with credentials redacted (before the cut) and
        non-UTF-8 argv bytes written as escapes (JSON has no form for them)."""
        argv = redact_argv([Path(sys.argv[0]).name, *sys.argv[1:]])
        command = (" ".join(argv).encode("utf-8", "backslashreplace").decode("utf-8")
                   [:_COMMAND_CHARS])
        return cls(host=socket.gethostname(), pid=os.getpid(),
                   started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   command=command, fingerprint=fingerprint)

    def describe(self) -> str:
        return (f"pid {self.pid} on {self.host}, started {self.started}, config fingerprint "
                f"{self.fingerprint}: {self.command}")

    @classmethod
    def from_json(cls, data: bytes) -> LockOwner | None:
        try:
            return cls(**orjson.loads(data))
        except (orjson.JSONDecodeError, TypeError):
            return None  # the holder has not written its record yet, or an older format


class RunLocked(OutputConflict):
    """Another run holds OUT."""

    def __init__(self, out: Path | str, owner: LockOwner | None, kind: str = "datagen") -> None:
        holder = owner.describe() if owner else "owner not recorded yet"
        super().__init__(f"{out} is in use by another {kind} run ({holder}); wait for it to "
                         "finish, or stop it and rerun to resume")
        self.owner = owner


class RunLock(Protocol):
    """Exclusive hold on an OUT for one run: `acquire` raises RunLocked when another run
    holds it; `release` gives it back. Used as a context manager."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...

    def fence(self) -> Any: ...  # what writers check before writing (s3lease), or None

    def __enter__(self) -> RunLock: ...

    def __exit__(self, *exc: object) -> None: ...


class FileRunLock:
    """`flock` on OUT/_run.lock, which holds the owner record while the run lasts. `kind`
    names the holder in the refusal (`trainer` holds its run directories the same way)."""

    def __init__(self, root: Path | str, owner: LockOwner, kind: str = "datagen") -> None:
        self.root = Path(root)
        self.path = self.root / LOCK_FILE
        self.owner = owner
        self.kind = kind
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise OutputConflict(f"{self.root} is a file, not a directory; choose another --out")
        self.root.mkdir(parents=True, exist_ok=True)
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if not _flock_soon(fd):
                owner = LockOwner.from_json(os.pread(fd, 4096, 0))
                os.close(fd)
                raise RunLocked(self.root, owner, self.kind)
            if _same_file(fd, self.path):
                self._fd = fd
            else:  # the holder released and removed the file between our open and flock
                os.close(fd)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, orjson.dumps(asdict(self.owner)), 0)

    def release(self) -> None:
        """Remove the file while still holding it (a waiting opener then sees a removed file
        and retries on a fresh one), then let go."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def fence(self) -> None:
        """None: a flock is held until the process dies, nothing can take it over."""
        return None

    def __enter__(self) -> FileRunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _flock_soon(fd: int) -> bool:
    """Exclusive flock, retried for a moment: `lock_holder` (verify, inspect) holds a shared
    lock for microseconds, which must not turn a run away."""
    for attempt in range(_LOCK_ATTEMPTS):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < _LOCK_ATTEMPTS:
                time.sleep(0.05)
    return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def run_lock(out: str | Path, owner: LockOwner) -> RunLock:
    """The run lock for `out`: a file lock for a path, a lease for an s3:// URI."""
    if is_uri(out):
        from datagen.pipeline.s3lease import S3LeaseLock

        return S3LeaseLock(str(out), asdict(owner))
    return FileRunLock(out, owner)


def lock_holder(out: str | Path) -> LockOwner | None:
    """The run holding `out` now, or None; reads only (verify and inspect may run on a
    read-only copy of a dataset)."""
    if is_uri(out):
        from datagen.pipeline.s3lease import lease_holder

        record = lease_holder(str(out))
        return None if record is None else (LockOwner.from_json(orjson.dumps(record)) or
                                            LockOwner("?", 0, "?", "owner not recorded", "?"))
    path = Path(out) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = LockOwner.from_json(os.pread(fd, 4096, 0))
        return owner or LockOwner("?", 0, "?", "owner not recorded yet", "?")
    finally:
        os.close(fd)
    return None
