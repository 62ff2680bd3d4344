"""Document permissions: which principals may read each file, per indexed root.

A root's permissions come from one of three sources (``quarry index --acl-rules FILE`` /
``--acl posix`` / ``--acl none``), remembered in the catalog (``acl_roots``) so that a later run
without the flags keeps applying them:

- ``rules``: a YAML list of ``{path: GLOB, principals: [...]}``; the first rule whose glob matches
  the file's path under the root decides. Globs are gitignore-style (pathspec's ``gitwildmatch``,
  the matcher of ``.quarryignore``): ``hr/**`` is everything under ``hr``, ``*.md`` a Markdown file
  at any depth, ``/*.md`` one at the top, ``**`` everything. A glob holding ``://`` is matched
  against the document's whole path or URL instead (``*`` then matches ``/`` too). A file no rule
  matches is readable by no one (fail closed); end with ``{path: "**", principals: [public]}`` to
  make the rest public.
- ``posix``: the file's owner, group and mode (an archive member's: the archive's), and the modes
  of the folders from the root down to it: a file is ``public`` when the world may read it and enter every one of those folders;
  otherwise its owner (``user:NAME``) if the owner may read it, and its group (``group:NAME``) if
  the group may, each only if that owner or group may also enter the folders (a folder's owner
  and group are compared with the file's; membership is not looked up). This never grants more
  than the file system does, and can grant less (a group member reading through a folder's other
  group is not seen).
- ``none``: every document ``public`` (what quarry did before documents carried principals).

Permissions are recomputed for every file at every run and written where they changed, without
parsing or embedding anything: editing the rules or ``chmod`` takes effect at the next run.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from quarry.core import gcpause
from quarry.core.errors import UsageError
from quarry.core.models import FileInfo
from quarry.core.paths import ARCHIVE_SEP
from quarry.core.plans import AclSource, PermissionPlan
from quarry.core.principals import PUBLIC, normalise
from quarry.core.storeurl import is_source_url, root_path


def requested(acl: str | None, acl_rules: str | None) -> AclSource | None:
    """The source the flags ask for (``--acl`` and ``--acl-rules``), or None when neither was given
    (each root keeps what it had)."""
    acl = (acl or "").strip() or None
    if acl_rules:
        if acl not in (None, "rules"):
            raise UsageError(f"--acl {acl} and --acl-rules disagree; give one of them")
        path = Path(acl_rules).expanduser().absolute()
        load_rules(path)  # a bad file fails now, before any work
        return AclSource("rules", str(path))
    if acl == "rules":
        raise UsageError("--acl rules needs --acl-rules FILE")
    return AclSource(acl) if acl else None


# --- rules -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    pattern: str
    principals: tuple[str, ...]


class Rules:
    """A loaded rules file: the first rule whose glob matches a file gives its principals."""

    def __init__(self, rules: list[Rule], source: str = ""):
        import pathspec

        self.rules = rules
        self.source = source
        self._specs = [
            None if "://" in r.pattern else pathspec.PathSpec.from_lines("gitwildmatch", [r.pattern]) for r in rules
        ]

    def principals(self, rel_path: str, full_path: str = "") -> tuple[str, ...]:
        """The principals of the file at ``rel_path`` under its root (``full_path``: its whole path or
        URL, for URL globs); () when no rule matches."""
        for rule, spec in zip(self.rules, self._specs):
            if spec is None:
                if full_path and fnmatchcase(full_path, rule.pattern):
                    return rule.principals
            elif spec.match_file(rel_path):
                return rule.principals
        return ()


def load_rules(path: str | os.PathLike) -> Rules:
    """Read and check a rules file; :class:`UsageError` naming the file, the rule and what is wrong."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"ACL rules file {path} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"ACL rules file {path} cannot be read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"ACL rules file {path} is not valid YAML{where}") from None
    if data is None:
        data = []
    if not isinstance(data, list):
        raise UsageError(f"ACL rules file {path}: expected a list of {{path: GLOB, principals: [...]}} rules")
    rules = []
    for i, item in enumerate(data, start=1):
        where = f"ACL rules file {path}, rule {i}"
        if not isinstance(item, dict):
            raise UsageError(f"{where}: expected {{path: GLOB, principals: [...]}}, got {type(item).__name__}")
        unknown = sorted(set(map(str, item)) - {"path", "principals"})
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r} (a rule has path and principals)")
        pattern = item.get("path")
        if not isinstance(pattern, str) or not pattern.strip():
            raise UsageError(f"{where}: path must be a glob such as 'hr/**'")
        pattern = pattern.strip()
        if pattern.startswith("!"):
            raise UsageError(
                f"{where}: negated globs ({pattern!r}) mean nothing here: the first matching rule "
                "wins, so put the exception in a rule before the general one"
            )
        if "principals" not in item:
            raise UsageError(f"{where}: principals missing (use [] for no one)")
        names = item["principals"]
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list):
            raise UsageError(f"{where}: principals must be a list such as ['group:hr', 'user:alice']")
        try:
            principals = normalise(names)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        rules.append(Rule(pattern, principals))
    return Rules(rules, str(path))


# --- POSIX owner, group and mode ---------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _user(uid: int) -> str:
    try:
        return f"user:{pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"user:{uid}"


@lru_cache(maxsize=4096)
def _group(gid: int) -> str:
    try:
        return f"group:{grp.getgrgid(gid).gr_name}"
    except KeyError:
        return f"group:{gid}"


