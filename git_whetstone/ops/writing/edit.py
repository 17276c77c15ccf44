"""Hand edits (SPEC §4, §7): `validate` checks a store as the pre-commit hook does; `edit` opens copies
of the scope files (in a private directory under `.git/`) in $VISUAL/$EDITOR and commits the result
only when it is valid, in one commit naming the ids it touched.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from ...base.clock import today
from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError, shown
from ...format import blocks, edits
from ...format.blocks import FormatError
from ...format.checks import check, conflict_hint, top_ids
from ...format.layout import KIND_FOLDER, scope_key
from ...git import runner, tree
from ...store.store import Store
from ..workspace import Workspace

PLACEHOLDER = "Write the rule here: one or more paragraphs. Save and quit to commit it."
_SCOPE_LINE = re.compile(r"^- scope: (.*?)\r?$", re.M)

Ask = Callable[[list[FormatError]], bool]


def validate(skill: str, staged: bool = False, *, config: Config | None = None) -> dict[str, Any]:
    """Check every scope file of `skill` (as on disk, or with `staged` as staged for the next
    commit) and the ids across them. `valid` is False when there is any error."""
    store = Workspace.of(config).store(skill, must_exist=True)
    files = tree.staged_files(store.path) if staged else store.scope_texts()
    errors = check(files)
    hint = conflict_hint(errors)
    return {"skill": store.skill, "path": str(store.path), "staged": staged, "files": len(files),
            "valid": not errors,
            "errors": [{"path": e.path, "line": e.line, "message": e.message, "text": str(e)} for e in errors],
            **({"hint": hint} if hint else {})}


def edit(skill: str, scope: str | None = None, *, issue: bool = False, config: Config | None = None,
         editor: str | None = None, ask: Ask | None = None) -> dict[str, Any]:
    """Open SKILL's scope files (those of `scope`, or a new file for a new scope; every file when no
    scope is given) in an editor, validate the result and commit it. `ask(errors)` says whether to
    re-open the editor on an invalid edit (without it, the edit is dropped)."""
    store = Workspace.of(config).store(skill, must_exist=True)
    originals, initial = _targets(store, scope, issue)
    result: dict[str, Any] = {"skill": store.skill, "path": str(store.path), "status": None, "message": None,
                              "files": sorted(initial), "added": [], "changed": [], "moved": [], "removed": [],
                              "errors": [], "warnings": store.warnings}
    workdir = Path(tempfile.mkdtemp(prefix="whetstone-edit-", dir=store.path / ".git"))
    keep_workdir = False
    try:
        copies = {rel: workdir / rel for rel in initial}
        for rel, text in initial.items():
            copies[rel].parent.mkdir(parents=True, exist_ok=True)
            copies[rel].write_text(text, encoding="utf-8")
        command = editor or _editor(store)
        while True:
            # like git, the editor setting is a shell command ("code --wait" works); the files go as "$@"
            code = subprocess.call(["sh", "-c", f'{command} "$@"', command, *sorted(initial)], cwd=workdir)
            if code != 0:
                raise WhetstoneError(f"the editor ({command}) exited with status {code}; nothing changed",
                                     exit_code=RUNTIME)
            edited = {rel: copies[rel].read_bytes() for rel in copies}
            # a file left empty is deleted; a new file left as it started (or empty) is not created
            changed = {rel for rel, data in edited.items()
                       if (data if data.strip() else None) != originals[rel]
                       and not (originals[rel] is None and (not data.strip() or data == initial[rel].encode()))}
            if not changed:
                result.update(status="unchanged", message="nothing changed")
                return result
            files = store.scope_texts()
            for rel in changed:
                files.pop(rel, None)
                if edited[rel].strip():
                    files[rel] = edited[rel]
            errors = check(files, full=changed)
            if not errors:
                break
            if ask is None or not ask(errors):
                result.update(status="aborted", message="the edit was invalid and was dropped; nothing changed",
                              errors=[str(e) for e in errors])
                return result
        old = {rel: data.decode("utf-8", "replace") for rel, data in originals.items() if data is not None}
        new = {rel: edited[rel].decode("utf-8") for rel in edited if edited[rel].strip()}
        summary = _summary({rel: old[rel] for rel in old if rel in changed},
                           {rel: new[rel] for rel in new if rel in changed})
        message = _message(summary, sorted(changed))
        with store.lock():
            for rel in changed:  # the store must not have moved under the editor (a capture, say)
                path = store.path / rel
                now = path.read_bytes() if path.exists() else None
                if now != originals[rel]:
                    keep_workdir = True
                    raise WhetstoneError(f"{rel} changed while you were editing it; nothing was committed. Your "
                                         f"version is kept in {workdir}: run edit again and carry it over",
                                         exit_code=RUNTIME)
            writes: dict[Path, str | None] = {store.path / rel: new.get(rel) for rel in sorted(changed)}
            # next_ids.json keeps up with ids written by hand, in the same commit
            ids_text, ids_path = store.keep_ids(top_ids(files)), store.path / "next_ids.json"
            if not ids_path.exists() or ids_path.read_text(encoding="utf-8") != ids_text:
                writes[ids_path] = ids_text
            try:
                store.write_and_commit(message, writes)
            except WhetstoneError as exc:
                keep_workdir = True
                raise WhetstoneError(f"{exc.message}; your edit is kept in {workdir}",
                                     exit_code=exc.exit_code) from None
        result.update(status="committed", message=message.split("\n", 1)[0], commit=store.head(), **summary)
        return result
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _editor(store: Store) -> str:
    """$VISUAL, $EDITOR, then git's own choice (core.editor, else vi)."""
    for name in ("VISUAL", "EDITOR"):
        if os.environ.get(name, "").strip():
            return os.environ[name]
    chosen = runner.run(store.path, "var", "GIT_EDITOR", check=False).stdout.strip()
    return chosen or "vi"


