"""attach (SPEC §4): a skill's store, created and wired into git. Every operation that may create a
store goes through `create` here, so a store never exists without its hooks unless its owner took
them out.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...base.config import Config
from ...base.errors import WhetstoneError, shown
from ...git import runner
from ...store.create import create_repository
from ...store.store import Store
from ..workspace import Workspace
from ..sync.hooks import ensure


def create(store: Store) -> bool:
    """Make `store` if it does not exist, with its hooks; False when it already existed."""
    created = create_repository(store)
    if created:
        store.warnings += ensure(store)
    return created


def attach(skill: str, path: str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Create `skill`'s store (first commit, .gitignore, next_ids.json) unless it exists, and
    install its git hooks (see `hooks.ensure`). `path`, if given, is the skill's own directory,
    recorded in the store's git config."""
    store = Workspace.of(config).store(skill)
    skill_path = None
    if path not in (None, ""):
        if not isinstance(path, str):
            raise WhetstoneError(f"path must be a directory path, got {shown(path)}")
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_dir():
            raise WhetstoneError(f"path {shown(path)} is not a directory (give the skill's own directory)")
        skill_path = str(resolved)
    created = create(store)  # a new store gets its hooks there
    if not created:
        store.warnings += ensure(store)  # an existing one gets them refreshed
    if skill_path:
        runner.run(store.path, "config", "whetstone.skillPath", skill_path)
    return {"skill": store.skill, "path": str(store.path), "created": created,
            "status": "attached" if created else "already_attached",
            **({"skill_path": skill_path} if skill_path else {}),
            **({"warnings": store.warnings} if store.warnings else {})}
