"""Every test runs against a throwaway store root, config dir and HOME; nothing touches the user's."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

try:  # sentence-transformers' progress bars start tqdm's monitor thread, which outlives the test that
    import tqdm  # loaded a model; a build in a process with a second thread stays off the workers
    tqdm.tqdm.monitor_interval = 0  # (build._can_fork), so later tests expecting them would fail by order
except ImportError:
    pass

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer", "GIT_COMMITTER_EMAIL": "committer@example.com",
}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private store root, config directory and HOME, and a git identity for test commits."""
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "stores"
    for key in [k for k in os.environ if k.startswith("WHETSTONE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("WHETSTONE_STORE_ROOT", str(root))
    # The behaviour tests pin the word-matching backend: their expectations (which rules meet, which
    # merge) are about whetstone's mechanics, not about one embedding table's similarities. The
    # default backend (static) is tested on its own in test_static_embed and, for quality, on the
    # labeled set in test_eval_set.
    monkeypatch.setenv("WHETSTONE_EMBEDDING_BACKEND", "hashing")
    for key, value in GIT_IDENTITY.items():
        monkeypatch.setenv(key, value)
    from git_whetstone.git import runner
    from git_whetstone.index import freshness
    for snap in freshness.LIVE.values():  # the last test's descriptors, not left to the collector
        freshness.close(snap)
    freshness.LIVE.clear()
    runner._CONFIGURED.clear()
    return root


@pytest.fixture
def store_root(isolated: Path) -> Path:
    return isolated
