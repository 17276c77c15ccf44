"""`git whetstone sync`: fetch, merge and push a store through its git remote (`remotes`), with no
server of whetstone's own. A merge, not a rebase: each machine's commits stay as they were (their
messages name the ids they minted, and `git revert` of a capture keeps working on every clone), and a
merge's result depends only on the two sides, so whichever machine merges, the blocks come out the same.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError
from ...base.files import write_atomic, write_many_atomic
from ...format.checks import top_ids
from ...format.layout import is_scope_file
from ...format.counters import merge_ids
from ...format.merging import merge_scope
from ...git import runner
from ...git.runner import last_line
from ...store import events
from ...base.progress import Progress
from ...store.store import Store, list_skills
from ..workspace import Workspace
from .drivers import install_drivers
from .hooks import refresh_index
from .remotes import NETWORK, pick, remote_name as remote_name_checked, remotes
from .settle import Settlement, settle

ATTEMPTS = 3  # fetch-merge-push rounds before giving up on a remote that keeps moving


@dataclass
class SyncResult:
    """What syncing one store did, as its JSON reports it."""

    skill: str
    path: str
    remote: str | None = None
    url: str | None = None
    branch: str | None = None
    status: str | None = None
    received: int = 0
    sent: int = 0
    reminted: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    head: str | None = None
    warnings: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        return asdict(self)

    def took(self, merge: Settlement) -> bool:
        """Record a merge's settlement; whether it went through (no conflict left)."""
        self.reminted = merge.reminted
        self.conflicts = merge.conflicts
        return not merge.conflicts

    def stopped(self, store: Store) -> dict[str, Any]:
        """The result of a sync a conflict stopped, saying what to do about it."""
        # plain body conflicts are said once for all their ids; any other (a moved block too) as it is
        plain = [c["message"] == f"both sides changed {c['id']} differently" for c in self.conflicts]
        changed = [c["id"] for c, is_plain in zip(self.conflicts, plain) if is_plain]
        others = [c["message"] for c, is_plain in zip(self.conflicts, plain) if not is_plain]
        paths = sorted({c["path"] for c in self.conflicts})
        what = "; ".join(([f"both sides changed {', '.join(dict.fromkeys(changed))} differently"] if changed else [])
                         + list(dict.fromkeys(others)))
        self.status, self.head = "conflict", runner.head(store.path)
        self.message = (
            f"sync of {store.skill} stopped on a conflict: {what} ({', '.join(paths)}). Keep one version of each "
            f"(delete the <<<<<<< ======= >>>>>>> lines), git add, then run git whetstone sync {store.skill} again; "
            f"or undo the merge with git merge --abort in {store.path}")
        return self.json()

    def summary(self, label: str) -> str:
        parts = []
        if self.received:
            parts.append(f"received {self.received} commit{'s' if self.received != 1 else ''}")
        if self.sent:
            parts.append(f"sent {self.sent} commit{'s' if self.sent != 1 else ''}")
        if self.reminted:
            parts.append("re-minted " + ", ".join(f"{r['from']} as {r['to']}" for r in self.reminted))
        verb = {"merged": "merged with", "pulled": "pulled from", "pushed": "pushed to",
                "up_to_date": "up to date with"}[self.status or ""]
        return f"{self.skill}: {verb} {label}" + (f" ({'; '.join(parts)})" if parts else "")


# --- sync -------------------------------------------------------------------------------------------

