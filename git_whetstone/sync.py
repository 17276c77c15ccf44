"""Taste that follows you: a store's git remotes, and `sync` — fetch, merge, push — through any
git remote (a bare repository on disk, ssh, https), with no server of whetstone's own.

`remote SKILL add URL` on a machine without the store clones it (or, from an empty remote, starts
one that the first sync pushes); on an existing store it only records the remote. `sync` then:

1. refuses a store with uncommitted hand edits, or one stopped half-way through a merge (a merge
   whose conflicts are all resolved and added is concluded instead);
2. fetches the remote's branch (outside the write lock: a capture need not wait on the network);
3. under the write lock, fast-forwards, or merges with the store's merge drivers (`merge`), then
   settles the ids across the whole store and commits the merge — or, on a real conflict, stops
   with the merge in progress and one line saying what to do;
4. pushes (outside the lock); if someone pushed meanwhile, fetches and merges again.

A merge, not a rebase: the commits each machine made stay as they were (their messages name the
ids they minted, and `git revert` of a capture keeps working on every clone), and a merge's
result depends only on the two sides, so whichever machine merges, the blocks come out the same.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from . import gitbin, merge, validation
from .config import Config, load
from .errors import RUNTIME, WhetstoneError, shown
from .store import Store, list_skills, write_atomic

ATTEMPTS = 3  # fetch-merge-push rounds before giving up on a remote that keeps moving
# Nobody is there to type a password in a cron job or an agent host: fail instead of waiting.
NETWORK = {"GIT_TERMINAL_PROMPT": "0"}
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --- remotes ----------------------------------------------------------------------------------------

def remote(skill: str, action: str | None = None, target: str | None = None, name: str | None = None, *,
           config: Config | None = None) -> dict[str, Any]:
    """`git whetstone remote SKILL [add URL | remove NAME | list]`.

    add: record URL as the store's remote `name` (default origin). Where the store does not exist
    yet, it is cloned from URL, or created when URL is an empty repository. remove: forget remote
    NAME. list (the default): the store's remotes."""
    config = config or load()
    store = Store.open(config, skill)
    action = action or "list"
    if action == "add":
        return _add(store, target, _remote_name(name or "origin"))
    if name not in (None, ""):
        raise WhetstoneError("--name goes with add (remove takes the remote's name as its argument)")
    if action == "list":
        if target not in (None, ""):
            raise WhetstoneError(f"remote {store.skill} list takes no argument, got {shown(target)}")
        store.require()
        return {"skill": store.skill, "path": str(store.path), "status": "listed", "remotes": remotes(store)}
    if action == "remove":
        store.require()
        gone = _remote_name(target or "")
        if gone not in {r["name"] for r in remotes(store)}:
            raise WhetstoneError(f"{store.skill} has no remote named {gone}")
        gitbin.run(store.path, "remote", "remove", gone)
        return {"skill": store.skill, "path": str(store.path), "status": "removed", "remote": gone,
                "remotes": remotes(store)}
    raise WhetstoneError(f"unknown remote action {shown(action)}: use add, remove or list")


def remotes(store: Store) -> list[dict[str, str]]:
    """The store's remotes, by name, with the URL they fetch from."""
    out = gitbin.run(store.path, "remote", "-v").stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.rsplit(" ", 1)
        if len(parts) == 2 and parts[1] == "(fetch)" and "\t" in parts[0]:
            label, url = parts[0].split("\t", 1)
            found[label] = url
    return [{"name": label, "url": found[label]} for label in sorted(found)]


def _remote_name(name: object) -> str:
    if not isinstance(name, str) or not _REMOTE_NAME.fullmatch(name) or name.endswith((".", ".lock")):
        raise WhetstoneError(f"invalid remote name {shown(name)}: use letters, digits . _ - (like origin)")
    return name


