#!/usr/bin/env python3
"""Set up and run whetstone from a source checkout with nothing but Python 3.11+ and git.

    python3 dev.py demo     make .venv, install whetstone, run a real round trip on a throwaway store
    python3 dev.py test     make .venv, install whetstone with its dev and embeddings extras, run the whole test suite
    python3 dev.py bench    make .venv, install whetstone, run the benchmark (extra args go to bench/run.py)
    python3 dev.py eval     make .venv (as for test), measure recall, dedup and conflict quality on the
                            labeled set in tests/eval (extra args go to tests/eval/run.py)
    python3 dev.py wheel    build the wheel and the sdist, check what they carry, install the wheel in a
                            fresh virtual environment and run the demo from it (CI runs this)

Each command creates (or reuses) `.venv` beside this file and installs what it needs from PyPI;
reinstalling happens only when pyproject.toml changed.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
BIN = VENV / "bin"


def say(text: str) -> None:
    print(f"\033[1m==> {text}\033[0m" if sys.stdout.isatty() else f"==> {text}", flush=True)


def ensure_venv(extras: str) -> None:
    """Create .venv and install the project (editable) with `extras`, unless already done."""
    if sys.version_info < (3, 11):
        sys.exit("whetstone needs Python 3.11 or newer")
    if not (BIN / "python").exists():
        say(f"creating {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp = VENV / ".whetstone-installed"
    want = hashlib.sha256((HERE / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == want):
        install(extras, stamp, want)
    # An editable install has no bytecode, and PYTHONDONTWRITEBYTECODE (set in some shells and CI)
    # would make every command compile whetstone again; compile what changed, as an install does.
    subprocess.run([str(BIN / "python"), "-m", "compileall", "-q", str(HERE / "git_whetstone"),
                    str(HERE / "mcp_entry")], check=False, stdout=subprocess.DEVNULL)


def install(extras: str, stamp: Path, want: str) -> None:
    say(f"installing whetstone{extras} into {VENV}")
    pip = [str(BIN / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    if "embeddings" in extras and not _has(TORCH.split("==")[0]):
        # torch first, pinned: a CPU build; left to sentence-transformers, pip would pull a CUDA one
        subprocess.run([*pip, TORCH], check=True)
    subprocess.run([*pip, "-e", f"{HERE}{extras}"], check=True)
    stamp.write_text(want)


TORCH = "torch==2.13.0"


def _has(module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([str(BIN / "python"), "-c", probe]).returncode == 0


def demo(bin_dir: Path = BIN) -> int:
    """attach → capture (a rule for every task among them) → recall → git log on a store root that is thrown away afterwards, with the
    whetstone installed in `bin_dir` (the checkout's .venv by default)."""
    if bin_dir == BIN:
        ensure_venv("")
    with tempfile.TemporaryDirectory(prefix="whetstone-demo-") as root:
        env = dict(os.environ, WHETSTONE_STORE_ROOT=root, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        steps = [
            ["git", "whetstone", "attach", "great-tables"],
            ["git", "whetstone", "capture", "great-tables",
             "Format the price (msrp) column as US dollars with no decimal places.",
             "--scope", "currency formatting", "--provenance", "make the revenue column US dollars"],
            ["git", "whetstone", "capture", "great-tables", "Heat-map msrp with a warm YlOrBr palette, not green.",
             "--scope", "color encoding", "--provenance", "use a warm palette, not green"],
            ["git", "whetstone", "capture", "great-tables", "Never round the corners of a table.",
             "--scope", "corner radius", "--issue", "--provenance", "square corners, always"],
            # close to L1 in other words: whetstone does not guess, it asks (here: no terminal, so it
            # answers needs_confirmation), and the answer same:L1 reinforces L1
            ["git", "whetstone", "capture", "great-tables",
             "Show the price column in US dollars, no decimal places.",
             "--scope", "currency formatting", "--provenance", "dollars again, no cents"],
            ["git", "whetstone", "capture", "great-tables",
             "Show the price column in US dollars, no decimal places.",
             "--scope", "currency formatting", "--provenance", "dollars again, no cents", "--confirm", "same:L1"],
            # a rule for every task: every recall returns it first, whatever the task
            ["git", "whetstone", "capture", "great-tables", "Add a note naming the data source under every table.",
             "--scope", "source note", "--issue", "--always", "--provenance", "always cite the source"],
            ["git", "whetstone", "recall", "great-tables",
             "styling a gtcars table: currency formatting, color encoding, corner radius, row banding"],
            ["git", "whetstone", "log", "great-tables"],
        ]
        for step in steps:
            say(" ".join(f'"{a}"' if " " in a else a for a in step))
            if subprocess.run(step, env=env, stdin=subprocess.DEVNULL).returncode != 0:
                return 1
        store = Path(root) / "great-tables"
        say(f"the store on disk ({store}):")
        for path in sorted(store.glob("*/*.md")):
            print(f"--- {path.relative_to(store)}")
            print(path.read_text(encoding="utf-8"), end="")
    return 0


# What a wheel must carry besides the Python modules: the static backend's table, the hook shims and
# the man page inside the package, and the man page where `man` finds it.
WHEEL_FILES = ("git_whetstone/data/minilm-static.table", "git_whetstone/_man/git-whetstone.1",
               *(f"git_whetstone/_hooks/{name}" for name in ("pre-commit", "post-commit", "post-merge", "post-rewrite")),
               "git_whetstone/ops/writing/capture.py", "mcp_entry/server.py")


def wheel() -> int:
    """Build the wheel and the sdist, check their metadata and contents, install the wheel into a
    fresh virtual environment (its dependencies from the package index) and run the demo from it."""
    import email.parser
    import tomllib
    import zipfile
    import tarfile

    ensure_venv("[dev,embeddings]")  # hatchling, the build backend, is a dev dependency
    project = tomllib.loads((HERE / "pyproject.toml").read_text())["project"]
    with tempfile.TemporaryDirectory(prefix="whetstone-wheel-") as work:
        dist = Path(work) / "dist"
        say("building the wheel and the sdist")
        subprocess.run([str(BIN / "python"), "-m", "hatchling", "build", "-d", str(dist)], cwd=HERE, check=True,
                       stdout=subprocess.DEVNULL)
        (built,) = dist.glob("*.whl")
        (sdist,) = dist.glob("*.tar.gz")
        with zipfile.ZipFile(built) as archive:
            names = set(archive.namelist())
            (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
            meta = email.parser.Parser().parsestr(archive.read(meta_name).decode())
            scripts = archive.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
        problems = [f"the wheel lacks {name}" for name in WHEEL_FILES if name not in names]
        if not any(n.endswith(".data/data/share/man/man1/git-whetstone.1") for n in names):
            problems.append("the wheel does not put the man page in share/man/man1")
        if meta["Name"] != project["name"] or meta["Requires-Python"] != project["requires-python"]:
            problems.append(f"metadata: {meta['Name']} {meta['Requires-Python']}")
        problems += [f"no console script {s}" for s in project["scripts"] if f"{s} =" not in scripts]
        with tarfile.open(sdist) as archive:
            members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
        problems += [f"the sdist lacks {name}" for name in ("pyproject.toml", "README.md", "hooks/pre-commit",
                                                            "man/git-whetstone.1", "git_whetstone/data/minilm-static.table")
                     if name not in members]
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        say(f"{built.name} and {sdist.name} carry what they must; installing the wheel in a fresh environment")
        fresh = Path(work) / "venv"
        venv.EnvBuilder(with_pip=True).create(fresh)
        subprocess.run([str(fresh / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", str(built)], check=True)
        return demo(fresh / "bin")


def test(args: list[str]) -> int:
    ensure_venv("[dev,embeddings]")
    say("running the test suite")
    return subprocess.run([str(BIN / "python"), "-m", "pytest", *args], cwd=HERE).returncode


def bench(args: list[str]) -> int:
    ensure_venv("")
    return subprocess.run([str(BIN / "python"), str(HERE / "bench" / "run.py"), *args], cwd=HERE).returncode


def evaluate(args: list[str]) -> int:
    ensure_venv("[dev,embeddings]")
    return subprocess.run([str(BIN / "python"), "-m", "tests.eval.run", *args], cwd=HERE).returncode


def main() -> int:
    command, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "demo":
        return demo()
    if command == "test":
        return test(rest)
    if command == "bench":
        return bench(rest)
    if command == "eval":
        return evaluate(rest)
    if command == "wheel":
        return wheel()
    print(__doc__.strip())
    return 0 if command in ("-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
