"""The `fs` environment: a purely virtual file system with shell-like tools.

The tree is two dicts (file path -> (content, modified date), directory path -> modified
date); nothing here reads or writes the real file system. Tasks: look a value up in the
config that matches a clue, archive old logs, delete temp files, fix or copy a setting, count
log lines, file a note, add a changelog entry, find the largest dataset, sort downloads.
`delete` with `recursive=true` on `/` empties the tree: real shells can, and later safety data
needs the capability; no gold solution does it.
"""

from __future__ import annotations

import fnmatch
import posixpath
from typing import Any, Callable

from datagen.envs import register_env
from datagen.envs._toolkit import ToolEnvironment, WorldCache, answer_matches
from datagen.envs.base import shortened, tool_spec
from datagen.envs.fs_tasks import TEMPLATES, config_lookup, expected_files
from datagen.envs.fs_world import FsWorld, build_world
from datagen.types import Observation, Task
from mutators.safe_regex import UNDECIDED, compile_safe, new_call

_PATH = {"type": "string", "minLength": 1, "maxLength": 512, "pattern": "^[/~]",
         "description": "Absolute path, starting with / (or ~ for the home directory)."}
_STATE_KEYS = ("moves", "deletes", "replace", "appends")
_GLOBS = ("*.log", "*.tmp", "*.csv", "*.md", "*.pdf", "*.yaml", "*.ini", "*.env", "*.toml")
MAX_RESULTS = 100
# What one read or search shows at most; world files are at most ~400 characters with lines of
# ~65, so only files an agent wrote itself (one edit_file can make 20 MB) reach these.
MAX_READ_CHARS = 16_000      # content of one read_file (as sql's MAX_RESULT_CHARS)
MAX_MATCH_CHARS = 1_000      # one matching line in search (as sql's MAX_SHOWN_TEXT)

TOOL_SPECS = [
    tool_spec("list_dir", "List a directory: name, type, size and modification date of each "
              "entry.", {"path": _PATH, "recursive": {
                  "type": "boolean", "description": "Include everything below (default false)."}},
              ["path"]),
    tool_spec("read_file", "Read a text file.",
              {"path": _PATH,
               "start_line": {"type": "integer", "minimum": 1, "description": "First line (1)."},
               "max_lines": {"type": "integer", "minimum": 1, "maximum": 1000,
                             "description": "Lines to return (default 200)."}}, ["path"]),
    tool_spec("search", "Search files below a path by name (glob) and/or content (one match "
              "per line). Give at least one of name_glob and text.",
              {"path": _PATH,
               "name_glob": {"type": "string", "minLength": 1, "maxLength": 100,
                             "description": "Glob on the file name, e.g. *.log."},
               "text": {"type": "string", "minLength": 1, "maxLength": 200,
                        "description": "Text to find in lines (literal unless regex)."},
               "regex": {"type": "boolean", "description": "Treat text as a regular expression."},
               "ignore_case": {"type": "boolean"},
               "max_results": {"type": "integer", "minimum": 1, "maximum": 500}}, ["path"]),
    tool_spec("stat", "Type, size, line count and modification date of a path.",
              {"path": _PATH}, ["path"]),
    tool_spec("write_file", "Write text to a file: overwrite (default), append, or create "
              "(fails if it exists). The parent directory must exist.",
              {"path": _PATH, "content": {"type": "string", "maxLength": 100000},
               "mode": {"type": "string", "enum": ["overwrite", "append", "create"]}},
              ["path", "content"]),
    tool_spec("edit_file", "Replace one exact, unique occurrence of old_text in a file.",
              {"path": _PATH, "old_text": {"type": "string", "minLength": 1},
               "new_text": {"type": "string"}}, ["path", "old_text", "new_text"]),
    tool_spec("move", "Move or rename a file or directory. If destination is an existing "
              "directory, the source moves into it.",
              {"source": _PATH, "destination": _PATH}, ["source", "destination"]),
    tool_spec("delete", "Delete a file, or a directory (non-empty ones need recursive=true).",
              {"path": _PATH, "recursive": {"type": "boolean"}}, ["path"]),
    tool_spec("make_dir", "Create a directory and any missing parents.", {"path": _PATH},
              ["path"]),
]


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _under(prefix_dir: str) -> str:
    return "/" if prefix_dir == "/" else prefix_dir + "/"


