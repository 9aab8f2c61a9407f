"""Where an output directory lives: a local (or mounted) path, or an object store (s3://).

`open_storage(out)` gives a `Storage`: every operation the shard store needs, on paths relative
to OUT ("trajectories/part-000000.parquet"). Two implementations:

- `LocalStorage` (a path): what datagen always did. `write` goes to `_tmp/`, is fsynced and
  renamed into place, so a file is either absent or complete.
- `ArrowStorage` (a URI, through `pyarrow.fs.FileSystem.from_uri`): an object store has no
  rename (a "rename" is a copy and a delete, neither atomic nor cheap) but a PUT is: an object
  appears whole or not at all (a killed multipart upload never completes). `write` therefore
  puts the object at its final key. What makes a chunk complete is its marker, written after
  its shards (shards.py), so an unmarked shard is never part of the dataset.

S3 settings come from the standard AWS chain, never from the config: credentials from
`AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (/ `AWS_SESSION_TOKEN`), a profile or an instance
role; the region from `AWS_REGION` / `AWS_DEFAULT_REGION`; a non-AWS endpoint (MinIO, Ceph, a
local test server) from `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`. Nothing here logs them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from datagen.bounded_read import FileTooLarge, read_bounded

TMP_DIR = "_tmp"  # LocalStorage's staging folder for atomic writes (shards.py clears it)
# `read` serves OUT's records (manifest.json, _run.json, chunk markers), never shards, each
# kind with its own limit: anything larger, or not a regular file, is not a record datagen
# wrote. One limit for all let a single damaged 200 MB marker take 2.9 GB to parse.
# A chunk marker is ~1.5 KB (its shards and the stages' counts).
MAX_MARKER_BYTES = 1 << 20
# _run.json holds the config: at most 1 MiB of YAML and 100,000 values (config_files.py),
# whose JSON dump stays far below this.
MAX_RUN_RECORD_BYTES = 64 << 20
# The manifest is the largest, ~1.5 KB a chunk: ~1.5 GB at the 1,000,000-chunk maximum a
# config allows. Only manifest.json is read with this limit.
MAX_MANIFEST_BYTES = 2 << 30
_HASH_BLOCK = 1 << 20
# A URI starts with a scheme (RFC 3986: a letter, then letters, digits, + . -) and "://";
# a local path that merely holds "://" (/tmp/x/a://b) is a path.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


class StoreUnusable(ValueError):
    """An object-store URI pyarrow cannot open (an unknown scheme, a store it cannot reach to
    resolve): the user's to fix. A ValueError, as callers have always caught it."""


def is_uri(location: str | Path) -> bool:
    """Whether `location` names an object store (`s3://...`) rather than a filesystem path."""
    return isinstance(location, str) and _URI.match(location) is not None


CREDENTIALS_REFUSED = ("a URI with credentials (user:secret@) is refused, as they would be "
                       "recorded with the run; give them through the AWS environment "
                       "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile or a role)")
OPTIONS_REFUSED = ("a URI with a query string or fragment (?... #...) is refused, as pyarrow "
                   "reads options such as endpoint_override from it; set the endpoint with "
                   "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL")


def has_credentials(location: str | Path) -> bool:
    """Whether a URI carries user info (`s3://KEY:SECRET@bucket/...`, which pyarrow accepts)."""
    return is_uri(location) and "@" in str(location).partition("://")[2].partition("/")[0]


def uri_option_problem(location: str | Path) -> str | None:
    """Why an object-store URI cannot be opened as written, or None. pyarrow's
    `FileSystem.from_uri` takes `KEY:SECRET@` and options from the query: the secret would be
    written into the run's records and shown in every message naming it, and
    `s3://bucket/out?endpoint_override=host:9000` would send every request, signed with the
    environment's credentials, to that host (a fragment is no part of a key). The trainer
    refuses its shards URIs by the same rule (trainer/shard_files.py `location_problem`)."""
    if not is_uri(location):
        return None
    if has_credentials(location):
        return CREDENTIALS_REFUSED
    if "?" in str(location) or "#" in str(location):
        return OPTIONS_REFUSED
    return None