def _targets(store: Store, scope: str | None, issue: bool) -> tuple[dict[str, bytes | None], dict[str, str]]:
    """The files to edit, as (their bytes now, None for a new file) and (the text the editor starts
    with): every scope file, or those holding `scope`, or a new file with a template block."""
    kinds = ["issue"] if issue else list(KIND_FOLDER)
    files = {store.rel(p): p.read_bytes() for kind in kinds for p in store.scope_files(kind)}
    if scope is None:
        if issue:
            raise WhetstoneError("--issue needs a SCOPE: the scope whose issues to edit or start")
        if not files:
            raise WhetstoneError(f"{store.skill} has no entries yet; give a SCOPE to start a file")
    else:
        if not isinstance(scope, str) or not " ".join(scope.split()):
            raise WhetstoneError(f"scope is empty, got {shown(scope)}")
        scope = " ".join(scope.split())
        key = scope_key(scope)
        files = {rel: data for rel, data in files.items()
                 if any(scope_key(m.group(1)) == key for m in _SCOPE_LINE.finditer(data.decode("utf-8", "replace")))}
        if not files:
            kind = "issue" if issue else "learning"
            with store.lock():
                entry_id, _ = store.mint(kind, top_ids(store.scope_texts()))
            rel = store.rel(store.file_for_scope(kind, scope, {}))
            return {rel: None}, {rel: _template(entry_id, scope)}
    for rel, data in files.items():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise WhetstoneError(f"{rel}:1: not valid UTF-8; fix the file before editing it") from None
    return dict(files), {rel: data.decode("utf-8") for rel, data in files.items()}


def _template(entry_id: str, scope: str) -> str:
    day = today().isoformat()
    fields: list[tuple[str, str]] = []
    if entry_id.startswith("L"):
        fields += [("recurrence", "1"), ("first_seen", day), ("last_seen", day)]
    fields += [("scope", scope), ("provenance", blocks.encode_value(f"{day} — written by hand"))]
    return edits.render(entry_id, "A short title for the rule", fields, PLACEHOLDER)


def _claims(texts: dict[str, str]) -> dict[str, tuple[str, str, str, str]]:
    """id → (file, its block's text, scope, title) over `texts`."""
    out = {}
    for rel, text in texts.items():
        for block in blocks.parse(text, rel, rel.split("/", 1)[0]).blocks:
            out.setdefault(block.id, (rel, block.raw.rstrip().replace("\r\n", "\n"), block.scope, block.title))
    return out


def _summary(before: dict[str, str], after: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """Which ids the edit added, changed, moved to another file, or removed."""
    old, new = _claims(before), _claims(after)
    out: dict[str, list[dict[str, str]]] = {"changed": [], "added": [], "moved": [], "removed": []}

    def item(bid: str, claim: tuple[str, str, str, str]) -> dict[str, str]:
        return {"id": bid, "file": claim[0], "scope": claim[2], "title": claim[3]}

    for bid in sorted(new, key=_id_order):
        if bid not in old:
            out["added"].append(item(bid, new[bid]))
        elif new[bid][0] != old[bid][0]:
            out["moved"].append(item(bid, new[bid]))
        elif new[bid][1] != old[bid][1]:
            out["changed"].append(item(bid, new[bid]))
    out["removed"] = [item(bid, old[bid]) for bid in sorted(old, key=_id_order) if bid not in new]
    return out


def _id_order(bid: str) -> tuple[int, str]:
    return int(bid[1:]), bid[0]


def _message(summary: dict[str, list[dict[str, str]]], files: list[str]) -> str:
    """`edit: change L3, add L9 (color encoding)`, then one line per id."""
    parts, scopes, lines = [], [], []
    for key, verb in (("changed", "change"), ("added", "add"), ("moved", "move"), ("removed", "remove")):
        if summary[key]:
            parts.append(f"{verb} {', '.join(i['id'] for i in summary[key])}")
        for i in summary[key]:
            if i["scope"] and i["scope"] not in scopes:
                scopes.append(i["scope"])
            lines.append(f"{verb} {i['id']} · {i['title']}")
    if not parts:
        return f"edit: reformat {', '.join(files)}\n"
    where = ", ".join(scopes[:3]) + (", …" if len(scopes) > 3 else "")
    return f"edit: {', '.join(parts)}" + (f" ({where})" if where else "") + "\n\n" + "\n".join(lines) + "\n"