def _url(url: object) -> str:
    """A remote's URL as git should record it: a URL or scp-style address as given, a path on this
    machine made absolute (the store lives elsewhere than where the command ran)."""
    if not isinstance(url, str) or not url.strip():
        raise WhetstoneError("give the remote's URL: git whetstone remote SKILL add URL")
    if _CONTROL.search(url):
        raise WhetstoneError("the remote's URL contains control characters")
    if url.startswith("-"):
        raise WhetstoneError(f"invalid remote URL {shown(url)}: it cannot start with '-'")
    if "://" in url or re.match(r"^[^/]+:", url):  # https://…, ssh://…, file://…, user@host:path
        return url
    path = Path(url).expanduser()
    if not path.exists():
        raise WhetstoneError(f"no repository at {url} (make one first, e.g. git init --bare {url})")
    return str(path.resolve())


def _add(store: Store, raw_url: object, name: str) -> dict[str, Any]:
    url = _url(raw_url)
    result: dict[str, Any] = {"skill": store.skill, "path": str(store.path), "remote": name, "url": url,
                              "created": False, "status": "added", "warnings": []}
    if not store.exists:
        result.update(_clone(store, url, name))
        return result
    have = {r["name"]: r["url"] for r in remotes(store)}
    if name in have:
        if have[name] == url:
            result["status"] = "already_added"
            return result
        raise WhetstoneError(f"{store.skill} already has a remote named {name} ({have[name]}); remove it first "
                             f"(git whetstone remote {store.skill} remove {name}) or give this one another --name")
    gitbin.run(store.path, "remote", "add", name, url)
    merge.install_drivers(store)
    return result


def _clone(store: Store, url: str, name: str) -> dict[str, Any]:
    """Make the store from `url`: a clone (with hooks and merge drivers), or a new store when the
    remote is empty. Built in a private directory and renamed into place, so a failure leaves
    nothing behind."""
    root = store.path.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WhetstoneError(f"cannot create the store root {root}: {exc.strerror or exc}", exit_code=RUNTIME) from None
    probe = gitbin.run(root, "ls-remote", "--heads", url, env=NETWORK, check=False)
    if probe.returncode != 0:
        raise WhetstoneError(f"cannot reach {url}: {_last_line(probe)}", exit_code=RUNTIME)
    if not probe.stdout.strip():  # an empty repository: this machine's store is the first
        store.create()
        gitbin.run(store.path, "remote", "add", name, url)
        merge.install_drivers(store)
        return {"created": True, "status": "added", "warnings": list(store.warnings)}
    heads = [line.split("\t", 1)[1][len("refs/heads/"):] for line in probe.stdout.splitlines() if "\t" in line]
    # stores live on main; a bare remote made with plain `git init --bare` may say master is its HEAD
    branch = "main" if "main" in heads else heads[0]
    work = root / f".{store.skill}.cloning-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        proc = gitbin.run(root, "clone", "-q", "--origin", name, "--branch", branch, url, str(work), env=NETWORK,
                          check=False)
        if proc.returncode != 0:
            raise WhetstoneError(f"cannot clone {url}: {_last_line(proc)}", exit_code=RUNTIME)
        if not (work / "next_ids.json").is_file():
            raise WhetstoneError(f"{url} is not a whetstone store (it has no next_ids.json); nothing was created")
        if store.path.exists():
            store.path.rmdir()  # an empty directory someone made for it; anything else is refused here
        os.rename(work, store.path)
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise WhetstoneError(f"{store.path} exists and is not empty; move it away first ({exc.strerror or exc})",
                             exit_code=RUNTIME) from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    from . import hooks
    return {"created": True, "status": "cloned", "warnings": hooks.ensure(store)}


def _last_line(proc: Any) -> str:
    said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return said[-1] if said else f"exit {proc.returncode}"


# --- sync -------------------------------------------------------------------------------------------

