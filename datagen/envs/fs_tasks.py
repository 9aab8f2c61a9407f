"""Task templates of the `fs` environment and the final tree each state task expects.

State tasks describe their effect as small operation lists in `params` (moves, deletes,
replacements, appends); `expected_files` applies them to the initial tree, and the checker
compares the result with the agent's tree, so collateral damage fails the task too.
Paths the gold solution uses are found by earlier calls (list_dir, search), never given.
"""

from __future__ import annotations

import random
from typing import Any

from datagen.envs._names import pick, sample
from datagen.envs._toolkit import Draft, gold_call
from datagen.envs.fs_world import SETTINGS, FsWorld, config_line, setting_value

_LABELS = {key: label for key, label, _ in SETTINGS}
_KINDS = {key: kind for key, _, kind in SETTINGS}
_CHANGES = ("fix retry handling (#{n})", "add CSV export", "speed up report generation",
            "drop Python 3.9 support", "rotate API keys", "tidy logging output",
            "handle empty uploads (#{n})", "add health endpoint", "fix crash on login (#{n})",
            "upgrade the database driver", "add dark mode to the admin page",
            "cache exchange rates for {n} seconds", "limit uploads to {n} MB",
            "fix timezone bug in reports (#{n})", "add audit log export")


def _base(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _file_key(w: FsWorld, key: str) -> str:
    return key.upper() if w.fmt == "env" else key


def config_lookup(w: FsWorld, rng: random.Random) -> Draft | None:
    env = pick(rng, list(w.configs))
    settings = w.configs[env]
    flag = next(k for k in settings if k.startswith("enable_"))
    key = pick(rng, [k for k in settings if not k.startswith("enable_")])
    config_dir, flag_text = f"/srv/{w.app}/config", _file_key(w, flag)
    path = f"{config_dir}/{env}.{w.fmt}"
    ask = pick(rng, (
        f"One of the config files of {w.app} turns on `{flag}`. What {_LABELS[key]} does "
        "that same file set?",
        f"Find the {w.app} configuration that enables `{flag}` and tell me its "
        f"`{key}` value.",
        f"Which value does `{key}` have in the {w.app} config file where `{flag}` is "
        "switched on?"))
    gold = [gold_call("list_dir", f"see which config files {w.app} has", path=config_dir),
            gold_call("search", f"find the file that sets {flag}", path=config_dir,
                      text=flag_text),
            gold_call("read_file", f"read {_base(path)} to get its {key}", path=path)]
    return Draft("config_lookup", ask, gold, settings[key], {})


def archive_logs(w: FsWorld, rng: random.Random) -> Draft | None:
    if len(w.logs) < 3:
        return None
    k = 2 + int(rng.random() * (min(4, len(w.logs) - 1) - 1))
    moved, newest_kept = w.logs[-k:], w.logs[-k - 1]
    cutoff = _base(newest_kept)[len(w.app) + 1:-4]  # <app>-YYYY-MM-DD.log
    log_dir = f"/var/log/{w.app}"
    dest = f"{log_dir}/{pick(rng, ('archive', 'old', 'archived'))}"
    ask = pick(rng, (
        f"Move every {w.app} log in {log_dir} that is older than {cutoff} into {dest}/ "
        "(create the folder if needed).",
        f"Archive the logs in {log_dir} dated before {cutoff}: they belong in {dest}. "
        "Newer logs stay where they are.",
        f"Please tidy {log_dir}: logs from before {cutoff} go into {dest}, the rest stays."))
    gold = [gold_call("list_dir", "see the logs and their dates", path=log_dir),
            gold_call("make_dir", f"create {dest}", path=dest)]
    gold += [gold_call("move", f"move {_base(p)} into the archive", source=p, destination=dest)
             for p in moved]
    return Draft("archive_logs", ask, gold, f"Moved {k} logs into {dest}.",
                 {"moves": [[p, f"{dest}/{_base(p)}"] for p in moved]})


def cleanup_temp(w: FsWorld, rng: random.Random) -> Draft | None:
    build = f"/srv/{w.app}/build"
    temps = sorted(p for p in w.files if p.startswith(build) and p.endswith(".tmp"))
    ask = pick(rng, (
        f"Delete every .tmp file under {build}, including its subfolders. Keep everything "
        "else.",
        f"The build folder {build} is full of temporary files (*.tmp). Remove them all, but "
        "nothing else.",
        f"Clean out the *.tmp files anywhere below {build}."))
    gold = [gold_call("list_dir", "look at what the build folder holds", path=build),
            gold_call("search", "find every .tmp file below it", path=build, name_glob="*.tmp")]
    gold += [gold_call("delete", f"delete {_base(p)}", path=p) for p in temps]
    return Draft("cleanup_temp", ask, gold, f"Deleted {len(temps)} temporary files.",
                 {"deletes": temps})


def fix_setting(w: FsWorld, rng: random.Random) -> Draft | None:
    env = pick(rng, list(w.configs))
    key = pick(rng, [k for k in w.configs[env] if not k.startswith("enable_")])
    old = w.configs[env][key]
    new = setting_value(rng, _KINDS[key])
    if new == old:
        return None
    config_dir, path = f"/srv/{w.app}/config", f"/srv/{w.app}/config/{env}.{w.fmt}"
    old_line, new_line = config_line(w.fmt, _file_key(w, key), old), \
        config_line(w.fmt, _file_key(w, key), new)
    ask = pick(rng, (
        f"Set the {_LABELS[key]} (`{key}`) to {new} in the {env} config of {w.app}.",
        f"The {env} deployment of {w.app} has the wrong `{key}`. Change it to {new}.",
        f"Update {w.app}'s {env} configuration so that `{key}` is {new}; leave other "
        "settings alone."))
    gold = [gold_call("search", f"find where {key} is set", path=config_dir,
                      text=_file_key(w, key)),
            gold_call("read_file", f"read the {env} config before editing", path=path),
            gold_call("edit_file", f"change {key} to {new}", path=path, old_text=old_line,
                      new_text=new_line),
            gold_call("read_file", "confirm the new value is in place", path=path)]
    return Draft("fix_setting", ask, gold, f"Set {key} to {new} in {_base(path)}.",
                 {"replace": [[path, old_line, new_line]]})


def copy_setting(w: FsWorld, rng: random.Random) -> Draft | None:
    if len(w.configs) < 2:
        return None
    source, target = sample(rng, list(w.configs), 2)
    keys = [k for k in w.configs[source] if not k.startswith("enable_")
            and w.configs[source][k] != w.configs[target].get(k)]
    if not keys:
        return None
    key = pick(rng, keys)
    config_dir = f"/srv/{w.app}/config"
    src, dst = f"{config_dir}/{source}.{w.fmt}", f"{config_dir}/{target}.{w.fmt}"
    file_key = _file_key(w, key)
    old_line = config_line(w.fmt, file_key, w.configs[target][key])
    new_line = config_line(w.fmt, file_key, w.configs[source][key])
    ask = pick(rng, (
        f"Make {w.app}'s {target} config use the same `{key}` as {source}.",
        f"Copy the {_LABELS[key]} setting from the {source} configuration of {w.app} into "
        f"its {target} configuration.",
        f"{target.title()} should match {source} on `{key}`. Please fix the {target} config "
        f"of {w.app}."))
    gold = [gold_call("list_dir", "see which config files exist", path=config_dir),
            gold_call("read_file", f"read the {source} value of {key}", path=src),
            gold_call("read_file", f"read the {target} config", path=dst),
            gold_call("edit_file", f"set {key} in {_base(dst)} to the {source} value",
                      path=dst, old_text=old_line, new_text=new_line)]
    return Draft("copy_setting", ask, gold, f"{target} now uses the {source} {key}.",
                 {"replace": [[dst, old_line, new_line]]})


def count_level(w: FsWorld, rng: random.Random) -> Draft | None:
    level = pick(rng, ("ERROR", "WARNING", "ERROR", "INFO", "DEBUG"))
    recent = w.logs[:1 + int(rng.random() * 2)]
    count = sum(w.files[p][0].count(f" {level} ") for p in recent)
    log_dir = f"/var/log/{w.app}"
    which = "most recent log" if len(recent) == 1 else "two most recent logs"
    ask = pick(rng, (
        f"How many {level} lines are in the {which} of {w.app} (in {log_dir})?",
        f"Count the {level} entries in {w.app}'s {which}.",
        f"In {log_dir}, how many lines at level {level} does the {which} contain?"))
    gold = [gold_call("list_dir", "find the newest logs", path=log_dir)]
    gold += [gold_call("search", f"find the {level} lines in {_base(p)}", path=p,
                       text=f" {level} ") for p in recent]
    return Draft("count_level", ask, gold, str(count), {})


def file_note(w: FsWorld, rng: random.Random) -> Draft | None:
    notes_dir = f"/home/{w.user}/notes"
    notes = [p for p in w.files if p.startswith(notes_dir + "/")]
    note = pick(rng, notes)
    code = w.files[note][0].rsplit("(ticket ", 1)[1][:-2]
    if sum(code in w.files[p][0] for p in notes) != 1:
        return None
    dest = f"{notes_dir}/{pick(rng, ('done', 'closed', 'archive'))}"
    moved = f"{dest}/{_base(note)}"
    ask = pick(rng, (
        f"A note in {notes_dir} mentions ticket {code}. Move it into {dest} (create the "
        "folder) and add a last line `Status: resolved` to it.",
        f"Ticket {code} is resolved. Find the note under {notes_dir} that mentions it, move "
        f"it to {dest}/ and append the line `Status: resolved`."))
    gold = [gold_call("search", f"find the note that mentions {code}", path=notes_dir,
                      text=code),
            gold_call("make_dir", f"create {dest}", path=dest),
            gold_call("move", f"move {_base(note)} into {dest}", source=note, destination=dest),
            gold_call("write_file", "append the status line", path=moved,
                      content="Status: resolved\n", mode="append")]
    return Draft("file_note", ask, gold, f"Moved {_base(note)} to {dest} and marked it "
                 "resolved.", {"moves": [[note, moved]],
                               "appends": [[moved, "Status: resolved\n"]]})


def changelog_entry(w: FsWorld, rng: random.Random) -> Draft | None:
    root = f"/srv/{w.app}"
    change = pick(rng, _CHANGES).format(n=100 + int(rng.random() * 900))
    line = f"- {w.version}: {change}"
    ask = pick(rng, (
        f"Add a line to {root}/CHANGELOG.md for the current version of {w.app}, in the "
        f"existing format, saying: {change}.",
        f"Record '{change}' in {w.app}'s changelog under the version the project is "
        "currently at (same style as the existing entries).",
        f"Append a changelog entry for {w.app}'s current version: {change}."))
    changelog = f"{root}/CHANGELOG.md"
    gold = [gold_call("list_dir", "find the file that holds the version number", path=root),
            gold_call("read_file", "read the current version", path=w.version_file),
            gold_call("read_file", "see the format of the changelog", path=changelog),
            gold_call("write_file", f"append the entry for {w.version}", path=changelog,
                      content=line + "\n", mode="append")]
    return Draft("changelog_entry", ask, gold, f"Added '{line}' to the changelog.",
                 {"appends": [[changelog, line + "\n"]]})


def largest_dataset(w: FsWorld, rng: random.Random) -> Draft | None:
    data = f"/srv/{w.app}/data"
    csvs = sorted(p for p in w.files if p.startswith(data + "/"))
    most = rng.random() < 0.6
    target = (max if most else min)(csvs, key=lambda p: w.files[p][0].count("\n"))
    word = "most" if most else "fewest"
    ask = pick(rng, (
        f"Which CSV file in {data} has the {word} data rows? Answer with the file name.",
        f"Of the datasets in {data}, which one holds the {word} records (file name only)?",
        f"Look at the CSV files under {data} and tell me which has the {word} rows."))
    gold = [gold_call("list_dir", "see which datasets exist", path=data)]
    gold += [gold_call("stat", f"count the lines of {_base(p)}", path=p) for p in csvs]
    return Draft("largest_dataset", ask, gold, _base(target), {})


def organise_downloads(w: FsWorld, rng: random.Random) -> Draft | None:
    downloads = f"/home/{w.user}/downloads"
    by_ext: dict[str, list[str]] = {}
    for p in w.files:
        if p.startswith(downloads + "/"):
            by_ext.setdefault(p.rsplit(".", 1)[1], []).append(p)
    choices = [ext for ext, paths in by_ext.items() if len(paths) >= 2]
    if not choices:
        return None
    ext = pick(rng, choices)
    dest = f"/home/{w.user}/documents/{pick(rng, (w.today[:4], ext, 'inbox'))}"
    ask = pick(rng, (
        f"Move all .{ext} files from {downloads} into {dest} (create it if needed).",
        f"Sort my downloads: every {ext.upper()} file in {downloads} belongs in {dest}/.",
        f"Please put the .{ext} files that are sitting in {downloads} into {dest}."))
    gold = [gold_call("search", f"find the .{ext} files", path=downloads,
                      name_glob=f"*.{ext}"),
            gold_call("make_dir", f"create {dest}", path=dest)]
    gold += [gold_call("move", f"move {_base(p)}", source=p, destination=dest)
             for p in by_ext[ext]]
    return Draft("organise_downloads", ask, gold, f"Moved {len(by_ext[ext])} files to {dest}.",
                 {"moves": [[p, f"{dest}/{_base(p)}"] for p in by_ext[ext]]})


TEMPLATES = (config_lookup, archive_logs, cleanup_temp, fix_setting, copy_setting, count_level,
             file_note, changelog_entry, largest_dataset, organise_downloads)


def expected_files(world: FsWorld, params: dict[str, Any]) -> dict[str, str]:
    """Path -> content after a correct solution of a state task."""
    files = {path: content for path, (content, _) in world.files.items()}
    for source, destination in params.get("moves", ()):
        files[destination] = files.pop(source)
    for path in params.get("deletes", ()):
        del files[path]
    for path, old, new in params.get("replace", ()):
        files[path] = files[path].replace(old, new, 1)
    for path, text in params.get("appends", ()):
        files[path] = files[path] + text
    return files
