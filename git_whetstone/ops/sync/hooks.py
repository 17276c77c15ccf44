"""The store's git hooks (SPEC §7): installing and uninstalling the shims, and the work they call.

A shim (the top-level `hooks/`, shipped as `_hooks/`) runs the hook it replaced, if any (kept as
`<name>.whetstone-chained`), returns at once for whetstone's own commits (WHETSTONE_WRITING=1) and
outside a store, and otherwise execs `git whetstone hook <name>` through the whetstone that installed
it. Hooks are a speed-up, not the source of truth: every read checks the index's freshness itself.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from ...base import resources
from ...base.config import Config, load
from ...base.errors import RUNTIME, WhetstoneError
from ...base.files import write_atomic
from ...format.checks import check, conflict_hint, top_ids
from ...git import runner, tree
from ...base.progress import Progress
from ...index.freshness import forget
from ...store.store import Store, list_skills
from ..workspace import Workspace
from .drivers import install_drivers, uninstall_drivers
from .settle import settle_head

NAMES = ("pre-commit", "post-commit", "post-merge", "post-rewrite")
MARK = "whetstone-hook-shim"
CHAINED = ".whetstone-chained"
OPT_OUT = "whetstone.hooks"  # git config key; false after `hooks uninstall`, so attach leaves them out


# --- where the hooks go -------------------------------------------------------------------------------

def _locate(store: Store) -> tuple[Path, str | None]:
    """The hooks directory git uses for this store, and why whetstone should not write there
    (None when it may): a core.hooksPath from the global or system config, or one outside the
    repository's .git, is shared with other repositories."""
    out = runner.run(store.path, "rev-parse", "--git-common-dir", "--git-path", "hooks").stdout.splitlines()
    common, hooks_dir = (store.path / out[0]).resolve(), (store.path / out[1]).resolve()
    found = runner.run(store.path, "config", "--show-scope", "--get", "core.hooksPath", check=False).stdout
    if not found.strip():
        return hooks_dir, None
    scope = found.split("\t", 1)[0]
    if scope not in ("local", "worktree"):
        return hooks_dir, (f"core.hooksPath in the {scope} git config points to {hooks_dir}, which other "
                           f"repositories share")
    if not hooks_dir.is_relative_to(common):
        return hooks_dir, f"core.hooksPath points to {hooks_dir}, outside the repository's .git"
    return hooks_dir, None


def shim_text(name: str) -> str:
    """The shim `name` as installed: its source with the installing whetstone written in."""
    exe, path = resources.launcher()
    text = resources.shim(name)
    text = re.sub(r"^whetstone_exe=\S*", lambda _: f"whetstone_exe={shlex.quote(exe)}", text, count=1, flags=re.M)
    return re.sub(r"^whetstone_path=\S*", lambda _: f"whetstone_path={shlex.quote(path)}", text, count=1, flags=re.M)


