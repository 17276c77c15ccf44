"""The files whetstone ships that are not Python (the hook shims, the man page: in a wheel, `_hooks/`
and `_man/` inside the package; in a checkout, the top-level `hooks/` and `man/`), and the command
that reaches this installation, which the shims and the merge drivers call back into.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from .errors import RUNTIME, WhetstoneError

PACKAGE = Path(__file__).resolve().parent.parent
MAN_PAGE = "git-whetstone.1"


def _find(packaged: str, checkout: str) -> Path:
    for candidate in (PACKAGE / packaged, PACKAGE.parent / checkout):
        if candidate.is_file():
            return candidate
    raise WhetstoneError(f"whetstone is installed without its {packaged.split('/')[-1]} file "
                         f"(looked in {PACKAGE / packaged} and {PACKAGE.parent / checkout}); reinstall it",
                         exit_code=RUNTIME)


def shim(name: str) -> str:
    """The source of the hook shim `name` (pre-commit, post-commit, …)."""
    return _find(f"_hooks/{name}", f"hooks/{name}").read_text(encoding="utf-8")


def man_page() -> Path:
    """Where this installation's copy of git-whetstone.1 is."""
    return _find(f"_man/{MAN_PAGE}", f"man/{MAN_PAGE}")


def launcher() -> tuple[str, str]:
    """What a hook shim or a merge driver should run to reach this whetstone: its `git-whetstone`
    beside its Python, else the Python itself and the directory that holds the package (for
    `-m git_whetstone`)."""
    python = Path(sys.executable)
    script = python.parent / "git-whetstone"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script), ""
    return str(python), str(PACKAGE.parent)


def default_man_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "man" / "man1"


def install_man(directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Copy the man page into `directory` (default `~/.local/share/man/man1`, which `man` searches
    when ~/.local/bin is on PATH), for installers that drop a wheel's data files."""
    target_dir = Path(directory).expanduser() if directory not in (None, "") else default_man_dir()
    source = man_page()
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / MAN_PAGE
        shutil.copyfile(source, target)
        target.chmod(0o644)
    except OSError as exc:
        raise WhetstoneError(f"cannot write the man page into {target_dir}: {exc.strerror or exc}",
                             exit_code=RUNTIME) from None
    return {"source": str(source), "path": str(target), "directory": str(target_dir)}