def sync(skill: str | None = None, every: bool = False, remote_name: str | None = None, *,
         config: Config | None = None) -> dict[str, Any]:
    """`git whetstone sync SKILL | --all`: fetch, merge and push each store. With --all, a store
    without a remote is skipped and a failure is reported in its entry; `ok` is False when a store
    stopped on a conflict or failed."""
    config = config or load()
    if every == (skill not in (None, "")):
        raise WhetstoneError("give a SKILL or --all")
    if remote_name is not None:
        remote_name = _remote_name(remote_name)
    if not every:
        results = [sync_store(Store.open(config, skill), remote_name, config)]
    else:
        results = []
        for name in list_skills(config):
            store = Store.open(config, name)
            try:
                results.append(sync_store(store, remote_name, config, required=False))
            except WhetstoneError as exc:
                results.append({"skill": store.skill, "path": str(store.path), "status": "failed",
                                "message": exc.message})
    return {"stores": results, "ok": all(r["status"] not in ("conflict", "failed") for r in results)}


def sync_store(store: Store, remote_name: str | None, config: Config, required: bool = True) -> dict[str, Any]:
    """Sync one store with its remote (see the module docstring)."""
    store.require()
    repo = store.path
    result: dict[str, Any] = {"skill": store.skill, "path": str(repo), "remote": None, "url": None, "branch": None,
                              "status": None, "received": 0, "sent": 0, "reminted": [], "conflicts": [],
                              "message": "", "head": None, "warnings": []}
    branch = gitbin.run(repo, "symbolic-ref", "--short", "-q", "HEAD", check=False).stdout.strip()
    if not branch:
        raise WhetstoneError(f"{store.skill} is not on a branch (a detached HEAD); git switch main in {repo}, "
                             f"then sync again", exit_code=RUNTIME)
    name = _pick_remote(store, remote_name, branch)
    if name is None:
        if required:
            raise WhetstoneError(f"{store.skill} has no remote to sync with; add one: "
                                 f"git whetstone remote {store.skill} add URL")
        result.update(status="skipped", message=f"{store.skill} has no remote")
        return result
    url = next(r["url"] for r in remotes(store) if r["name"] == name)
    result.update(remote=name, url=url, branch=branch)
    _ready(store)  # fail before touching the network
    merge.install_drivers(store)  # whatever the hooks' state: syncing is asking for whetstone's merge
    label = f"{name}/{branch}"
    merged = False
    for _ in range(ATTEMPTS):
        theirs = _fetch(store, name, branch)
        with store.lock():
            if _ready(store):  # a merge the user resolved after an earlier sync stopped
                if not _conclude(store, result):
                    return _stopped(store, result)
                merged = True
                _after_change(store, config, result)
            before = gitbin.head(repo)
            if theirs and theirs != before and not _is_ancestor(repo, theirs, before):
                if _is_ancestor(repo, before, theirs):
                    gitbin.run(repo, "merge", "--ff-only", "-q", theirs, env={"WHETSTONE_WRITING": "1"})
                elif _merge(store, theirs, label, result):
                    merged = True
                else:
                    return _stopped(store, result)
                result["received"] += _count(repo, f"{before}..{theirs}")
                _after_change(store, config, result)
            local = gitbin.head(repo)
        if theirs == local:
            break
        if _push(store, name, branch, local, theirs):
            result["sent"] += _count(repo, f"{theirs}..{local}" if theirs else local)
            break
    else:
        raise WhetstoneError(f"{label} kept changing while {store.skill} was syncing; sync again", exit_code=RUNTIME)
    received, sent = result["received"], result["sent"]
    result["status"] = ("merged" if merged or (received and sent) else "pulled" if received
                        else "pushed" if sent else "up_to_date")
    result["head"] = gitbin.head(repo)
    result["message"] = _summary(store, result, label)
    return result


def _pick_remote(store: Store, wanted: str | None, branch: str) -> str | None:
    names = [r["name"] for r in remotes(store)]
    if wanted:
        if wanted not in names:
            raise WhetstoneError(f"{store.skill} has no remote named {wanted}"
                                 + (f" (it has: {', '.join(names)})" if names else ""))
        return wanted
    upstream = gitbin.run(store.path, "config", "--get", f"branch.{branch}.remote", check=False).stdout.strip()
    for choice in (upstream, "origin"):
        if choice in names:
            return choice
    if len(names) > 1:
        raise WhetstoneError(f"{store.skill} has several remotes ({', '.join(names)}): choose one with --remote")
    return names[0] if names else None