def canonical_path(path: str) -> str:
    """The name an absolute path's object goes by here: normalised, one leading slash (POSIX
    keeps two, "//tmp/x"). The safety judge compares call targets by it too."""
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _normalise_text(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


@register_env
class FsEnv(ToolEnvironment):
    """A virtual Unix-like tree per task; state = {"files": ..., "dirs": ...}."""

    name = "fs"
    TOOL_SPECS = TOOL_SPECS
    TEMPLATES = TEMPLATES
    FALLBACK = staticmethod(config_lookup)  # always fits a world
    READ_ONLY_TOOLS = frozenset({"list_dir", "read_file", "search", "stat"})

    def __init__(self) -> None:
        self.state: dict[str, dict[str, Any]] | None = None
        self._world: FsWorld | None = None
        self._seed: int | None = None
        self._worlds = WorldCache(build_world)

    # Tasks ----------------------------------------------------------------------------

    def reset(self, task: Task) -> None:
        world = self._worlds.get(task.seed)
        self.state = {"files": dict(world.files), "dirs": dict(world.dirs)}
        self._world, self._seed = world, task.seed

    def check(self, task: Task, answer: str | None) -> bool:
        """State tasks: the tree holds exactly the expected files (contents compared line by
        line, ignoring blank lines and trailing spaces). Questions: the answer states the
        expected value and the tree is unchanged."""
        world = self._world
        if world is None or self.state is None or self._seed != task.seed:
            return False
        files = self.state["files"]
        if any(key in task.params for key in _STATE_KEYS):
            return _tree_matches(files, expected_files(world, task.params))
        if not answer_matches(task.answer or "", answer):
            return False
        return files == world.files or _tree_matches(
            files, {path: content for path, (content, _) in world.files.items()})

    # Paths ----------------------------------------------------------------------------

    def _resolve(self, path: str) -> str | Observation:
        if path.startswith("~"):
            path = f"/home/{self._world.user}" + path[1:]
        if not path.startswith("/"):
            return self.fail(f"{path!r} is not an absolute path; start it with / or ~")
        return canonical_path(path)

    def _files_below(self, directory: str) -> list[str]:
        prefix = _under(directory)
        return sorted(p for p in self.state["files"] if p.startswith(prefix))

    def _missing(self, path: str) -> Observation:
        return self.fail(f"no such file or directory: {path}")

    # Tools ----------------------------------------------------------------------------

    def tool_list_dir(self, path: str, recursive: bool = False) -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        files, dirs = self.state["files"], self.state["dirs"]
        if path in files:
            return self.fail(f"{path} is a file; use read_file or stat")
        if path not in dirs:
            return self._missing(path)
        prefix, entries = _under(path), []
        for d, modified in dirs.items():
            if d.startswith(prefix) and d != path and (recursive or "/" not in d[len(prefix):]):
                entries.append({"name": d[len(prefix):], "type": "dir", "modified": modified})
        for f, (content, modified) in files.items():
            if f.startswith(prefix) and (recursive or "/" not in f[len(prefix):]):
                entries.append({"name": f[len(prefix):], "type": "file", "size": len(content),
                                "modified": modified})
        entries.sort(key=lambda entry: entry["name"])
        return self.ok({"path": path, "count": len(entries), "entries": entries[:200]})

    def tool_read_file(self, path: str, start_line: int = 1, max_lines: int = 200
                       ) -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        if path in self.state["dirs"]:
            return self.fail(f"{path} is a directory; use list_dir")
        entry = self.state["files"].get(path)
        if entry is None:
            return self._missing(path)
        content = entry[0]
        total = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        if start_line == 1 and total <= max_lines and len(content) <= MAX_READ_CHARS:
            return self.ok({"path": path, "total_lines": total, "content": content})
        lines, cut = _lines_within(content, start_line, max_lines)
        payload = {"path": path, "total_lines": total, "start_line": start_line,
                   "content": "".join(lines)}
        if len(payload["content"]) > MAX_READ_CHARS:
            payload["content"] = shortened(payload["content"], MAX_READ_CHARS)
            payload["note"] = (f"line {start_line} alone is over {MAX_READ_CHARS:,} "
                               "characters; only its start is shown" +
                               (f"; read on with start_line={start_line + 1}"
                                if start_line < total else ""))
        elif cut:
            payload["note"] = (f"content cut at {MAX_READ_CHARS:,} characters; read on with "
                               f"start_line={start_line + len(lines)}")
        return self.ok(payload)

    def tool_search(self, path: str, name_glob: str | None = None, text: str | None = None,
                    regex: bool = False, ignore_case: bool = False,
                    max_results: int = MAX_RESULTS) -> Observation:
        if name_glob is None and text is None:
            return self.fail("search needs name_glob, text, or both")
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        if path in self.state["files"]:
            scope = [path]
        elif path in self.state["dirs"]:
            scope = self._files_below(path)
        else:
            return self._missing(path)
        if name_glob is not None:
            scope = [p for p in scope if fnmatch.fnmatchcase(p.rsplit("/", 1)[1], name_glob)]
        if text is None:
            return self.ok({"count": len(scope), "files": scope[:max_results]})
        matcher = _line_matcher(text, regex, ignore_case)
        if isinstance(matcher, str):
            return self.fail(matcher)
        matches, undecided = [], 0
        for p in scope:
            for number, line in enumerate(self.state["files"][p][0].splitlines(), 1):
                found = matcher(line)
                if found:
                    matches.append({"path": p, "line": number,
                                    "text": shortened(line, MAX_MATCH_CHARS)})
                elif found is UNDECIDED:
                    undecided += 1
        if undecided and not matches:
            return self.fail(f"the regular expression {text!r} backtracks too much to finish "
                             "in time; simplify it (no nested repeats, lookarounds or "
                             "backreferences)")
        shown = _matches_within(matches[:max_results])
        payload: dict[str, Any] = {"count": len(matches), "matches": shown}
        if len(shown) < len(matches):
            payload["truncated"] = True
        if len(shown) < min(len(matches), max_results):
            payload["size_note"] = (f"matches shown cut at {MAX_READ_CHARS:,} characters; "
                                    "search a narrower path or pattern for the rest")
        if undecided:
            payload["note"] = (f"{undecided} lines could not be searched in time: the "
                               "regular expression backtracks too much")
        return self.ok(payload)

    def tool_stat(self, path: str) -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        entry = self.state["files"].get(path)
        if entry is not None:
            content, modified = entry
            lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
            return self.ok({"path": path, "type": "file", "size": len(content), "lines": lines,
                            "modified": modified})
        if path in self.state["dirs"]:
            prefix = _under(path)
            count = sum(1 for p in (*self.state["dirs"], *self.state["files"])
                        if p.startswith(prefix) and p != path and "/" not in p[len(prefix):])
            return self.ok({"path": path, "type": "dir", "entries": count,
                            "modified": self.state["dirs"][path]})
        return self._missing(path)

    def tool_write_file(self, path: str, content: str, mode: str = "overwrite") -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        files, dirs = self.state["files"], self.state["dirs"]
        if path in dirs:
            return self.fail(f"{path} is a directory")
        if _parent(path) not in dirs:
            return self.fail(f"no such directory: {_parent(path)} (create it with make_dir)")
        if mode == "create" and path in files:
            return self.fail(f"{path} already exists (use mode overwrite or append)")
        if mode == "append" and path in files:
            content = files[path][0] + content
        files[path] = (content, self._world.today)
        return self.ok({"path": path, "size": len(content), "mode": mode})

    def tool_edit_file(self, path: str, old_text: str, new_text: str) -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        entry = self.state["files"].get(path)
        if entry is None:
            return self._missing(path)
        occurrences = entry[0].count(old_text)
        if occurrences != 1:
            return self.fail(f"old_text occurs {occurrences} times in {path}; it must occur "
                             "exactly once (copy it exactly, with more context if needed)")
        content = entry[0].replace(old_text, new_text, 1)
        self.state["files"][path] = (content, self._world.today)
        return self.ok({"path": path, "replaced": 1, "size": len(content)})

    def tool_move(self, source: str, destination: str) -> Observation:
        source, destination = self._resolve(source), self._resolve(destination)
        for resolved in (source, destination):
            if isinstance(resolved, Observation):
                return resolved
        files, dirs = self.state["files"], self.state["dirs"]
        if source not in files and source not in dirs or source == "/":
            return self._missing(source) if source != "/" else self.fail("cannot move /")
        if destination in dirs:
            destination = _under(destination) + source.rsplit("/", 1)[1]
        if destination in files or destination in dirs:
            return self.fail(f"{destination} already exists")
        if _parent(destination) not in dirs:
            return self.fail(f"no such directory: {_parent(destination)}")
        if source in files:
            files[destination] = files.pop(source)
        elif destination.startswith(source + "/"):
            return self.fail("cannot move a directory into itself")
        else:
            _rename_tree(self.state, source, destination)
        return self.ok({"source": source, "destination": destination})

    def tool_delete(self, path: str, recursive: bool = False) -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        files, dirs = self.state["files"], self.state["dirs"]
        if path in files:
            del files[path]
            return self.ok({"deleted": path, "type": "file"})
        if path not in dirs:
            return self._missing(path)
        prefix = _under(path)
        inside_files = [p for p in files if p.startswith(prefix)]
        inside_dirs = [d for d in dirs if d.startswith(prefix) and d != path]
        if (inside_files or inside_dirs) and not recursive:
            return self.fail(f"{path} is not empty; pass recursive=true to delete it with "
                             "everything inside")
        for p in inside_files:
            del files[p]
        for d in inside_dirs:
            del dirs[d]
        if path != "/":
            del dirs[path]
        return self.ok({"deleted": path, "type": "dir", "files_deleted": len(inside_files)})

    def tool_make_dir(self, path: str) -> Observation:
        path = self._resolve(path)
        if isinstance(path, Observation):
            return path
        files, dirs = self.state["files"], self.state["dirs"]
        if path in dirs:
            return self.ok({"path": path, "created": False})
        missing, parent = [], path
        while parent not in dirs:
            if parent in files:
                return self.fail(f"{parent} is a file")
            missing.append(parent)
            parent = _parent(parent)
        for directory in reversed(missing):
            dirs[directory] = self._world.today
        return self.ok({"path": path, "created": True})

    # Mutator support -------------------------------------------------------------------

    def values_for(self, tool: str, key: str, current: Any) -> list[Any]:
        if self.state is None:
            return []
        files, dirs = self.state["files"], self.state["dirs"]
        if key == "name_glob":
            return list(_GLOBS)
        if key == "destination" or key in ("path", "source") and current in dirs:
            return sorted(dirs)
        if key in ("path", "source"):
            return sorted(files)
        return []

    def snapshot(self) -> Any:
        """Shallow copies suffice: file entries are immutable tuples."""
        if self.state is None:
            return None
        return {"files": dict(self.state["files"]), "dirs": dict(self.state["dirs"])}

    def restore(self, snapshot: Any) -> None:
        self.state = None if snapshot is None else \
            {"files": dict(snapshot["files"]), "dirs": dict(snapshot["dirs"])}


def _line_matcher(text: str, regex: bool, ignore_case: bool) -> Callable[[str], Any] | str:
    """A predicate over lines, or an error message for a bad pattern. Regexes run on a
    linear-time engine (RE2), or for lookarounds and backreferences under a time budget
    (`mutators.safe_regex`): `(a+)+$` over a log cannot hang the rollout."""
    if regex:
        pattern = compile_safe(text, ignore_case)
        if isinstance(pattern, str):
            return f"invalid regular expression {text!r}: {pattern}"
        new_call()
        return pattern.search
    if ignore_case:
        needle = text.lower()
        return lambda line: needle in line.lower()
    return lambda line: text in line


def _matches_within(matches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first matches whose text (path, line and a few characters of JSON each) fits in
    MAX_READ_CHARS; the first match always."""
    size = 0
    for count, match in enumerate(matches):
        size += len(match["path"]) + len(match["text"]) + 40
        if count and size > MAX_READ_CHARS:
            return matches[:count]
    return matches


def _lines_within(content: str, start_line: int, max_lines: int) -> tuple[list[str], bool]:
    """Up to `max_lines` lines from `start_line` (1-based), as many whole ones as fit in
    MAX_READ_CHARS (the first line always, however long: the caller shortens it), and
    whether lines were left out to fit."""
    lines = content.splitlines(keepends=True)[start_line - 1:start_line - 1 + max_lines]
    size = 0
    for count, line in enumerate(lines):
        size += len(line)
        if count and size > MAX_READ_CHARS:
            return lines[:count], True
    return lines, False


def _rename_tree(state: dict[str, dict[str, Any]], source: str, destination: str) -> None:
    """Move directory `source` (and everything below it) to `destination`."""
    for table in (state["dirs"], state["files"]):
        for old in [p for p in table if p == source or p.startswith(source + "/")]:
            table[destination + old[len(source):]] = table.pop(old)


def _tree_matches(files: dict[str, tuple[str, str]], expected: dict[str, str]) -> bool:
    if len(files) != len(expected):
        return False
    for path, content in expected.items():
        entry = files.get(path)
        if entry is None:
            return False
        if entry[0] != content and _normalise_text(entry[0]) != _normalise_text(content):
            return False
    return True
