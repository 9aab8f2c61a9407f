"""The procedural world of the `fs` environment: a small Unix-like tree held in two dicts.

A world is a service checkout under /srv/<app> (configs in one of four formats, data CSVs,
build leftovers, a version file and a changelog), its logs under /var/log/<app>, and a user's
home with notes and downloads. Contents are cut from line pools built once per process, so a
world costs a few dozen string joins; it is rebuilt from the task seed and never stored.
Nothing here touches the real file system.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from datagen.envs._names import APP_NAMES, CITIES, FIRST_NAMES, ISO_DAYS, pick, sample, \
    today_index

ENVIRONMENTS = ("development", "staging", "production", "testing")
CONFIG_FORMATS = ("yaml", "ini", "env", "toml")
SETTINGS = (  # key, label, value kind
    ("db_host", "database host", "host"), ("db_port", "database port", "port"),
    ("cache_ttl", "cache TTL in seconds", "seconds"), ("max_workers", "worker count", "small"),
    ("log_level", "log level", "level"), ("api_timeout", "API timeout in seconds", "seconds"),
    ("region", "deployment region", "region"), ("queue_name", "queue name", "queue"),
    ("retry_limit", "retry limit", "small"), ("smtp_host", "SMTP host", "host"),
)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_MESSAGES = ("request served in {n} ms", "cache miss for key user:{n}", "retrying job {n}",
             "payment gateway timeout after {n} ms", "worker {n} started",
             "connection reset by peer (attempt {n})", "disk usage at {n}%",
             "scheduled export {n} finished", "invalid token for session {n}",
             "queue depth {n}", "slow query took {n} ms", "health check ok ({n} ms)")
_NOTE_LINES = ("Follow up with the vendor about the renewal.", "Draft the quarterly summary.",
               "Check the backup rotation on the staging box.", "Ask ops about the new VPN.",
               "Review the on-call rota for next month.", "Book the team offsite venue.",
               "Update the onboarding checklist.", "Clean up stale feature flags.")
_NOTE_TOPICS = ("standup", "ideas", "todo", "meeting", "retro", "planning", "reading", "ops")
_DATASETS = ("customers", "invoices", "events", "inventory", "signups", "refunds", "payments")
_DOWNLOADS = (("report", "pdf"), ("invoice", "pdf"), ("slides", "pdf"), ("manual", "pdf"),
              ("photo", "jpg"), ("archive", "zip"), ("export", "csv"), ("contract", "pdf"),
              ("scan", "pdf"), ("setup", "sh"))
_FLAGS = ("dark_mode", "beta_search", "new_checkout", "audit_trail", "bulk_export", "sso_login",
          "smart_retry", "rate_limits", "geo_routing", "live_chat", "price_alerts")
_BUILD_OUTPUTS = ("app.bin", "main.o", "util.o", "bundle.js", "index.html")


def _line_pool(seed: int, size: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{int(rng.random() * 24):02d}:{int(rng.random() * 60):02d}:"
            f"{int(rng.random() * 60):02d} {pick(rng, LEVELS)} "
            + pick(rng, _MESSAGES).format(n=int(rng.random() * 900) + 10) + "\n"
            for _ in range(size)]


def _csv_pool(seed: int, size: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{pick(rng, CITIES)},{int(rng.random() * 1000)}\n" for _ in range(size)]


# Built once per process; slices of them fill logs and datasets.
LOG_POOL = _line_pool(7, 4096)
CSV_POOL = _csv_pool(11, 4096)


@dataclass(slots=True)
class FsWorld:
    """The initial tree plus the facts templates need (never mutated after building)."""

    files: dict[str, tuple[str, str]]  # path -> (content, modified YYYY-MM-DD)
    dirs: dict[str, str]               # path -> modified
    today: str
    user: str
    app: str
    fmt: str
    configs: dict[str, dict[str, str]]  # environment -> key -> value
    logs: list[str]                     # log paths, newest first
    version_file: str
    version: str


def _value_pool(kind: str) -> tuple[str, ...]:
    if kind == "host":
        return tuple(f"{prefix}-{n}.{zone}" for prefix in ("db", "pg", "mysql", "mail", "cache")
                     for n in range(10, 40) for zone in ("internal", "corp", "lan"))
    if kind == "port":
        return ("5432", "3306", "6379", "8080", "9000", "5433", "27017", "8443")
    if kind == "seconds":
        return ("5", "10", "15", "30", "45", "60", "90", "120", "300", "600")
    if kind == "small":
        return tuple(str(n) for n in range(2, 32))
    if kind == "level":
        return ("debug", "info", "warning", "error")
    if kind == "region":
        return ("eu-west-1", "us-east-2", "ap-south-1", "eu-central-1", "us-west-2")
    return tuple(f"{a}-{b}" for a in ("jobs", "mail", "events", "exports")
                 for b in ("main", "bulk", "v2"))


_VALUE_POOLS = {kind: _value_pool(kind) for _, _, kind in SETTINGS}


def setting_value(rng: random.Random, kind: str) -> str:
    """A plausible value for a setting of `kind` (host, port, seconds, ...)."""
    pool = _VALUE_POOLS[kind]
    return pool[int(rng.random() * len(pool))]


def config_line(fmt: str, key: str, value: str) -> str:
    if fmt == "yaml":
        return f"{key}: {value}"
    if fmt == "ini":
        return f"{key} = {value}"
    if fmt == "env":
        return f"{key.upper()}={value}"
    return f'{key} = "{value}"'


def config_text(fmt: str, env: str, settings: dict[str, str]) -> str:
    header = {"yaml": f"# {env} settings", "ini": "[server]", "env": f"# {env}",
              "toml": "[server]"}[fmt]
    return "\n".join([header] + [config_line(fmt, k, v) for k, v in settings.items()]) + "\n"


def _add(files: dict, path: str, content: str, modified: str) -> None:
    files[path] = (content, modified)  # every directory is created up front in build_world


def build_world(rng: random.Random) -> FsWorld:
    """Draw a tree from `rng` (the task seed's generator, consumed first)."""
    today = today_index(rng)
    app, user = pick(rng, APP_NAMES), pick(rng, FIRST_NAMES).lower()
    fmt = pick(rng, CONFIG_FORMATS)
    files: dict[str, tuple[str, str]] = {}
    root, home = f"/srv/{app}", f"/home/{user}"
    dirs = dict.fromkeys(("/", "/home", home, f"{home}/downloads", f"{home}/notes", "/srv",
                          root, f"{root}/build", f"{root}/build/cache", f"{root}/config",
                          f"{root}/data", "/var", "/var/log", f"/var/log/{app}"),
                         ISO_DAYS[today - 400])
    configs = _add_configs(rng, files, root, fmt, today)
    logs = _add_logs(rng, files, app, today)
    _add_data(rng, files, root, today)
    version_file, version = _add_release_files(rng, files, root, app, today)
    _add_home(rng, files, home, today)
    return FsWorld(files, dirs, ISO_DAYS[today], user, app, fmt, configs, logs,
                   version_file, version)


def _add_configs(rng: random.Random, files: dict, root: str, fmt: str,
                 today: int) -> dict[str, dict[str, str]]:
    keys = sample(rng, SETTINGS, 6)
    envs = sample(rng, ENVIRONMENTS, 2 + int(rng.random() * 2))
    flags = sample(rng, _FLAGS, len(envs))
    configs: dict[str, dict[str, str]] = {}
    for env, flag in zip(envs, flags):
        settings = {key: setting_value(rng, kind) for key, _, kind in keys}
        settings[f"enable_{flag}"] = "true"
        configs[env] = settings
        _add(files, f"{root}/config/{env}.{fmt}", config_text(fmt, env, settings),
             ISO_DAYS[today - 5 - int(rng.random() * 60)])
    return configs


def _add_logs(rng: random.Random, files: dict, app: str, today: int) -> list[str]:
    logs, day = [], today - int(rng.random() * 3)
    for _ in range(4 + int(rng.random() * 4)):
        date, n = ISO_DAYS[day], 4 + int(rng.random() * 5)
        start = int(rng.random() * (len(LOG_POOL) - n))
        path = f"/var/log/{app}/{app}-{date}.log"
        _add(files, path, "".join(LOG_POOL[start:start + n]), date)
        logs.append(path)
        day -= 1 + int(rng.random() * 12)
    return logs


def _add_data(rng: random.Random, files: dict, root: str, today: int) -> None:
    counts = sample(rng, range(2, 16), 3 + int(rng.random() * 2))
    for name, rows in zip(sample(rng, _DATASETS, len(counts)), counts):
        start = int(rng.random() * (len(CSV_POOL) - rows))
        _add(files, f"{root}/data/{name}.csv",
             "city,amount\n" + "".join(CSV_POOL[start:start + rows]),
             ISO_DAYS[today - int(rng.random() * 30)])
    for i in range(2 + int(rng.random() * 3)):
        folder = "build" if i % 2 == 0 else "build/cache"
        _add(files, f"{root}/{folder}/{pick(rng, ('tmp', 'job', 'ld', 'cc'))}{i}"
             f"{int(rng.random() * 9000) + 1000}.tmp", "scratch\n", ISO_DAYS[today - i])
    for name in sample(rng, _BUILD_OUTPUTS, 2):
        _add(files, f"{root}/build/{name}", f"{name} build output\n", ISO_DAYS[today - 1])


def _add_release_files(rng: random.Random, files: dict, root: str, app: str,
                       today: int) -> tuple[str, str]:
    major, minor, patch = int(rng.random() * 4), int(rng.random() * 20), int(rng.random() * 10)
    version, old = f"{major}.{minor}.{patch + 1}", f"{major}.{minor}.{patch}"
    kind = int(rng.random() * 3)
    if kind == 0:
        path, text = f"{root}/VERSION", f"{version}\n"
    elif kind == 1:
        path, text = f"{root}/pyproject.toml", \
            f'[project]\nname = "{app}"\nversion = "{version}"\nrequires-python = ">=3.10"\n'
    else:
        path, text = f"{root}/package.json", \
            f'{{\n  "name": "{app}",\n  "version": "{version}",\n  "private": true\n}}\n'
    _add(files, path, text, ISO_DAYS[today - 2])
    _add(files, f"{root}/CHANGELOG.md", f"# Changelog\n\n- {old}: initial release\n",
         ISO_DAYS[today - 40])
    _add(files, f"{root}/README.md", f"# {app}\n\nService code for {app}.\n",
         ISO_DAYS[today - 90])
    return path, version


def _add_home(rng: random.Random, files: dict, home: str, today: int) -> None:
    for topic in sample(rng, _NOTE_TOPICS, 3 + int(rng.random() * 2)):
        lines = sample(rng, _NOTE_LINES, 2)
        code = f"{pick(rng, ('OPS', 'BUG', 'SEC', 'FIN'))}-{int(rng.random() * 9000) + 1000}"
        _add(files, f"{home}/notes/{topic}.md",
             f"# {topic.title()}\n\n- {lines[0]}\n- {lines[1]} (ticket {code})\n",
             ISO_DAYS[today - int(rng.random() * 20)])
    for stem, ext in sample(rng, _DOWNLOADS, 4 + int(rng.random() * 3)):
        _add(files, f"{home}/downloads/{stem}-{int(rng.random() * 90) + 10}.{ext}",
             f"binary {ext} data\n", ISO_DAYS[today - int(rng.random() * 50)])
