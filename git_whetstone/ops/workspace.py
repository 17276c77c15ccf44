"""What every operation starts from: one call's configuration and the embedder it names.

Built once per library call (`Workspace.of`: the configuration a door already loaded, else the
config file and the environment) and passed down, so nothing below asks for the configuration or
makes an embedder on its own.
"""
from __future__ import annotations

from ..base.config import Config, load
from ..base.progress import Progress
from ..index.freshness import snapshot
from ..index.snapshot import Snapshot
from ..semantics.embed import Embedder, get_embedder
from ..store.store import Store


class Workspace:
    """The configuration of one library call, and the embedder it names (made on first use); and
    who to tell, `progress(done, total)`, how a build of the index goes (a door on a terminal)."""

    def __init__(self, config: Config, progress: Progress | None = None) -> None:
        self.config = config
        self.progress = progress
        self._embedder: Embedder | None = None

    @classmethod
    def of(cls, config: Config | None = None, progress: Progress | None = None) -> "Workspace":
        """The configuration given (a door that loaded it already), else the one the config file and
        the environment say now."""
        return cls(config if config is not None else load(), progress)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = get_embedder(self.config.embedding_backend, self.config.embedding_model)
        return self._embedder

    def store(self, skill: object, *, must_exist: bool = False) -> Store:
        store = Store.open(self.config, skill)
        if must_exist:
            store.require()
        return store

    def snapshot(self, store: Store) -> Snapshot:
        """`store`'s entries and vectors, up to date with its files."""
        return snapshot(store, self.embedder, self.progress)
