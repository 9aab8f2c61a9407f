"""Connecting the driver to Ray, in bounded time and with a message a user can act on.

`ray.init(address=...)` on its own gives poor errors: an address where nothing answers prints
Ray warnings for minutes (each of its 20 attempts waits ~40 s), and a wrong auth token ends,
after 20 s of warnings, in "Failed to connect to Ray cluster". So before `ray.init` the driver
checks that the address accepts a TCP connection (refused: milliseconds; silence: 5 s) and
that the GCS answers a handshake with this process's token (10 ms when it refuses the token,
about 13 s when the port is something else, e.g. the dashboard).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
from typing import Iterable, Iterator

import orjson
import ray

from datagen.config import ConfigError

TCP_TIMEOUT_S = 5.0
GCS_HANDSHAKE_TIMEOUT_MS = 3_000  # plus Ray's own 5 s connect and 5 s pubsub waits
TOKEN_HELP = ("give this process the cluster's token: `ray get-auth-token` on the head, then "
              "export RAY_AUTH_TOKEN=... or copy it to ~/.ray/auth_token (or RAY_AUTH_TOKEN_PATH)")


class ClusterError(ConfigError):
    """The run cannot work on this Ray cluster as configured: the address, the auth token,
    what the chunk workers can see, or the resources they ask for. Raised before work starts
    (or when no worker is left), with a message that says what to change."""


def init_ray(address: str | None = None) -> bool:
    """Connect to `address`, else $RAY_ADDRESS, else start a local Ray (or join a `ray start`
    head of this host, as ray.init does). True if this process started the Ray it is connected
    to, now or before: nothing scales or joins it, so what it cannot hold never comes
    (placement.py). An address that cannot be used fails within ~20 s with a ClusterError."""
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        check_address(address)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    return started_here()


def started_here() -> bool:
    """Whether this process started the head of the Ray it is connected to."""
    return bool(getattr(getattr(ray._private.worker, "_global_node", None), "head", False))


def check_address(address: str | None) -> None:
    """`check_gcs_address` for an address that names a GCS; no address (a local Ray),
    `auto`, `local` and Ray Client's `ray://` are left to `ray.init`."""
    if address not in (None, "", "auto", "local") and not address.startswith("ray://"):
        check_gcs_address(address)


def check_gcs_address(address: str) -> None:
    """Raise a ClusterError unless `address` (host:port) is a Ray GCS that accepts our token."""
    if "://" in address:
        raise ClusterError(f"Ray address {address!r} is a URL; datagen needs the cluster's GCS "
                           "address HOST:PORT (`ray start --head` prints it; the dashboard URL "
                           "http://HOST:8265 is for `ray job submit`)")
    host, _, port = address.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not host or not port.isdigit():
        raise ClusterError(f"Ray address {address!r} must look like HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=TCP_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ClusterError(
            f"cannot reach a Ray cluster at {address} (--address / RAY_ADDRESS): {reason}. Is "
            "the head running, and is this its GCS address (`ray start --head` prints it; "
            "default port 6379)?") from None
    _gcs_handshake(address)


def _gcs_handshake(address: str) -> None:
    """One GCS call with a bounded timeout. Uses Ray's internal client (the one `ray.init`
    uses); a Ray without it skips the check and leaves the errors to `ray.init`."""
    try:
        from ray._raylet import InnerGcsClient

        standalone = InnerGcsClient.standalone
    except (ImportError, AttributeError):
        return
    with _quiet_stderr() as noise:
        try:
            standalone(address, None, GCS_HANDSHAKE_TIMEOUT_MS)
            return
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as a message
            first_line = (str(exc).splitlines() or [""])[0][:200]
            error, logged = f"{type(exc).__name__}: {first_line}", noise()
    if "Auth" in error or "Unauthenticated" in logged:
        raise ClusterError(f"the Ray cluster at {address} refused this process's auth token; "
                           f"{TOKEN_HELP}")
    raise ClusterError(f"{address} accepts connections but does not answer as a Ray GCS "
                       f"({error}); pass the head's GCS address (`ray start --head` prints it; "
                       "default port 6379)")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator:
    """Send file descriptor 2 (where Ray's C++ client logs) to a temporary file for the block;
    yields a function returning what was written, so a refused token gives one clear line
    instead of Ray's warnings."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)

        def captured() -> str:
            sink.seek(0)
            return sink.read().decode(errors="replace")

        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def job_working_dir() -> str | None:
    """The working_dir of the Ray job this driver runs in (`ray job submit --working-dir`),
    else None. Every worker of such a job starts in its own copy of that directory."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return (orjson.loads(raw).get("runtime_env") or {}).get("working_dir")
    except (orjson.JSONDecodeError, AttributeError):
        return None


def describe_resources(wanted: dict[str, float]) -> str:
    """What one worker asks for next to what the cluster has and has free, for messages."""
    asked = ", ".join(f"{name} {amount:g}" for name, amount in wanted.items())
    return f"each chunk worker asks for {asked}; the cluster has {cluster_has(wanted)}"


def cluster_has(names: Iterable[str]) -> str:
    """`CPU 2 (1 free now), ...`: the cluster's total and free amount of each resource."""
    total, free = ray.cluster_resources(), ray.available_resources()
    return ", ".join(f"{name} {total.get(name, 0):g} ({free.get(name, 0):g} free now)"
                     for name in names)