def _who(st: os.stat_result, bits: tuple[int, int, int]) -> set[str]:
    """Who the mode lets do what ``bits`` (owner, group, other) name: PUBLIC stands for everyone."""
    user_bit, group_bit, other_bit = bits
    out = set()
    if st.st_mode & other_bit:
        out.add(PUBLIC)
    if st.st_mode & user_bit:
        out.add(_user(st.st_uid))
    if st.st_mode & group_bit:
        out.add(_group(st.st_gid))
    return out


READ = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
ENTER = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def _both(a: set[str], b: set[str]) -> set[str]:
    """Who is in both sets, PUBLIC standing for everyone."""
    if PUBLIC in a:
        return set(b)
    if PUBLIC in b:
        return set(a)
    return a & b


class PosixPermissions:
    """Principals from the file system; folder modes are read once per folder per run."""

    def __init__(self) -> None:
        self._dirs: dict[str, set[str]] = {}

    def _enter(self, folder: str) -> set[str]:
        who = self._dirs.get(folder)
        if who is None:
            who = _who(os.stat(folder), ENTER)
            self._dirs[folder] = who
        return who

    def principals(self, file: FileInfo) -> tuple[str, ...]:
        """The principals that may read ``file`` (see the module docstring); () when its mode
        cannot be read (fail closed)."""
        # a member of an archive (``a.zip!/doc.md``) is read as the archive file is
        path, rel = file.path.split(ARCHIVE_SEP, 1)[0], file.rel_path.split(ARCHIVE_SEP, 1)[0]
        try:
            who = _who(os.stat(path), READ)
            # the folders from the file's up to the root: as many as its path under the root has parts
            parents = Path(path).parents
            for i in range(len(rel.split("/"))):
                who = _both(who, self._enter(str(parents[i])))
        except (OSError, IndexError):
            return ()
        return tuple(sorted(who)) if PUBLIC not in who else (PUBLIC,)


# --- a run's permissions -----------------------------------------------------------------------------


def principals_for(files: list[FileInfo], sources: dict[str, AclSource]) -> dict[str, tuple[str, ...]]:
    """``{file path: principals}`` for ``files``, each by the source of its root (``sources`` keyed by
    :attr:`FileInfo.root`; a root not in it is ``none``)."""
    if not any(source.source in ("rules", "posix") for source in sources.values()):
        return dict.fromkeys((f.path for f in files), (PUBLIC,))  # every root public: no file to look at
    rules: dict[str, Rules] = {}
    posix = PosixPermissions()
    out = {}
    for f in files:
        source = sources.get(f.root) or AclSource()
        if source.source == "rules":
            assert source.rules is not None  # AclSource: a rules source names its file
            if source.rules not in rules:
                rules[source.rules] = load_rules(source.rules)
            out[f.path] = rules[source.rules].principals(f.rel_path, f.path)
        elif source.source == "posix":
            out[f.path] = posix.principals(f)
        else:
            out[f.path] = (PUBLIC,)
    return out


def root_key(root: str | os.PathLike) -> str:
    """The key a root's source is kept under: :attr:`FileInfo.root` of its files (the resolved folder;
    a file's own folder when the root is a single file)."""
    from quarry.core.paths import display

    if is_source_url(str(root)):  # a tree on object storage: its files' root is the URL
        return root_path(root)
    path = Path(root).expanduser().absolute()
    resolved = path.resolve()
    return display(str(resolved.parent if path.is_file() else resolved))


def plan_permissions(
    files: list[FileInfo],
    roots: list[str],
    asked: AclSource | None,
    stored_sources: dict[str, AclSource],
    stored: Mapping[str, tuple[str, ...] | None],
    rewritten: set[str] | None = None,
) -> PermissionPlan:
    """Each file's principals by its root's source (``asked`` for every root of the run, else what
    the catalog remembers for that root, else ``none``), compared with ``stored`` (``{display path:
    principals}`` of the committed catalog: quarry.store.acl.committed_permissions reads both).

    ``rewritten``: when given, the paths whose documents this run writes again (new and changed
    files: their rows start without principals); ``wanted`` then keeps only those and the paths
    whose principals differ from ``stored`` or that it lacks, so a run over a million unchanged
    files does not hand them all to the writer. None keeps every file."""
    from quarry.core.paths import display

    sources = {}
    for root in roots:
        key = root_key(root)
        sources[key] = asked or stored_sources.get(key) or AclSource()
    changed_sources = any(stored_sources.get(k, AclSource()) != v for k, v in sources.items())
    for key, source in sources.items():
        if source.source == "posix" and is_source_url(key):
            raise UsageError(
                f"--acl posix reads owners and modes from a file system, which {key} is not: give it "
                "--acl-rules FILE (globs match its paths, or whole URLs) or --acl none"
            )
    for key, source in sources.items():
        if source.source != "rules":
            continue
        assert source.rules is not None  # AclSource: a rules source names its file
        if not Path(source.rules).is_file():
            raise UsageError(
                f"the ACL rules file {source.rules} of {key} is missing: restore it, or give "
                "--acl-rules FILE or --acl none|posix to change where the root's permissions come from"
            )
    changed = 0
    kept: dict[str, tuple[str, ...]] = {}
    absent = object()
    with gcpause.paused():  # a record per file, no cycles: quarry/core/gcpause.py
        wanted = principals_for(files, sources)
        for path, principals in wanted.items():
            have = stored.get(display(path), absent)
            differs = have is absent or have != principals
            changed += differs and have is not absent
            if differs or rewritten is None or path in rewritten:
                kept[path] = principals
    return PermissionPlan(wanted=kept, sources=sources, changed=changed, sources_changed=changed_sources)
