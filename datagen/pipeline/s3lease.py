"""The run lock of an object-store OUT: a lease object, `OUT/_run.lock`.

An object store has no flock, and nothing frees a lock when its holder dies. So the lock is a
lease with a time to live:

- acquire: PUT the lease with `If-None-Match: *`, which the store performs only when no object
  has that key (S3 since 2024-08; MinIO; moto's server, which the tests use). Of two runs
  starting together exactly one PUT succeeds; the other reads the lease and is refused with
  its owner (the same `RunLocked` message as the file lock).
- heartbeat: a daemon thread rewrites the lease every TTL/3 with `If-Match: <its ETag>`, so it
  stays young while the run lives, and notices when it was taken over (412): it then records
  the loss (naming the run that holds the lease now) and stops renewing.
- fence: the lease carries a random token of its run. Chunk workers check it (`LeaseFence`,
  one GET) before each shard of a chunk and again before its marker, so a run whose lease
  was taken over (it paused past the TTL: a stopped process, a long GC, a partitioned node)
  commits no chunk after the loss, and its driver writes no manifest: it stops with
  `LeaseLost`, which names the other run. What a fence cannot close: the PUT that follows a
  passed check. A shard put in flight when the lease went may still land; it has no marker,
  so readers and resume ignore it, and the run holding OUT overwrites it when it writes that
  chunk (seen in the takeover test under a load of 40 on 2 cores).
- takeover: a lease not renewed for longer than its TTL belongs to a dead run (SIGKILL, OOM,
  a lost node). Its age is measured on the store's clock (the GET's `Date` minus the object's
  `Last-Modified`), so skew between hosts does not count. The new run replaces it with
  `If-Match: <the stale ETag>`: of two runs taking over together one wins, the other is
  refused.
- release: delete with `If-Match: <its ETag>` (a lease someone took over is left alone).

The TTL (default 120 s, `DATAGEN_LEASE_TTL_S` overrides it) bounds how long a crashed run
blocks its rerun; it must exceed the longest pause of the holder's process (a GC pause, a
stalled network), or a live run could be taken over. boto3 (the `s3` extra) does the
conditional requests: pyarrow.fs has none. Endpoint and credentials come from the standard AWS
chain (`AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ...), never logged.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlparse

import orjson

from datagen.pipeline.shards import LOCK_FILE, OutputConflict

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 120.0
TTL_VARIABLE = "DATAGEN_LEASE_TTL_S"
_ATTEMPTS = 4
_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING_CODES = {"NoSuchKey", "404"}


@dataclass(frozen=True)
class HeldLease:
    """The lease another run holds: its owner record, age on the store's clock, ETag and the
    TTL its holder renews it within (a run with a shorter TTL must not take over a lease that
    is renewed less often)."""

    record: dict[str, Any]
    age_s: float
    etag: str
    ttl_s: float
    token: str = ""  # the holding run's (LeaseFence)

    @property
    def live(self) -> bool:
        return self.age_s <= self.ttl_s


class LeaseLost(OutputConflict):
    """This run's lease on OUT was taken over by another run: it must write nothing more.
    (One message argument, so it survives pickling from a Ray worker to the driver.)"""


def lease_lost(uri: str, record: dict[str, Any] | None) -> LeaseLost:
    from datagen.pipeline.runlock import LockOwner

    owner = LockOwner.from_json(orjson.dumps(record)) if record else None
    holder = owner.describe() if owner else "the lease is gone or unreadable"
    return LeaseLost(f"{uri}: this run's lease was taken over by another datagen run "
                     f"({holder}), after this run was not heard from for longer than the lease "
                     "TTL; it stopped writing (no chunk committed after the loss, no manifest). "
                     "Let the other run finish, or stop it and rerun to resume")


@dataclass(frozen=True)
class LeaseFence:
    """What a chunk worker checks before it writes to OUT: the lease on `uri` still carries
    this run's `token`. Picklable (sent to workers); builds its S3 client where it runs."""

    uri: str
    token: str

    def held(self) -> bool:
        try:
            self.check()
        except OutputConflict:  # taken over, or the store cannot say: write nothing
            return False
        return True

    def check(self) -> None:
        """Raise LeaseLost (naming the holder) unless this run still holds the lease."""
        stored = S3LeaseLock(self.uri, {}, client=_shared_client()).holder()
        if stored is None or stored.token != self.token:
            raise lease_lost(self.uri, stored.record if stored else None)


def lease_ttl_s() -> float:
    """The TTL from `DATAGEN_LEASE_TTL_S`, else the default; a bad value is a clear error."""
    raw = os.environ.get(TTL_VARIABLE)
    if raw is None:
        return DEFAULT_TTL_S
    try:
        ttl = float(raw)
    except ValueError:
        ttl = -1.0
    if not 1.0 <= ttl <= 86400.0:
        raise OutputConflict(f"{TTL_VARIABLE}={raw!r}: the run lease's time to live must be "
                             "seconds between 1 and 86400")
    return ttl


