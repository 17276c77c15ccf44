"""The scope files as git holds them: staged for the next commit (through the index a hook is given in
GIT_INDEX_FILE: `inherit`), committed in a revision, or named by a diff.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..base.errors import RUNTIME, WhetstoneError
from ..base.files import read_or_none
from ..format.layout import is_scope_file
from . import runner


def _blobs(repo: Path, entries: dict[str, str], inherit: bool) -> dict[str, bytes]:
    """path → content for path → blob id, read through one `git cat-file --batch`."""
    if not entries:
        return {}
    paths = sorted(entries)
    out = runner.run(repo, "cat-file", "--batch", inherit=inherit, binary=True,
              input="".join(f"{entries[p]}\n" for p in paths).encode()).stdout
    files, pos = {}, 0
    for path in paths:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise WhetstoneError(f"git cat-file: cannot read {path} ({out[pos:end].decode(errors='replace')})",
                                 exit_code=RUNTIME)
        size = int(header[2])
        files[path] = out[end + 1:end + 1 + size]
        pos = end + 1 + size + 1
    return files


def _scope_records(listing: bytes) -> Iterator[tuple[str, str, str, str]]:
    """The scope files a NUL-separated git listing names: each record's three fields and its path
    (`ls-files --stage`: mode, blob, stage; `ls-tree`: mode, kind, blob)."""
    for record in listing.decode("utf-8", "surrogateescape").split("\0"):
        if record:
            info, path = record.split("\t", 1)
            if is_scope_file(path):
                yield (*info.split(), path)


def staged_files(repo: Path, inherit: bool = False) -> dict[str, bytes]:
    """The scope files as staged: the index git is about to commit."""
    listing = runner.run(repo, "ls-files", "--stage", "-z", "--", "learnings", "issues", inherit=inherit, binary=True).stdout
    return _blobs(repo, {path: sha for mode, sha, stage, path in _scope_records(listing)
                         if stage == "0" and mode.startswith("100")}, inherit)


def commit_files(repo: Path, rev: str = "HEAD", inherit: bool = False) -> dict[str, bytes]:
    """The scope files as committed in `rev`."""
    listing = runner.run(repo, "ls-tree", "-r", "-z", rev, "--", "learnings", "issues", inherit=inherit, binary=True,
                  check=False).stdout
    return _blobs(repo, {path: sha for mode, kind, sha, path in _scope_records(listing)
                         if kind == "blob" and mode.startswith("100")}, inherit)


def changed_paths(repo: Path, command: str, *args: str, inherit: bool = False) -> set[str]:
    """The scope files that `git COMMAND --name-only ARGS` (diff, diff-tree) names; nothing when
    it fails (no ORIG_HEAD, say)."""
    out = runner.run(repo, command, "--name-only", "--no-renames", "-z", *args, inherit=inherit, binary=True,
              check=False).stdout
    return {p for p in out.decode("utf-8", "surrogateescape").split("\0") if is_scope_file(p)}


# Per repository, the last HEAD read and its folders' trees: a write checks its files twice (before
# it mints an id, then as it commits), and what a commit holds never changes.
_HELD: dict[str, tuple[str, dict[str, object]]] = {}


def against_head(repo: Path, rels: list[str]) -> dict[str, tuple[bytes | None, bool, str | None]]:
    """Each of `rels` on disk against HEAD: (its bytes, None when absent; whether HEAD holds exactly that;
    HEAD's blob id for it, when it does and the file exists). Read in-process (dulwich: a write pays no
    git process), each folder's tree once per HEAD, a file compared by blob id. Outside a repository
    every file counts as held, with no blob."""
    from dulwich.errors import NotGitRepository, NotTreeError
    from dulwich.objects import Blob, SubmoduleEncountered, Tree
    from dulwich.object_store import tree_lookup_path
    from dulwich.repo import Repo

    head = runner.head(repo)
    seen, folders = _HELD.get(str(repo), ("", {}))
    if head is None or head != seen:
        folders = {}  # folder -> its tree as HEAD holds it (None: no such folder)
    wanted = {rel.rpartition("/")[0] for rel in rels} - folders.keys()
    if wanted:
        try:
            with Repo(str(repo)) as handle:
                try:
                    tree = handle[head.encode("ascii") if head else handle.head()].tree
                except KeyError:  # no commit yet: every file on disk is new
                    tree = None
                for folder in wanted:
                    folders[folder] = None
                    if tree is not None:
                        try:
                            _, sha = tree_lookup_path(handle.object_store.__getitem__, tree, folder.encode()) \
                                if folder else (None, tree)
                            obj = handle[sha]
                            folders[folder] = obj if isinstance(obj, Tree) else None  # (HEAD's file of that name)
                        except (KeyError, TypeError, NotADirectoryError, AttributeError, NotTreeError,
                                SubmoduleEncountered):  # a path through a file or a submodule HEAD holds: no such file
                            pass
        except NotGitRepository:
            return {rel: (read_or_none(repo / rel), True, None) for rel in rels}
        if head is not None:
            _HELD[str(repo)] = (head, folders)

    def held(rel: str) -> bytes | None:
        folder, _, name = rel.rpartition("/")
        listed, key = folders[folder], name.encode()
        if listed is None or key not in listed:
            return None
        mode, sha = listed[key]
        return None if mode & 0o40000 else sha  # (a folder of that name is no file)

    found: dict[str, tuple[bytes | None, bool, str | None]] = {}
    for rel in rels:
        try:
            data = (repo / rel).read_bytes()
        except FileNotFoundError:
            data, disk = None, None
        else:
            disk = Blob.from_string(data).id
        same = disk == held(rel)
        found[rel] = (data, same, disk.decode("ascii") if same and disk is not None else None)
    return found


def blob(repo: Path, blob_id: str) -> bytes:
    """The bytes of one blob of `repo` (KeyError when it has none of that id)."""
    from dulwich.repo import Repo

    with Repo(str(repo)) as handle:
        found = handle.object_store[blob_id.encode("ascii")]
        if found.type_name != b"blob":
            raise KeyError(blob_id)
        return found.as_raw_string()


def committed_text(repo: Path, rel: str) -> str | None:
    """One file's text as HEAD holds it, read in-process (dulwich: no git process for a recall that
    must serve a broken file's last good version); None when there is none."""
    from dulwich.errors import NotGitRepository
    from dulwich.object_store import tree_lookup_path
    from dulwich.repo import Repo

    try:
        with Repo(str(repo)) as handle:
            tree = handle[handle.head()].tree
            _, sha = tree_lookup_path(handle.object_store.__getitem__, tree, rel.encode())
            return handle[sha].data.decode("utf-8")
    except (KeyError, NotGitRepository, UnicodeDecodeError, ValueError, OSError):
        return None