def _is_ours(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return MARK.encode() in handle.read(4096)
    except OSError:
        return False


# --- install / uninstall -----------------------------------------------------------------------------

def _start(store: Store, status: str, force: bool, refusal: str) -> tuple[Path, dict[str, Any]]:
    """The hooks directory and the result to fill in; "refused" (with `refusal`, where {shared}
    says why) when the directory is shared with other repositories and `force` is not given."""
    store.require()
    hooks_dir, shared = _locate(store)
    result: dict[str, Any] = {"skill": store.skill, "path": str(store.path), "hooks_dir": str(hooks_dir),
                              "status": status, "hooks": {}, "warnings": []}
    if shared and not force:
        result["status"] = "refused"
        result["warnings"].append(refusal.format(shared=shared))
    return hooks_dir, result


def install_store(store: Store, *, force: bool = False) -> dict[str, Any]:
    """Put whetstone's shims (and the merge drivers) into `store`: a foreign hook is chained, a shim
    already there brought up to date. `status` is "installed"; "partial" when a foreign hook could not
    be chained; "refused" when the directory is shared with other repositories and `force` is not given."""
    hooks_dir, result = _start(store, "installed", force, f"hooks not installed: {{shared}} (git whetstone hooks "
                               f"install {store.skill} --force writes there anyway; its shims do nothing outside "
                               f"a store)")
    # The merge drivers live in this store's own config and .git/info/attributes, never shared.
    result["merge_drivers"] = install_drivers(store)
    if result["status"] == "refused":
        return result
    try:
        hooks_dir.mkdir(parents=True, exist_ok=True)
        for name in NAMES:
            hook, chained = hooks_dir / name, hooks_dir / f"{name}{CHAINED}"
            text = shim_text(name)
            # lexists: a dangling symlink is someone's hook too
            if os.path.lexists(hook) and not _is_ours(hook):
                if os.path.lexists(chained):
                    result["hooks"][name] = "skipped"
                    result["status"] = "partial"
                    result["warnings"].append(
                        f"{hook} is not whetstone's and {chained.name} is taken: left alone (merge the two "
                        f"hooks into {chained.name} and delete {name}, then install again)")
                    continue
                os.replace(hook, chained)
                write_atomic(hook, text, mode=0o755)
                result["hooks"][name] = "chained"
            elif os.path.lexists(hook):
                same = hook.read_text(encoding="utf-8", errors="replace") == text and os.access(hook, os.X_OK)
                if not same:
                    write_atomic(hook, text, mode=0o755)
                result["hooks"][name] = "unchanged" if same else "updated"
            else:
                write_atomic(hook, text, mode=0o755)
                result["hooks"][name] = "installed"
    except OSError as exc:
        raise WhetstoneError(f"cannot write hooks into {hooks_dir}: {exc.strerror or exc}", exit_code=RUNTIME) from None
    runner.run(store.path, "config", "--unset", OPT_OUT, check=False)
    return result


def uninstall_store(store: Store, *, force: bool = False) -> dict[str, Any]:
    """Take whetstone's shims out of `store`'s hooks directory, put each chained hook back under its
    own name, and remember the choice so `attach` does not install them again."""
    hooks_dir, result = _start(store, "uninstalled", force, f"hooks left in place: {{shared}} (git whetstone "
                               f"hooks uninstall {store.skill} --force removes whetstone's shims from it for "
                               f"every repository)")
    result["merge_drivers"] = uninstall_drivers(store)
    if result["status"] == "refused":
        return result
    try:
        for name in NAMES:
            hook, chained = hooks_dir / name, hooks_dir / f"{name}{CHAINED}"
            if os.path.lexists(hook) and _is_ours(hook):
                hook.unlink()
                if os.path.lexists(chained):
                    os.replace(chained, hook)
                    result["hooks"][name] = "restored"
                else:
                    result["hooks"][name] = "removed"
            elif os.path.lexists(hook):
                result["hooks"][name] = "foreign"  # not whetstone's: never touched
                if os.path.lexists(chained):
                    result["warnings"].append(f"{chained} was left alone: {name} is no longer whetstone's "
                                              f"shim, so it is not known which hook to keep")
            else:
                result["hooks"][name] = "absent"
    except OSError as exc:
        raise WhetstoneError(f"cannot change hooks in {hooks_dir}: {exc.strerror or exc}", exit_code=RUNTIME) from None
    runner.run(store.path, "config", OPT_OUT, "false")
    return result


def ensure(store: Store) -> list[str]:
    """Install or refresh the shims of a store being attached, unless its owner uninstalled them
    (`whetstone.hooks` is false). Never fails the attach: a problem comes back as a warning."""
    try:
        opted = runner.run(store.path, "config", "--type=bool", "--get", OPT_OUT, check=False).stdout.strip()
        if opted == "false":
            return []
        return install_store(store)["warnings"]
    except WhetstoneError as exc:
        return [f"hooks not installed: {exc.message}"]


def _each(act: Callable[..., dict[str, Any]], done: str, skill: str | None, every: bool, force: bool,
          config: Config | None) -> dict[str, Any]:
    """`act` on SKILL's store or on every store: their results, `ok` when each one's status is `done`."""
    config = Workspace.of(config).config
    if every == (skill not in (None, "")):
        raise WhetstoneError("give a SKILL or --all")
    names = list_skills(config) if every else [skill]
    stores = [act(Store.open(config, name), force=force) for name in names]
    return {"stores": stores, "ok": all(s["status"] == done for s in stores)}


def install_hooks(skill: str | None = None, every: bool = False, force: bool = False, *,
                  config: Config | None = None) -> dict[str, Any]:
    """`git whetstone hooks install SKILL | --all`: install the shims in one store or all of them."""
    return _each(install_store, "installed", skill, every, force, config)


def uninstall_hooks(skill: str | None = None, every: bool = False, force: bool = False, *,
                    config: Config | None = None) -> dict[str, Any]:
    """`git whetstone hooks uninstall SKILL | --all`: remove the shims, restoring chained hooks."""
    return _each(uninstall_store, "uninstalled", skill, every, force, config)


def status(store: Store) -> dict[str, Any]:
    """Which of the shims are in place (for doctor): `ok` when all four are whetstone's."""
    try:
        hooks_dir, shared = _locate(store)
    except WhetstoneError as exc:
        return {"ok": False, "detail": exc.message, "hooks": {}}
    state = {name: ("whetstone" if _is_ours(hooks_dir / name) else
                    "foreign" if os.path.lexists(hooks_dir / name) else "missing") for name in NAMES}
    missing = [name for name, what in state.items() if what != "whetstone"]
    if not missing:
        detail = f"installed in {hooks_dir}"
    else:
        why = f" ({shared})" if shared else ""
        detail = (f"{', '.join(missing)} not installed{why}; hand edits are not checked before they are "
                  f"committed (git whetstone hooks install {store.skill})")
    return {"ok": not missing, "detail": detail, "hooks": state, "hooks_dir": str(hooks_dir)}


# --- running them ------------------------------------------------------------------------------------

def run_hook(name: str, args: list[str], progress: Progress | None = None) -> int:
    """What a shim runs (`git whetstone hook NAME ARGS`), in the top of the work tree. Returns the exit
    status: 1 only when pre-commit refuses the commit."""
    repo = Path.cwd()
    if not ((repo / ".git").exists() and (repo / "next_ids.json").is_file()):
        return 0  # not a whetstone store: the shim lives in a shared hooks directory
    try:
        if name == "pre-commit":
            return pre_commit(repo)
        if name in ("post-commit", "post-merge", "post-rewrite"):
            post_change(repo, name, args, progress)
            return 0
        _say(f"unknown hook '{name}'; nothing done")
    except Exception as exc:  # a hook never fails a git operation for a reason that is not the user's
        reason = exc.message if isinstance(exc, WhetstoneError) else f"{type(exc).__name__}: {exc}"
        if os.environ.get("WHETSTONE_DEBUG") == "1":
            raise
        _say(f"{name} hook skipped: {reason}")
    return 0


def _say(line: str) -> None:
    print(f"whetstone: {line}", file=sys.stderr)


def pre_commit(repo: Path) -> int:
    """Check the scope files the commit adds or changes, as staged, and ids across all of them."""
    changed = tree.changed_paths(repo, "diff", "--cached", "--diff-filter=d", inherit=True)
    if not changed:
        return 0
    errors = check(tree.staged_files(repo, inherit=True), full=changed)
    if not errors:
        return 0
    for error in errors:
        print(error, file=sys.stderr)
    _say(f"commit refused: {len(errors)} problem{'s' if len(errors) != 1 else ''} in the learnings and "
         f"issues being committed; fix them and commit again")
    hint = conflict_hint(errors)
    if hint:
        _say(hint)
    if runner.in_progress(repo) == "merge" and any("duplicate id" in e.message for e in errors):
        _say(f"this commit concludes a merge: git whetstone sync {repo.name} concludes it instead, re-minting "
             f"the ids both sides minted")
    return 1


def post_change(repo: Path, name: str, args: Sequence[str] = (), progress: Progress | None = None) -> None:
    """After a commit, merge or rewrite: re-mint ids both sides minted (a merge or a rebase), warn about
    invalid files the change brought in, keep ids written by hand from being minted again, and bring
    the index up to date."""
    try:
        config = load()
    except WhetstoneError as exc:
        _say(f"{exc.message}; using the default configuration")
        config = Config()
    store = Store(config, repo.name, repo)
    if name == "post-merge" or (name == "post-rewrite" and list(args[:1]) == ["rebase"]):
        # a plain git merge or pull, or a rebase: first re-mint the ids both sides minted
        with store.lock(recover=False):
            for notice in settle_head(store, rebased=name == "post-rewrite"):
                _say(notice)
    committed = tree.commit_files(repo, "HEAD", inherit=True)
    if name == "post-commit":
        changed = tree.changed_paths(repo, "diff-tree", "-r", "--root", "--no-commit-id", "HEAD", inherit=True)
    elif name == "post-merge":
        changed = tree.changed_paths(repo, "diff", "ORIG_HEAD", "HEAD", inherit=True)
    else:  # post-rewrite: post-commit already spoke for each rewritten commit
        changed = set()
    # the line reader only: this warns after the fact, and a large merge should not wait on mistune
    errors = check(committed, full=changed, with_markdown=False) if changed else []
    if name == "post-commit" and runner.in_progress(repo) == "rebase":
        # a commit replayed by a rebase: ids both sides minted are re-minted once it ends (post-rewrite)
        errors = [e for e in errors if not e.message.startswith("duplicate id")]
    if errors:
        _say(f"the {name.split('-', 1)[1]} brought in invalid markdown; recall serves the last valid version of "
             f"these files (or leaves their entries out) until they are fixed and committed:")
        for error in errors:
            print(f"  {error}", file=sys.stderr)
    # Under the write lock, like every write; but a write another process left half done is left
    # for the next write to finish: this runs inside the person's git command.
    notices: list[str] = []
    with store.lock(recover=False):
        store.keep_ids(top_ids(committed))
        notices += refresh_index(store, Workspace(config, progress))
    for notice in store.warnings + notices:
        _say(notice)


def refresh_index(store: Store, ws: Workspace) -> list[str]:
    """Bring the store's index up to date after a change git made, if it has one; any notice. Only the
    hashing and static backends refresh here: the hook never waits seconds for a model to load."""
    if not (store.path / "index.sqlite").exists() or ws.config.embedding_backend not in ("hashing", "static"):
        return []
    snap = ws.snapshot(store)
    return [snap.notice] if snap.notice else []


def reindex(skill: str, *, config: Config | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Drop SKILL's index and rebuild it from the markdown, and raise the id high-water mark over every
    id in the store."""
    ws = Workspace.of(config, progress)
    store = ws.store(skill, must_exist=True)
    forget(store)
    snap = ws.snapshot(store)
    with store.lock():
        store.keep_ids(top_ids(store.scope_texts()))
    alive = [snap.entries[row] for row in snap.by_id.values()]
    return {"skill": store.skill, "path": str(store.path), "backend": ws.embedder.identity,
            "learnings": sum(e.kind == "learning" for e in alive), "issues": sum(e.kind == "issue" for e in alive),
            "scopes": sum(1 for files in snap.holders.values() if files), "files": len(snap.files),
            "warnings": list(snap.warnings) + store.warnings}
