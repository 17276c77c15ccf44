"""The merge drivers git runs for a store's files (SPEC §7): scope files block by block, next_ids.json
to the per-key maximum. Git clones neither the `merge.<name>.driver` config nor .git/info/attributes,
so they are installed with the hooks, and call back into the installing whetstone as the shims do.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from ...base.errors import WhetstoneError
from ...base import resources
from ...format.counters import merge_ids
from ...format.merging import merge_scope
from ...git import runner
from ...store.store import Store

BLOCKS_DRIVER = "whetstone-blocks"
IDS_DRIVER = "whetstone-ids"
_BEGIN = "# whetstone: merge drivers (git whetstone hooks install/uninstall keep these lines)"
_END = "# whetstone: end of merge drivers"
ATTRIBUTES = (f"/learnings/*.md merge={BLOCKS_DRIVER}", f"/issues/*.md merge={BLOCKS_DRIVER}",
              f"/next_ids.json merge={IDS_DRIVER}")


def run_driver(kind: str, base: str, ours: str, theirs: str, marker_size: str, path: str) -> int:
    """What `git whetstone merge-driver` does for git: merge the three files, write the result over
    `ours`, and return 0 when it is clean, 1 when a conflict is left. Something that is not blocks
    (or not UTF-8) goes to git's own line merge, so the driver never loses what it cannot read."""
    size = int(marker_size) if marker_size.isdigit() else 7
    try:
        texts = [Path(p).read_bytes().decode("utf-8") for p in (base, ours, theirs)]
    except UnicodeDecodeError:
        texts = None
    if kind == "ids":
        merged = merge_ids(*texts) if texts else None
        if merged is None:
            return 1
        Path(ours).write_text(merged, encoding="utf-8")
        return 0
    if kind != "blocks":
        raise WhetstoneError(f"unknown merge driver '{kind}' (expected blocks or ids)")
    result = merge_scope(*texts, path, size) if texts else None
    if result is None:
        proc = runner.run(Path.cwd(), "merge-file", f"--marker-size={size}", "-L", "ours", "-L", "base", "-L",
                          "theirs", ours, base, theirs, check=False, inherit=True)
        return 0 if proc.returncode == 0 else 1
    text, conflicts = result
    with open(ours, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return 1 if conflicts else 0


def _driver_command(kind: str) -> str:
    """The command git runs (through sh), written for the whetstone installing it, with
    `git-whetstone` on PATH as the fallback, as the hook shims do."""
    exe, path = resources.launcher()
    args = f"merge-driver {kind} %O %A %B %L %P"
    if path:
        first = f"PYTHONPATH={shlex.quote(path)}${{PYTHONPATH:+:$PYTHONPATH}} {shlex.quote(exe)} -m git_whetstone"
    else:
        first = shlex.quote(exe)
    return f"if [ -x {shlex.quote(exe)} ]; then {first} {args}; else git-whetstone {args}; fi"


def _attributes(store: Store) -> tuple[Path, str]:
    """The store's .git/info/attributes and its text ("" when there is none), read as text so that
    CRLF lines compare as the LF lines written back."""
    rel = runner.run(store.path, "rev-parse", "--git-path", "info/attributes").stdout.strip()
    path = (store.path / rel).resolve()
    try:
        return path, path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return path, ""


def _without_ours(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if line == _BEGIN:
            inside = True
        elif line == _END and inside:
            inside = False
        elif not inside:
            lines.append(line)
    return lines


def _wanted() -> dict[str, str]:
    return {f"merge.{BLOCKS_DRIVER}.name": "whetstone: scope files, block by block",
            f"merge.{BLOCKS_DRIVER}.driver": _driver_command("blocks"),
            f"merge.{IDS_DRIVER}.name": "whetstone: next_ids.json, the per-key maximum",
            f"merge.{IDS_DRIVER}.driver": _driver_command("ids")}


def _configured(store: Store) -> dict[str, str]:
    out = runner.run(store.path, "config", "--local", "--get-regexp", r"^merge\.whetstone-", check=False).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)  # git lowers the keys


def drivers_status(store: Store) -> tuple[bool, str]:
    """Whether this clone merges scope files and next_ids.json through whetstone (for doctor), and
    what is missing."""
    have = _configured(store)
    # another whetstone's command (another install) still runs, with git-whetstone on PATH as its fallback
    missing = [key for key in _wanted() if key.endswith(".driver") and "merge-driver " not in have.get(key.lower(), "")]
    selected = _BEGIN in _attributes(store)[1]
    if not missing and selected:
        return True, "scope files and next_ids.json merge block by block (.git/config, .git/info/attributes)"
    what = [f"{len(missing)} driver command{'s' if len(missing) != 1 else ''} not configured"] if missing else []
    what += [] if selected else ["not selected in .git/info/attributes"]
    return False, (f"merge drivers: {'; '.join(what)} (a clone never carries them), so a git pull merges "
                   f"learnings line by line and can leave conflicts or ids claimed twice")


def install_drivers(store: Store) -> str:
    """Define the two drivers in the store's git config and select them in .git/info/attributes
    (other lines there are kept). Returns "installed", "updated" or "unchanged"."""
    wanted, have = _wanted(), _configured(store)
    changed = False
    for key, value in wanted.items():
        if have.get(key.lower()) != value:
            runner.run(store.path, "config", "--local", key, value)
            changed = True
    target, old = _attributes(store)
    new = "\n".join(_without_ours(old) + [_BEGIN, *ATTRIBUTES, _END]) + "\n"
    if new != old:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(new, encoding="utf-8")
        changed = True
    if not changed:
        return "unchanged"
    return "updated" if have or _BEGIN in old else "installed"


def uninstall_drivers(store: Store) -> str:
    """Remove the drivers' config and attribute lines; "removed" or "absent"."""
    removed = runner.run(store.path, "config", "--local", "--remove-section", f"merge.{BLOCKS_DRIVER}",
                         check=False).returncode == 0
    removed |= runner.run(store.path, "config", "--local", "--remove-section", f"merge.{IDS_DRIVER}",
                          check=False).returncode == 0
    target, old = _attributes(store)
    if _BEGIN in old:
        kept = _without_ours(old)
        target.write_text("\n".join(kept) + "\n" if kept else "", encoding="utf-8")
        removed = True
    return "removed" if removed else "absent"
