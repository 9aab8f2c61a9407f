"""An independent leak finder for the secret tests: brute force, written apart from
`datagen.teachers.redact` so that a blind spot there is not shared here.

`leaks(secret, corpus)` lists every fragment of `secret` of `min_fragment` (8) or more
characters that `corpus` still holds, raw or case-changed, hex, JSON \\u-escaped, URL-encoded,
as HTML entities, or base64 / base64url at any of the 3 byte alignments - also after the
corpus's own escapes are decoded (a key with only some characters escaped). `everything_under`
gathers every byte under a directory: files as they are, Parquet tables decoded to text, SQLite
databases dumped row by row.
"""

from __future__ import annotations

import base64
import html
import re
import sqlite3
from pathlib import Path
from urllib.parse import unquote

import orjson
import pyarrow.parquet as pq

MIN_FRAGMENT = 8


def _windows(secret: str, width: int) -> list[str]:
    return [secret[i:i + width] for i in range(len(secret) - width + 1)]


def _textual(window: str) -> dict[str, str]:
    """Forms compared with a lower-cased corpus."""
    data = window.encode()
    return {"raw": window.lower(), "hex": data.hex(),
            "json-u": "".join(f"\\u{ord(c):04x}" for c in window),
            "url": "".join(f"%{byte:02x}" for byte in data),
            "html": "".join(f"&#{ord(c)};" for c in window)}


def _base64(window: bytes) -> dict[str, str]:
    """The full base64 groups `window` makes inside a longer message, at each alignment."""
    forms = {}
    for alignment in range(3):
        start = (3 - alignment) % 3
        whole = window[start:start + (len(window) - start) // 3 * 3]
        if len(whole) >= 6:
            forms[f"b64@{alignment}"] = base64.b64encode(whole).decode()
            forms[f"b64url@{alignment}"] = base64.urlsafe_b64encode(whole).decode()
    return forms


def _unescaped(corpus: str) -> str:
    text = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), corpus)
    return html.unescape(unquote(text.replace("\\/", "/")))


def leaks(secret: str, corpus: str, min_fragment: int = MIN_FRAGMENT) -> list[str]:
    """`form: fragment` for every fragment of `secret` that `corpus` still holds."""
    found = []
    for text in dict.fromkeys((corpus, _unescaped(corpus))):
        lowered = text.lower()
        for window in _windows(secret, min_fragment):
            found += [f"{name}: {window}" for name, form in _textual(window).items()
                      if form in lowered]
            found += [f"{name}: {window}" for name, form in _base64(window.encode()).items()
                      if form in text]
    return sorted(set(found))


def everything_under(root: Path) -> str:
    """All bytes under `root` as text: raw files, decoded Parquet rows, SQLite rows."""
    parts = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        parts.append(path.read_bytes().decode("utf-8", "replace"))
        if path.suffix == ".parquet":
            parts.append(orjson.dumps(pq.read_table(path).to_pylist(),
                                      option=orjson.OPT_SERIALIZE_NUMPY).decode())
        elif path.suffix == ".sqlite":
            with sqlite3.connect(path) as db:
                for (body,) in db.execute("SELECT body FROM responses"):
                    parts.append(bytes(body).decode("utf-8", "replace"))
    return "\n".join(parts)


def ray_session_logs() -> dict[str, str]:
    """Every log file of the connected Ray session (driver, workers, agents), by name: where a
    worker's output goes (the tests' driver does not forward it)."""
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    return {str(p.relative_to(logs)): p.read_bytes().decode("utf-8", "replace")
            for p in logs.rglob("*") if p.is_file()}
