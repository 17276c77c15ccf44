"""recall finds what the task needs (issue 41): a rare word the intent shares with a rule, a scope
the intent names among other things, and nothing but the always-on rules for a task no rule is
about. The same stores and intents are checked through the CLI and the MCP server in
tests/doors/test_mcp.py (`test_recall_finds_words_named_scopes_and_keeps_quiet`)."""
from __future__ import annotations

from pathlib import Path

import pytest

from git_whetstone.base.config import BACKENDS
from git_whetstone.ops.recall import recall
from git_whetstone.ops.writing.capture import capture

# (polarity, rule, scope, always): two small stores a person could have built
LEDGER = [
    ("learning", "Put negative amounts in parentheses, like (1,200), with no minus sign.", "amounts", False),
    ("learning", "Right-align every numeric column.", "column alignment", False),
    ("learning", "Write the heading in sentence case, without a trailing period.", "heading", False),
    ("learning", "Use thousands separators for amounts of four digits or more.", "amounts", False),
    ("learning", "Shade every other row once a grid runs past ten rows.", "row shading", False),
    ("learning", "Label each column with its unit in brackets, like Cost [EUR].", "column labels", False),
    ("issue", "Never show more than two decimal places.", "decimals", False),
    ("learning", "Set every grid in the Inter typeface.", "typeface", True),
]
HELPDESK = [
    ("learning", "Open with 'Hi' and the customer's first name.", "greeting", False),
    ("learning", "Close with the agent's first name and the team name.", "sign-off", False),
    ("learning", "Sound calm and friendly, never defensive.", "tone", False),
    ("learning", "Link the help-centre article instead of pasting the steps.", "links", False),
    ("learning", "Apologise once, at the start, when we caused the problem.", "apologies", False),
    ("learning", "Ask for the order number before looking into a refund.", "refunds", False),
    ("issue", "Never give a customer a date for a feature that is not out yet; say it is on the roadmap.",
     "roadmap questions", False),
    ("issue", "Never share one customer's details with another.", "privacy", False),
    ("learning", "Keep every reply under 120 words.", "length", True),
]
# (skill, intent, the rules it must bring back, by body; None: only the always-on rules)
ASKS = [
    ("ledger", "a table of monthly costs per department, some of them negative, with a short caption",
     [LEDGER[0][1]]),
    ("helpdesk", "answer a customer asking when the new reporting feature will ship", [HELPDESK[6][1]]),
    ("helpdesk", "a first reply to a new customer, covering the greeting, links, tone and sign-off",
     [HELPDESK[0][1], HELPDESK[1][1], HELPDESK[2][1], HELPDESK[3][1]]),
    ("helpdesk", "set up an inbox rule that files spam reports into a folder", None),
]
STORES = {"ledger": LEDGER, "helpdesk": HELPDESK}


def fill(capture_one) -> None:
    """Capture both stores' rules with `capture_one(skill, polarity, body, scope, always)`."""
    for skill, rules in STORES.items():
        for polarity, body, scope, always in rules:
            capture_one(skill, polarity, body, scope, always)


def check(skill: str, intent: str, wanted: list[str] | None, result: dict) -> None:
    """What a user sees: the rules wanted are among those returned; for an intent no rule is about,
    the always-on rules and nothing else."""
    got = [e["rule"] for e in result["learnings"] + result["issues"]]
    if wanted is None:
        always = [body for _, body, _, on in STORES[skill] if on]
        assert sorted(got) == sorted(always), (intent, got)
        assert all(e["always"] for e in result["learnings"] + result["issues"])
        assert result["other_scopes"], "the map of what else is stored stays"
    else:
        missing = [body for body in wanted if body not in got]
        assert not missing, (intent, missing, got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_recall_finds_rare_words_named_scopes_and_keeps_quiet(store_root: Path, monkeypatch, backend) -> None:
    if backend == "sentence-transformers":
        pytest.importorskip("sentence_transformers")
        from tests.helpers import model_dir
        monkeypatch.setenv("WHETSTONE_EMBEDDING_MODEL", str(model_dir()))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WHETSTONE_EMBEDDING_BACKEND", backend)
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    fill(lambda skill, polarity, body, scope, always: capture(skill, polarity, body, scope, "said so", always=always))
    for skill, intent, wanted in ASKS:
        check(skill, intent, wanted, recall(skill, intent))