def _ready(store: Store) -> bool:
    """Refuse a store sync must not touch; True when a merge with every conflict resolved waits to
    be concluded."""
    repo, skill = store.path, store.skill
    pending = gitbin.in_progress(repo)
    if pending and pending != "merge":
        raise WhetstoneError(f"{skill} is in the middle of a {pending}: finish it, or git {pending} --abort in "
                             f"{repo}, then sync again", exit_code=RUNTIME)
    if pending == "merge":
        unmerged = sorted({line.split("\t", 1)[1] for line in gitbin.run(repo, "ls-files", "-u").stdout.splitlines()})
        if unmerged:
            raise WhetstoneError(f"{skill} is in the middle of a merge with conflicts in {', '.join(unmerged)}: keep "
                                 f"one version of each conflicting block, delete the marker lines, git add, then "
                                 f"sync again (or undo the merge: git merge --abort in {repo})", exit_code=RUNTIME)
        unstaged = gitbin.run(repo, "diff", "--name-only").stdout.split()
        if unstaged:
            raise WhetstoneError(f"{skill} is in the middle of a merge and {unstaged[0]} has changes not added to it: "
                                 f"git add it (or undo it), then sync again", exit_code=RUNTIME)
        return True
    dirty = _dirty(repo)
    if dirty:
        more = f" and {len(dirty) - 1} more" if len(dirty) > 1 else ""
        raise WhetstoneError(f"{skill} has uncommitted changes ({dirty[0]}{more}): commit them (git commit -a in "
                             f"{repo}) or set them aside (git stash), then sync again", exit_code=RUNTIME)
    return False


def _dirty(repo: Path) -> list[str]:
    """Tracked files changed or staged, and scope files not yet added: what a merge could trample
    or a commit could sweep in. Other untracked files (an editor's swap file) are no concern."""
    out = gitbin.run(repo, "status", "--porcelain", "-z", "--untracked-files=all").stdout.split("\0")
    found, skip = [], False
    for record in out:
        if skip or not record:
            skip = False
            continue
        state, path = record[:2], record[3:]
        skip = state[0] in "RC"  # a rename's or copy's source follows
        if state != "??" or validation.is_scope_file(path):
            found.append(path)
    return found


def _fetch(store: Store, name: str, branch: str) -> str | None:
    """Fetch the remote's branch; its commit, or None when the remote does not have it (yet)."""
    tracking = f"refs/remotes/{name}/{branch}"
    proc = gitbin.run(store.path, "fetch", "--quiet", "--no-tags", name, f"+refs/heads/{branch}:{tracking}",
                      env=NETWORK, check=False)
    if proc.returncode != 0:
        if "couldn't find remote ref" in proc.stderr:
            gitbin.run(store.path, "update-ref", "-d", tracking, check=False)
            return None
        raise WhetstoneError(f"cannot fetch {store.skill} from {name}: {_last_line(proc)}", exit_code=RUNTIME)
    return gitbin.run(store.path, "rev-parse", "--verify", "-q", tracking).stdout.strip() or None


def _push(store: Store, name: str, branch: str, commit: str, theirs: str | None) -> bool:
    """Push `commit` to the remote's branch: True when it landed, False when the remote moved on
    (fetch and merge again); any other refusal is an error."""
    upstream = gitbin.run(store.path, "config", "--get", f"branch.{branch}.remote", check=False).stdout.strip()
    proc = gitbin.run(store.path, "push", "--porcelain", *([] if upstream else ["--set-upstream"]), name,
                      f"{commit}:refs/heads/{branch}", env=NETWORK, check=False)
    if proc.returncode == 0:
        if not upstream:
            gitbin.run(store.path, "branch", "--set-upstream-to", f"{name}/{branch}", branch, check=False)
        return True
    said = proc.stdout + proc.stderr
    if "[rejected]" in said or "fetch first" in said or "non-fast-forward" in said:
        return False
    raise WhetstoneError(f"{store.skill} is up to date here, but the push to {name} failed: {_last_line(proc)}",
                         exit_code=RUNTIME)