def _bucket_key(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise OutputConflict(f"{uri}: the run lock on object storage supports s3://bucket/prefix "
                             "URIs only")
    prefix = parsed.path.strip("/")
    return parsed.netloc, f"{prefix}/{LOCK_FILE}" if prefix else LOCK_FILE


def _client() -> Any:
    try:
        import boto3
    except ImportError:
        raise OutputConflict("an s3:// output needs boto3 for its run lock (conditional puts): "
                             "pip install 'agentic-distill[s3]'") from None
    return boto3.client("s3")


@functools.lru_cache(maxsize=1)
def _shared_client() -> Any:
    """One client per process for fence checks (a client costs ~0.1 s to build; it is
    thread-safe)."""
    return _client()


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    error = response.get("Error", {})
    return str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _store_error(uri: str, exc: Exception) -> OutputConflict:
    """A failure to talk to the store, as a refusal that names the URI (no credentials)."""
    return OutputConflict(f"{uri}: cannot take the run lease ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200]}); check the bucket, "
                          "AWS_ENDPOINT_URL(_S3) and the credentials in the environment")


class S3LeaseLock:
    """The run lock of an `s3://bucket/prefix` OUT (module docstring)."""

    def __init__(self, uri: str, record: dict[str, Any], ttl_s: float | None = None,
                 client: Any = None) -> None:
        self.uri = uri.rstrip("/")
        self.bucket, self.key = _bucket_key(self.uri)
        self.record = record
        self.ttl_s = ttl_s if ttl_s is not None else lease_ttl_s()
        self.client = client
        self.lost: str | None = None  # why the heartbeat stopped holding the lease
        self.token = uuid.uuid4().hex  # this run's mark on the lease (LeaseFence)
        self._etag: str | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # taking and giving back ----------------------------------------------------------------

    def acquire(self) -> None:
        from datagen.pipeline.runlock import LockOwner, RunLocked

        self.client = self.client or _client()
        held: HeldLease | None = None
        for _ in range(_ATTEMPTS):
            if self._put(IfNoneMatch="*"):
                break
            held = self.holder()
            if held is None:
                continue  # released between our PUT and GET: try again
            if held.live:
                raise RunLocked(self.uri, LockOwner.from_json(orjson.dumps(held.record)))
            if self._put(IfMatch=held.etag):
                log.warning("%s: took over the run lease of a run not heard from for %.0fs "
                            "(TTL %.0fs): %s", self.uri, held.age_s, held.ttl_s, held.record)
                break
        else:
            owner = LockOwner.from_json(orjson.dumps(held.record)) if held else None
            raise RunLocked(self.uri, owner)
        self._beat = threading.Thread(target=self._heartbeat, name="datagen-run-lease",
                                      daemon=True)
        self._beat.start()

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=10)
            self._beat = None
        if self._etag is None or self.lost:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self._etag)
        except Exception as exc:  # noqa: BLE001 - a lease left behind expires with its TTL
            if _code(exc) not in _CONFLICT_CODES:  # a conflict: taken over, theirs now
                log.warning("%s: run lease not deleted (%s); the next run takes it over "
                            "after %.0fs", self.uri, _code(exc), self.ttl_s)
        self._etag = None

    def fence(self) -> LeaseFence:
        """The check chunk workers run before they write (module docstring)."""
        return LeaseFence(self.uri, self.token)

    def __enter__(self) -> S3LeaseLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # the lease object ----------------------------------------------------------------------

    def _body(self) -> bytes:
        return orjson.dumps({**self.record, "ttl_s": self.ttl_s, "token": self.token})

    def _put(self, **condition: str) -> bool:
        """PUT the lease under `condition`; False when the store refuses the condition."""
        try:
            reply = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(),
                                           ContentType="application/json", **condition)
        except Exception as exc:  # noqa: BLE001 - botocore's errors share no importable base
            if _code(exc) in _CONFLICT_CODES | _MISSING_CODES:
                return False
            raise _store_error(self.uri, exc) from None
        self._etag = reply["ETag"]
        return True

    def holder(self) -> HeldLease | None:
        """The lease as stored now, None when there is none."""
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key)
            body = reply["Body"].read(65536)
        except Exception as exc:  # noqa: BLE001
            if _code(exc) in _MISSING_CODES:
                return None
            raise _store_error(self.uri, exc) from None
        try:
            stored = orjson.loads(body)
        except orjson.JSONDecodeError:
            stored = {}
        stored = stored if isinstance(stored, dict) else {}
        record = {k: stored[k] for k in ("host", "pid", "started", "command", "fingerprint")
                  if k in stored}
        ttl = stored.get("ttl_s")
        ttl = float(ttl) if isinstance(ttl, (int, float)) and ttl > 0 else self.ttl_s
        now = parsedate_to_datetime(reply["ResponseMetadata"]["HTTPHeaders"]["date"])
        token = stored.get("token")
        return HeldLease(record, (now - reply["LastModified"]).total_seconds(), reply["ETag"],
                         ttl, token if isinstance(token, str) else "")

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                renewed = self._put(IfMatch=self._etag or "")
            except OutputConflict as exc:  # the store is unreachable for now: try again
                log.warning("%s: run lease not renewed: %s", self.uri, exc)
                continue
            if not renewed:
                try:
                    held = self.holder()
                except OutputConflict:
                    held = None
                self.lost = str(lease_lost(self.uri, held.record if held else None))
                log.error("%s (this run paused for longer than the lease TTL of %.0fs?)",
                          self.lost, self.ttl_s)
                return


def lease_holder(uri: str) -> dict[str, Any] | None:
    """The owner record of the live lease on `uri` (for verify/inspect), None when there is
    none or it has expired."""
    held = S3LeaseLock(uri, {}, client=_client()).holder()
    return held.record if held is not None and held.live else None