def refuse_uri_options(location: str | Path) -> None:
    """StoreUnusable naming an OUT URI (without its credentials) that `uri_option_problem`
    refuses, before any request."""
    if problem := uri_option_problem(location):
        scheme, _, rest = str(location).partition("://")
        store, slash, path = rest.partition("/")
        shown = f"{scheme}://***@{store.rpartition('@')[2]}{slash}{path}" if "@" in store \
            else str(location)
        raise StoreUnusable(f"{shown}: {problem}")


def writable_file(path: str | Path) -> bool:
    """Whether a report file can be written at `path` (its folder exists and is writable,
    and `path` is no folder): checked before minutes of work, not after."""
    folder = Path(path).absolute().parent
    return folder.is_dir() and os.access(folder, os.W_OK) and not Path(path).is_dir()


def join(location: str | Path, relative: str) -> str:
    """`relative` under a path or URI, as text (a Path would turn `s3://` into `s3:/`)."""
    return f"{str(location).rstrip('/')}/{relative}" if is_uri(location) else str(
        Path(location) / relative)


@dataclass(frozen=True)
class Entry:
    """One name directly under a folder."""

    name: str
    is_dir: bool


class Storage(Protocol):
    """OUT, addressed by relative POSIX paths. Missing files raise FileNotFoundError."""

    location: str  # the path or URI, for messages

    def kind(self) -> str: ...  # "missing" | "dir" | "file": what OUT itself is

    # at most `limit` bytes (by default a marker's: pass the manifest's or _run.json's),
    # else OSError
    def read(self, relative: str, limit: int = MAX_MARKER_BYTES) -> bytes: ...

    def write(self, relative: str, data: bytes) -> None: ...  # whole or not at all

    def size(self, relative: str) -> int: ...

    def modified(self, relative: str) -> float | None: ...  # epoch seconds; None: not known

    def entries(self, folder: str = "") -> list[Entry]: ...  # [] for a missing folder

    def delete(self, relative: str) -> None: ...  # a missing file is fine

    def delete_tree(self, folder: str) -> None: ...

    def parquet_rows(self, relative: str) -> int: ...

    def parquet_file(self, relative: str) -> pq.ParquetFile: ...  # footer read, columns lazily

    def sha256(self, relative: str) -> str: ...

    def full(self, relative: str) -> str: ...  # the path or URI of `relative`


