"""A store's git remotes (`git whetstone remote SKILL add URL | remove NAME | list`): any git remote
carries a store. `add` on a machine without the store clones it (or starts it, from an empty remote).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError, shown
from ...git import runner
from ...git.runner import last_line
from ...store.store import Store
from ..writing.attach import create
from ..workspace import Workspace
from .drivers import install_drivers
from .hooks import ensure

# Nobody is there to type a password in a cron job or an agent host: fail instead of waiting.
NETWORK = {"GIT_TERMINAL_PROMPT": "0"}
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def remote(skill: str, action: str | None = None, target: str | None = None, name: str | None = None, *,
           config: Config | None = None) -> dict[str, Any]:
    """`git whetstone remote SKILL [add URL | remove NAME | list]`: add records URL as remote `name`
    (default origin), cloning or creating the store where there is none yet."""
    store = Workspace.of(config).store(skill)
    action = action or "list"
    if action == "add":
        return _add(store, target, remote_name(name or "origin"))
    if name not in (None, ""):
        raise WhetstoneError("--name goes with add (remove takes the remote's name as its argument)")
    if action == "list":
        if target not in (None, ""):
            raise WhetstoneError(f"remote {store.skill} list takes no argument, got {shown(target)}")
        store.require()
        return {"skill": store.skill, "path": str(store.path), "status": "listed", "remotes": remotes(store)}
    if action == "remove":
        store.require()
        gone = remote_name(target or "")
        if gone not in {r["name"] for r in remotes(store)}:
            raise WhetstoneError(f"{store.skill} has no remote named {gone}")
        runner.run(store.path, "remote", "remove", gone)
        return {"skill": store.skill, "path": str(store.path), "status": "removed", "remote": gone,
                "remotes": remotes(store)}
    raise WhetstoneError(f"unknown remote action {shown(action)}: use add, remove or list")


def remotes(store: Store) -> list[dict[str, str]]:
    """The store's remotes, by name, with the URL they fetch from."""
    out = runner.run(store.path, "remote", "-v").stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.rsplit(" ", 1)
        if len(parts) == 2 and parts[1] == "(fetch)" and "\t" in parts[0]:
            label, url = parts[0].split("\t", 1)
            found[label] = url
    return [{"name": label, "url": found[label]} for label in sorted(found)]


def pick(store: Store, wanted: str | None, branch: str) -> str | None:
    """The remote a sync of `branch` uses: `wanted`, else the branch's upstream, else origin, else the
    only one; None when there is none."""
    names = [r["name"] for r in remotes(store)]
    if wanted:
        if wanted not in names:
            raise WhetstoneError(f"{store.skill} has no remote named {wanted}"
                                 + (f" (it has: {', '.join(names)})" if names else ""))
        return wanted
    upstream = runner.run(store.path, "config", "--get", f"branch.{branch}.remote", check=False).stdout.strip()
    for choice in (upstream, "origin"):
        if choice in names:
            return choice
    if len(names) > 1:
        raise WhetstoneError(f"{store.skill} has several remotes ({', '.join(names)}): choose one with --remote")
    return names[0] if names else None


def remote_name(name: object) -> str:
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
    runner.run(store.path, "remote", "add", name, url)
    install_drivers(store)
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
    probe = runner.run(root, "ls-remote", "--heads", url, env=NETWORK, check=False)
    if probe.returncode != 0:
        raise WhetstoneError(f"cannot reach {url}: {last_line(probe)}", exit_code=RUNTIME)
    if not probe.stdout.strip():  # an empty repository: this machine's store is the first
        create(store)
        runner.run(store.path, "remote", "add", name, url)
        install_drivers(store)
        return {"created": True, "status": "added", "warnings": list(store.warnings)}
    heads = [line.split("\t", 1)[1][len("refs/heads/"):] for line in probe.stdout.splitlines() if "\t" in line]
    # stores live on main; a bare remote made with plain `git init --bare` may say master is its HEAD
    branch = "main" if "main" in heads else heads[0]
    work = root / f".{store.skill}.cloning-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        proc = runner.run(root, "clone", "-q", "--origin", name, "--branch", branch, url, str(work), env=NETWORK,
                          check=False)
        if proc.returncode != 0:
            raise WhetstoneError(f"cannot clone {url}: {last_line(proc)}", exit_code=RUNTIME)
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
    return {"created": True, "status": "cloned", "warnings": ensure(store)}
