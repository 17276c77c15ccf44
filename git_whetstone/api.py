"""The library's one API: every operation the doors call (SPEC §4), by name.

    from git_whetstone import api
    api.recall("great-tables", "styling a car price table: currency, alignment")

The CLI, the hooks and the MCP server call these and nothing else below them; each returns the
JSON the MCP tool returns (or raises `WhetstoneError` with a one-line message). The operations live
in `ops`'s subpackages, grouped by job: `writing` (attach, capture, revise, a hand edit), `recall`,
`upkeep` (compact, the global layer), `sharing` (packs, rule files), `sync` (remotes, merges,
hooks), `looking` (list, show, doctor, metrics, the report) and `hosts` (the context an agent
host's prompt hook adds, and those hooks in the host's settings). A name is loaded when first asked
for, so a command imports only the operation it runs.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

API = {
    # writing
    "attach": "writing.attach", "capture": "writing.capture", "revise": "writing.revise",
    "VERDICTS": "writing.capture",  # what a door's second opinion (`decide`) may answer
    "edit": "writing.edit", "validate": "writing.edit",
    # recall
    "recall": "recall",
    # upkeep
    "compact": "upkeep.compact", "compact_all": "upkeep.compact",
    "promote": "upkeep.global_layer", "promote_cluster": "upkeep.global_layer",
    # sharing
    "export": "sharing.exchange", "import_pack": "sharing.exchange",
    # sync
    "remote": "sync.remotes", "sync": "sync.sync", "run_driver": "sync.drivers",
    "install_hooks": "sync.hooks", "uninstall_hooks": "sync.hooks", "run_hook": "sync.hooks",
    "reindex": "sync.hooks",
    # looking
    "list_stores": "looking.browse", "show": "looking.browse", "path": "looking.browse",
    "history": "looking.browse", "doctor": "looking.doctor", "metrics": "looking.metrics",
    "report": "looking.report",
    # hosts
    "context": "hosts.context", "host_hooks": "hosts.settings",
}


def __getattr__(name: str) -> Any:
    if name not in API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__package__}.ops.{API[name]}"), name)


def __dir__() -> list[str]:
    return sorted(API)