class LocalStorage:
    """A directory on a local or mounted filesystem."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def kind(self) -> str:
        return "dir" if self.root.is_dir() else "file" if self.root.exists() else "missing"

    def read(self, relative: str, limit: int = MAX_MARKER_BYTES) -> bytes:
        try:
            return read_bounded(self.root / relative, limit)
        except NotADirectoryError:
            raise FileNotFoundError(self.full(relative)) from None

    def write(self, relative: str, data: bytes) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = self.root / TMP_DIR
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{path.name}.{uuid.uuid4().hex}"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def size(self, relative: str) -> int:
        return (self.root / relative).stat().st_size

    def modified(self, relative: str) -> float | None:
        return (self.root / relative).stat().st_mtime

    def entries(self, folder: str = "") -> list[Entry]:
        try:
            with os.scandir(self.root / folder) as found:
                return [Entry(e.name, e.is_dir()) for e in found]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, relative: str) -> None:
        (self.root / relative).unlink(missing_ok=True)

    def delete_tree(self, folder: str) -> None:
        shutil.rmtree(self.root / folder, ignore_errors=True)

    def parquet_rows(self, relative: str) -> int:
        return pq.read_metadata(self.root / relative).num_rows

    def parquet_file(self, relative: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.root / relative)

    def sha256(self, relative: str) -> str:
        with open(self.root / relative, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()

    def full(self, relative: str) -> str:
        return str(self.root / relative)


class ArrowStorage:
    """A prefix in an object store, through a `pyarrow.fs` filesystem (no renames)."""

    def __init__(self, uri: str) -> None:
        self.location = uri.rstrip("/")
        self.fs, self.base = filesystem_of(self.location)

    def _key(self, relative: str) -> str:
        return f"{self.base}/{relative}" if relative else self.base

    def kind(self) -> str:
        info = self.fs.get_file_info(self.base)
        if info.type == pafs.FileType.File:
            return "file"
        return "dir" if self.entries() else "missing"

    def read(self, relative: str, limit: int = MAX_MARKER_BYTES) -> bytes:
        with self.fs.open_input_stream(self._key(relative)) as stream:
            data = stream.read(limit + 1)
        if len(data) > limit:
            raise FileTooLarge(f"{self.full(relative)} is over the {limit:,} bytes such a "
                               "datagen record may have")
        return data

    def write(self, relative: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._key(relative)) as stream:
            stream.write(data)

    def _file_info(self, relative: str) -> pafs.FileInfo:
        info = self.fs.get_file_info(self._key(relative))
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(self.full(relative))
        return info

    def size(self, relative: str) -> int:
        return self._file_info(relative).size

    def modified(self, relative: str) -> float | None:
        mtime = self._file_info(relative).mtime
        return mtime.timestamp() if mtime is not None else None

    def entries(self, folder: str = "") -> list[Entry]:
        selector = pafs.FileSelector(self._key(folder), allow_not_found=True)
        try:
            found = self.fs.get_file_info(selector)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [Entry(info.base_name, info.type == pafs.FileType.Directory) for info in found]

    def delete(self, relative: str) -> None:
        try:
            self.fs.delete_file(self._key(relative))
        except FileNotFoundError:
            pass

    def delete_tree(self, folder: str) -> None:
        try:
            self.fs.delete_dir(self._key(folder))
        except FileNotFoundError:
            pass

    def parquet_rows(self, relative: str) -> int:
        return pq.read_metadata(self._key(relative), filesystem=self.fs).num_rows

    def parquet_file(self, relative: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.fs.open_input_file(self._key(relative)))

    def sha256(self, relative: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open_input_stream(self._key(relative)) as stream:
            while block := stream.read(_HASH_BLOCK):
                digest.update(block)
        return digest.hexdigest()

    def full(self, relative: str) -> str:
        return join(self.location, relative)


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) of an object-store URI, one filesystem per URI and
    endpoint (making an S3 client costs milliseconds; readers ask per shard). The S3 endpoint
    comes from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` (pyarrow reads the second itself;
    the first is the service-specific form the AWS CLI and SDKs prefer)."""
    refuse_uri_options(uri)
    return _filesystem(uri, os.environ.get("AWS_ENDPOINT_URL_S3"),
                       os.environ.get("AWS_ENDPOINT_URL"))


@functools.lru_cache(maxsize=16)
def _filesystem(uri: str, endpoint: str | None, _generic: str | None
                ) -> tuple[pafs.FileSystem, str]:
    scheme, _, path = uri.partition("://")
    if scheme == "s3" and endpoint:  # from_uri would first ask the default endpoint
        protocol, _, address = endpoint.partition("://")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        fs = pafs.S3FileSystem(endpoint_override=address or protocol,
                               scheme=protocol if address else "https", region=region)
        return fs, path.rstrip("/")
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise StoreUnusable(f"{uri}: not an object-store URI pyarrow can open "
                            f"({str(exc).splitlines()[0][:200]})") from None
    return fs, path.rstrip("/")


def open_storage(out: str | Path) -> Storage:
    """The storage of an OUT: a URI opens through pyarrow.fs, anything else is a path."""
    return ArrowStorage(str(out)) if is_uri(out) else LocalStorage(out)
