"""Credentials taken out of what datagen writes about a config: `OUT/_run.json`,
`OUT/manifest.json`, the dataset card and the run lock's owner record (the command line).

The config is stored beside the data so that a reader knows how the data was made; the
credentials a user can put into it are no part of that. What counts as one, wherever it is in
the config (the teacher, `critics.llm`, `extra_body`, `engine_kwargs`, any string):
- the `user:password@` part of a URL (`scheme://...@host`), also a user alone (a token);
- the value of a query parameter with a credential name (`?key=...`, `&access_token=...`);
- `Bearer ...` / `Basic ...` credentials written into a string;
- the value of a mapping entry with a credential name (`api_key`, `Authorization`, `hf_token`),
  whatever its type.
A name is a credential's when its last word (split at `_`, `-`, `.` and camelCase) is one of
`CREDENTIAL_WORDS`: `api_key` and `x-api-key` are, `api_key_env` (the variable's name),
`max_tokens` and `token_ids` are not. Each is replaced by `[redacted]`; redacting twice changes
nothing. The key an `openai` teacher reads from `api_key_env` never enters the config at all.

The config fingerprint hashes the redacted config (`datagen.config.fingerprint`): credentials
say who may use an endpoint, not what it generates, so a rotated password keeps an OUT
resumable; and a hash of the real value, printed in the manifest next to everything else of the
config, would let anyone who reads it test password guesses offline.
"""

from __future__ import annotations

import re
from typing import Any

from datagen.teachers.redact import REDACTED

CREDENTIAL_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "passphrase",
    "authorization", "auth", "credential", "credentials", "cookie", "signature", "bearer"})

# scheme://USERINFO@host: greedy up to the last @ before the path, query or fragment, as
# urllib.parse does (a password may hold an @). The lookbehind lets a scheme start only where
# a word starts: without it every letter of a long word is tried as one (1 MB: quadratic).
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#\s]*@")
_QUERY_PARAM = re.compile(r"([?&;])([^=&#\s?;]+)=([^&#\s;]*)")
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic)(\s+)([A-Za-z0-9._~+/=\-]{8,})", re.IGNORECASE)
_PLAIN_WORD = re.compile(r"[A-Za-z][a-z]*")  # "Basic authentication" is English, not a token
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def credential_name(name: str) -> bool:
    """Whether a mapping key or query parameter named `name` holds a credential."""
    words = _WORD.findall(str(name))
    return bool(words) and words[-1].lower() in CREDENTIAL_WORDS


def _redact_param(match: re.Match) -> str:
    separator, name, value = match.groups()
    if not value or not credential_name(name):
        return match.group(0)
    return f"{separator}{name}={REDACTED}"


def redact_text(text: str) -> str:
    """`text` with URL user info, credential query values and Bearer/Basic credentials
    replaced by [redacted]; text without them comes back unchanged."""
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if "=" in text:
        text = _QUERY_PARAM.sub(_redact_param, text)
    return _AUTH_SCHEME.sub(_redact_scheme, text)


def _redact_scheme(match: re.Match) -> str:
    scheme, space, credential = match.groups()
    if _PLAIN_WORD.fullmatch(credential):
        return match.group(0)
    return f"{scheme}{space}{REDACTED}"


def redact_credentials(value: Any) -> Any:
    """A JSON-like value (a config dump) with every credential replaced by [redacted]."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_credentials(item) for item in value]
    if isinstance(value, dict):
        return {key: (REDACTED if credential_name(key) and item not in (None, "")
                      else redact_credentials(item)) for key, item in value.items()}
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with credentials out: in a `KEY=VALUE` item (`--set a.api_key=...`,
    also `--set=a.api_key=...`) whose key ends in a credential name everything after that `=`
    goes, and every item goes through `redact_text`."""
    return [_redact_assignment(item) for item in argv]


def _redact_assignment(item: str) -> str:
    parts = item.split("=")
    for at, key in enumerate(parts[:-1]):
        if credential_name(key.rpartition(".")[2]):
            return "=".join(parts[:at + 1]) + "=" + REDACTED
    return redact_text(item)