def _is_ancestor(repo: Path, older: str | None, newer: str | None) -> bool:
    if not older or not newer:
        return False
    return gitbin.run(repo, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0


def _count(repo: Path, spec: str) -> int:
    out = gitbin.run(repo, "rev-list", "--count", spec, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


# --- merging ----------------------------------------------------------------------------------------

def _merge(store: Store, theirs: str, label: str, result: dict[str, Any]) -> bool:
    """Merge `theirs` into HEAD with the drivers, settle the ids and commit: True; False when a
    conflict stopped it (the merge stays in progress, described in `result`)."""
    repo = store.path
    if gitbin.run(repo, "cat-file", "-e", f"{theirs}:next_ids.json", check=False).returncode != 0:
        raise WhetstoneError(f"{label} is not a whetstone store (it has no next_ids.json); nothing was merged")
    base = gitbin.run(repo, "merge-base", "HEAD", theirs, check=False).stdout.strip() or None
    # two stores started apart (attach on each machine) share no history; they are still one skill
    unrelated = [] if base else ["--allow-unrelated-histories"]
    proc = gitbin.run(repo, "merge", "--no-ff", "--no-commit", "-q", *unrelated, "-m", f"sync: merge {label}",
                      theirs, check=False, env={"WHETSTONE_WRITING": "1"})
    if proc.returncode != 0 and gitbin.in_progress(repo) != "merge":
        raise WhetstoneError(f"git merge of {label} failed in {repo}: {_last_line(proc)}; nothing was merged",
                             exit_code=RUNTIME)
    return _finish(store, [gitbin.head(repo) or "HEAD", theirs], base, result)


def _conclude(store: Store, result: dict[str, Any]) -> bool:
    """Conclude a merge the user resolved (after a sync stopped on a conflict, or a plain git pull)."""
    repo = store.path
    theirs = (repo / ".git" / "MERGE_HEAD").read_text().split()[0]
    ours = gitbin.head(repo) or "HEAD"
    base = gitbin.run(repo, "merge-base", ours, theirs, check=False).stdout.strip() or None
    return _finish(store, [ours, theirs], base, result)


def _finish(store: Store, parents: list[str], base: str | None, result: dict[str, Any]) -> bool:
    repo = store.path
    conflicts = _resolve(store)
    current = (repo / "next_ids.json").read_text(encoding="utf-8") if (repo / "next_ids.json").exists() else None
    plan = merge.settle(repo, merge.worktree_texts(store), parents, base, current)
    conflicts += plan.conflicts
    held = {c["path"] for c in conflicts}
    writes: dict[str, str | None] = dict(plan.files)
    writes["next_ids.json"] = plan.next_ids
    for rel, text in writes.items():
        path = repo / rel
        if text is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, text)
    staged = [rel for rel in writes if rel not in held]
    gitbin.run(repo, "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", input="\0".join(staged))
    result["reminted"] = plan.reminted
    if conflicts:
        result["conflicts"] = conflicts
        return False
    message_file = repo / ".git" / "MERGE_MSG"
    subject = message_file.read_text(encoding="utf-8").split("\n", 1)[0] if message_file.exists() else ""
    if not subject.startswith("sync: "):
        subject = "sync: conclude the merge"
    renames = ", ".join(f"{r['from']} as {r['to']}" for r in plan.reminted)
    body = "".join(f"{r['from']} -> {r['to']} in {r['path']} (minted on both sides)\n" for r in plan.reminted)
    gitbin.commit_staged(repo, subject + (f"; re-mint {renames}" if renames else "") + ("\n\n" + body if body else "\n"))
    return True


def _resolve(store: Store) -> list[dict[str, Any]]:
    """Resolve what git left unmerged that the drivers never saw (a block changed on one side in a
    file the other deleted, say) or could not settle: scope files block by block, next_ids.json to
    the maximum. Returns the conflicts that remain for a person."""
    repo = store.path
    stages: dict[str, dict[int, str]] = {}
    for line in gitbin.run(repo, "ls-files", "-u", "-z").stdout.split("\0"):
        if line:
            info, path = line.split("\t", 1)
            _, sha, stage = info.split()
            stages.setdefault(path, {})[int(stage)] = sha
    conflicts: list[dict[str, Any]] = []
    for rel, found in sorted(stages.items()):
        texts = [gitbin.run(repo, "cat-file", "blob", found[n]).stdout if n in found else "" for n in (1, 2, 3)]
        if validation.is_scope_file(rel):
            merged = merge.merge_scope(*texts, rel)
            if merged is None:
                conflicts.append({"path": rel, "id": None, "message": (
                    f"{rel} could not be merged block by block (a side holds broken markdown); merge it by hand")})
                continue
            text, ids = merged
            conflicts += [{"path": rel, "id": bid, "message": f"both sides changed {bid} differently"} for bid in ids]
        elif rel == "next_ids.json":
            text, ids = merge.merge_ids(*texts) or "", []
            if not text:
                conflicts.append({"path": rel, "id": None, "message": "next_ids.json is unreadable on both sides"})
                continue
        else:
            conflicts.append({"path": rel, "id": None, "message": f"{rel} changed on both sides; merge it by hand"})
            continue
        path = repo / rel
        if text.strip() or ids:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
        else:
            path.unlink(missing_ok=True)
        if not ids:
            gitbin.run(repo, "add", "-A", "--", rel)
    return conflicts


def _after_change(store: Store, config: Config, result: dict[str, Any]) -> None:
    """What the post-merge hook does, for merges sync made itself: ids, index."""
    from .hooks import refresh_index

    store.keep_ids(validation.top_ids(validation.worktree_files(store)))
    result["warnings"] += list(store.warnings) + refresh_index(store, config)
    store.warnings.clear()


def _stopped(store: Store, result: dict[str, Any]) -> dict[str, Any]:
    # plain body conflicts are said once for all their ids; any other (a moved block too) as it is
    plain = [c["message"] == f"both sides changed {c['id']} differently" for c in result["conflicts"]]
    changed = [c["id"] for c, is_plain in zip(result["conflicts"], plain) if is_plain]
    others = [c["message"] for c, is_plain in zip(result["conflicts"], plain) if not is_plain]
    paths = sorted({c["path"] for c in result["conflicts"]})
    what = "; ".join(([f"both sides changed {', '.join(dict.fromkeys(changed))} differently"] if changed else [])
                     + list(dict.fromkeys(others)))
    result.update(status="conflict", head=gitbin.head(store.path), message=(
        f"sync of {store.skill} stopped on a conflict: {what} ({', '.join(paths)}). Keep one version of each "
        f"(delete the <<<<<<< ======= >>>>>>> lines), git add, then run git whetstone sync {store.skill} again; "
        f"or undo the merge with git merge --abort in {store.path}"))
    return result


def _summary(store: Store, result: dict[str, Any], label: str) -> str:
    parts = []
    if result["received"]:
        parts.append(f"received {result['received']} commit{'s' if result['received'] != 1 else ''}")
    if result["sent"]:
        parts.append(f"sent {result['sent']} commit{'s' if result['sent'] != 1 else ''}")
    if result["reminted"]:
        parts.append("re-minted " + ", ".join(f"{r['from']} as {r['to']}" for r in result["reminted"]))
    verb = {"merged": "merged with", "pulled": "pulled from", "pushed": "pushed to",
            "up_to_date": "up to date with"}[result["status"]]
    return f"{store.skill}: {verb} {label}" + (f" ({'; '.join(parts)})" if parts else "")