def sync(skill: str | None = None, every: bool = False, remote_name: str | None = None, *,
         config: Config | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """`git whetstone sync SKILL | --all`. With --all, a store without a remote is skipped and a failure
    is reported in its entry; `ok` is False when a store stopped on a conflict or failed."""
    ws = Workspace.of(config, progress)
    if every == (skill not in (None, "")):
        raise WhetstoneError("give a SKILL or --all")
    if remote_name is not None:
        remote_name = remote_name_checked(remote_name)
    if not every:
        results = [sync_store(ws.store(skill), remote_name, ws)]
    else:
        results = []
        for name in list_skills(ws.config):
            store = ws.store(name)
            try:
                results.append(sync_store(store, remote_name, ws, required=False))
            except WhetstoneError as exc:
                results.append({"skill": store.skill, "path": str(store.path), "status": "failed",
                                "message": exc.message})
    return {"stores": results, "ok": all(r["status"] not in ("conflict", "failed") for r in results)}


def sync_store(store: Store, remote_name: str | None, ws: Workspace, required: bool = True) -> dict[str, Any]:
    """Sync one store: refuse uncommitted edits or a half-done operation (conclude a resolved merge);
    fetch (outside the write lock: a capture need not wait on the network); under the lock,
    fast-forward or merge and settle the ids, or stop on a real conflict; push, and on a race go round
    again."""
    store.require()
    repo = store.path
    result = SyncResult(store.skill, str(repo))
    branch = runner.run(repo, "symbolic-ref", "--short", "-q", "HEAD", check=False).stdout.strip()
    if not branch:
        raise WhetstoneError(f"{store.skill} is not on a branch (a detached HEAD); git switch main in {repo}, "
                             f"then sync again", exit_code=RUNTIME)
    name = pick(store, remote_name, branch)
    if name is None:
        if required:
            raise WhetstoneError(f"{store.skill} has no remote to sync with; add one: "
                                 f"git whetstone remote {store.skill} add URL")
        result.status, result.message = "skipped", f"{store.skill} has no remote"
        return result.json()
    result.remote, result.url, result.branch = name, next(r["url"] for r in remotes(store) if r["name"] == name), branch
    _ready(store)  # fail before touching the network
    install_drivers(store)  # whatever the hooks' state: syncing is asking for whetstone's merge
    label = f"{name}/{branch}"
    merged = False
    for _ in range(ATTEMPTS):
        theirs = _fetch(store, name, branch)
        with store.lock():
            if _ready(store):  # a merge the user resolved after an earlier sync stopped
                if not result.took(_conclude(store)):
                    return result.stopped(store)
                merged = True
                result.warnings += _after_change(store, ws)
            before = runner.head(repo)
            if theirs and theirs != before and not runner.is_ancestor(repo, theirs, before):
                if runner.is_ancestor(repo, before, theirs):
                    runner.run(repo, "merge", "--ff-only", "-q", theirs, env={"WHETSTONE_WRITING": "1"})
                elif result.took(_merge(store, theirs, label)):
                    merged = True
                else:
                    return result.stopped(store)
                result.received += _count(repo, f"{before}..{theirs}")
                result.warnings += _after_change(store, ws)
            local = runner.head(repo)
        if theirs == local:
            break
        if _push(store, name, branch, local, theirs):
            result.sent += _count(repo, f"{theirs}..{local}" if theirs else local)
            break
    else:
        raise WhetstoneError(f"{label} kept changing while {store.skill} was syncing; sync again", exit_code=RUNTIME)
    received, sent = result.received, result.sent
    result.status = ("merged" if merged or (received and sent) else "pulled" if received
                     else "pushed" if sent else "up_to_date")
    result.head = runner.head(repo)
    result.message = result.summary(label)
    events.append(repo, "sync", status=result.status, remote=name, sent=sent, received=received)
    return result.json()


def _ready(store: Store) -> bool:
    """Refuse a store sync must not touch; True when a merge with every conflict resolved waits to
    be concluded."""
    repo, skill = store.path, store.skill
    pending = runner.in_progress(repo)
    if pending and pending != "merge":
        raise WhetstoneError(f"{skill} is in the middle of a {pending}: finish it, or git {pending} --abort in "
                             f"{repo}, then sync again", exit_code=RUNTIME)
    if pending == "merge":
        unmerged = sorted({line.split("\t", 1)[1] for line in runner.run(repo, "ls-files", "-u").stdout.splitlines()})
        if unmerged:
            raise WhetstoneError(f"{skill} is in the middle of a merge with conflicts in {', '.join(unmerged)}: keep "
                                 f"one version of each conflicting block, delete the marker lines, git add, then "
                                 f"sync again (or undo the merge: git merge --abort in {repo})", exit_code=RUNTIME)
        unstaged = runner.run(repo, "diff", "--name-only").stdout.split()
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
    out = runner.run(repo, "status", "--porcelain", "-z", "--untracked-files=all").stdout.split("\0")
    found, skip = [], False
    for record in out:
        if skip or not record:
            skip = False
            continue
        state, path = record[:2], record[3:]
        skip = state[0] in "RC"  # a rename's or copy's source follows
        if state != "??" or is_scope_file(path):
            found.append(path)
    return found


def _fetch(store: Store, name: str, branch: str) -> str | None:
    """Fetch the remote's branch; its commit, or None when the remote does not have it (yet)."""
    tracking = f"refs/remotes/{name}/{branch}"
    proc = runner.run(store.path, "fetch", "--quiet", "--no-tags", name, f"+refs/heads/{branch}:{tracking}",
                      env=NETWORK, check=False)
    if proc.returncode != 0:
        if "couldn't find remote ref" in proc.stderr:
            runner.run(store.path, "update-ref", "-d", tracking, check=False)
            return None
        raise WhetstoneError(f"cannot fetch {store.skill} from {name}: {last_line(proc)}", exit_code=RUNTIME)
    return runner.run(store.path, "rev-parse", "--verify", "-q", tracking).stdout.strip() or None


def _push(store: Store, name: str, branch: str, commit: str, theirs: str | None) -> bool:
    """Push `commit` to the remote's branch: True when it landed, False when the remote moved on
    (fetch and merge again); any other refusal is an error."""
    upstream = runner.run(store.path, "config", "--get", f"branch.{branch}.remote", check=False).stdout.strip()
    proc = runner.run(store.path, "push", "--porcelain", *([] if upstream else ["--set-upstream"]), name,
                      f"{commit}:refs/heads/{branch}", env=NETWORK, check=False)
    if proc.returncode == 0:
        if not upstream:
            runner.run(store.path, "branch", "--set-upstream-to", f"{name}/{branch}", branch, check=False)
        return True
    said = proc.stdout + proc.stderr
    if "[rejected]" in said or "fetch first" in said or "non-fast-forward" in said:
        return False
    raise WhetstoneError(f"{store.skill} is up to date here, but the push to {name} failed: {last_line(proc)}",
                         exit_code=RUNTIME)


def _count(repo: Path, spec: str) -> int:
    out = runner.run(repo, "rev-list", "--count", spec, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


# --- merging ----------------------------------------------------------------------------------------

def _merge(store: Store, theirs: str, label: str) -> Settlement:
    """Merge `theirs` into HEAD with the drivers, settle the ids and commit. With conflicts left,
    nothing is committed: the merge stays in progress for a person."""
    repo = store.path
    if runner.run(repo, "cat-file", "-e", f"{theirs}:next_ids.json", check=False).returncode != 0:
        raise WhetstoneError(f"{label} is not a whetstone store (it has no next_ids.json); nothing was merged")
    base = runner.run(repo, "merge-base", "HEAD", theirs, check=False).stdout.strip() or None
    # two stores started apart (attach on each machine) share no history; they are still one skill
    unrelated = [] if base else ["--allow-unrelated-histories"]
    proc = runner.run(repo, "merge", "--no-ff", "--no-commit", "-q", *unrelated, "-m", f"sync: merge {label}",
                      theirs, check=False, env={"WHETSTONE_WRITING": "1"})
    if proc.returncode != 0 and runner.in_progress(repo) != "merge":
        raise WhetstoneError(f"git merge of {label} failed in {repo}: {last_line(proc)}; nothing was merged",
                             exit_code=RUNTIME)
    return _finish(store, [runner.head(repo) or "HEAD", theirs])


def _conclude(store: Store) -> Settlement:
    """Conclude a merge the user resolved (after a sync stopped on a conflict, or a plain git pull)."""
    repo = store.path
    return _finish(store, [runner.head(repo) or "HEAD", (repo / ".git" / "MERGE_HEAD").read_text().split()[0]])


def _finish(store: Store, parents: list[str]) -> Settlement:
    """Settle the ids of a merge git has made (and resolve what it left), then commit it; the
    settlement, whose `conflicts` say what stopped the commit."""
    repo = store.path
    base = runner.run(repo, "merge-base", *parents, check=False).stdout.strip() or None
    conflicts = _resolve(store)
    current = (repo / "next_ids.json").read_text(encoding="utf-8") if (repo / "next_ids.json").exists() else None
    on_disk = {rel: data.decode("utf-8", "replace") for rel, data in store.scope_texts().items()}
    plan = settle(repo, on_disk, parents, base, current)
    conflicts += plan.conflicts
    plan.conflicts = conflicts
    held = {c["path"] for c in conflicts}
    writes: dict[str, str | None] = dict(plan.files)
    writes["next_ids.json"] = plan.next_ids
    # one stage: none of these files is committed until the merge is, so their order does not matter
    write_many_atomic([[(repo / rel, None if text is None else text.encode("utf-8"))
                        for rel, text in writes.items()]])
    staged = [rel for rel in writes if rel not in held]
    runner.run(repo, "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul", input="\0".join(staged))
    if conflicts:
        return plan
    message_file = repo / ".git" / "MERGE_MSG"
    subject = message_file.read_text(encoding="utf-8").split("\n", 1)[0] if message_file.exists() else ""
    if not subject.startswith("sync: "):
        subject = "sync: conclude the merge"
    renames = ", ".join(f"{r['from']} as {r['to']}" for r in plan.reminted)
    body = "".join(f"{r['from']} -> {r['to']} in {r['path']} (minted on both sides)\n" for r in plan.reminted)
    runner.commit_staged(repo, subject + (f"; re-mint {renames}" if renames else "") + ("\n\n" + body if body else "\n"))
    if plan.reminted:
        events.append(repo, "remint", via="sync", reminted=plan.reminted)
    return plan


def _resolve(store: Store) -> list[dict[str, Any]]:
    """Resolve what git left unmerged that the drivers never saw (a block changed on one side in a
    file the other deleted, say) or could not settle: scope files block by block, next_ids.json to
    the maximum. Returns the conflicts that remain for a person."""
    repo = store.path
    stages: dict[str, dict[int, str]] = {}
    for line in runner.run(repo, "ls-files", "-u", "-z").stdout.split("\0"):
        if line:
            info, path = line.split("\t", 1)
            _, sha, stage = info.split()
            stages.setdefault(path, {})[int(stage)] = sha
    conflicts: list[dict[str, Any]] = []
    for rel, found in sorted(stages.items()):
        texts = [runner.run(repo, "cat-file", "blob", found[n]).stdout if n in found else "" for n in (1, 2, 3)]
        if is_scope_file(rel):
            merged = merge_scope(*texts, rel)
            if merged is None:
                conflicts.append({"path": rel, "id": None, "message": (
                    f"{rel} could not be merged block by block (a side holds broken markdown); merge it by hand")})
                continue
            text, ids = merged
            conflicts += [{"path": rel, "id": bid, "message": f"both sides changed {bid} differently"} for bid in ids]
        elif rel == "next_ids.json":
            text, ids = merge_ids(*texts) or "", []
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
            runner.run(repo, "add", "-A", "--", rel)
    return conflicts


def _after_change(store: Store, ws: Workspace) -> list[str]:
    """What the post-merge hook does, for merges sync made itself: ids, index. Its warnings."""
    store.keep_ids(top_ids(store.scope_texts()))
    said = list(store.warnings) + refresh_index(store, ws)
    store.warnings.clear()
    return said
