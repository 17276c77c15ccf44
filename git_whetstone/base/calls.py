"""How a message names the call that answers it, phrased by the door it goes out through.

The library writes every call it suggests in one notation, the MCP tools': an argument as
`confirm='same:L1'` or `target='L3'`, a call of another tool as
`revise(entry_id='L2', action='promote', confirm='yes')`. That is what its JSON says, to an MCP
agent and to `--json`. The command line prints the same messages in its own words
(`--confirm same:L1`, `git whetstone revise SKILL L2 promote --confirm`): `for_command_line` turns
the one notation into the other, and the CLI applies it to everything it prints for a person
(`cli.main.emit` and its one-line errors). A message that follows the notation reads right
through either door; nothing else needs to know which door it is.
"""
from __future__ import annotations

import re

_CALL = re.compile(r"\brevise\(((?:\w+='[^']*'(?:, )?)+)\)")
_ARG = re.compile(r"\b(\w+)='([^']*)'")
_OPTION = re.compile(r"\b(confirm|target)='([^']*)'")
_ALWAYS = {"always=true|false": "--always / --scoped", "always=true": "--always", "always=false": "--scoped"}


def for_command_line(text: str, skill: str = "SKILL") -> str:
    """`text` with each call in the MCP notation phrased as the command line's: a call of revise
    as the command (of `skill`), confirm and target as options (`--confirm` alone for yes), always
    as --always / --scoped."""
    text = _CALL.sub(lambda m: _revise_command(dict(_ARG.findall(m.group(1))), skill), text)
    text = _OPTION.sub(lambda m: _option(m.group(1), m.group(2)), text)
    for said, option in _ALWAYS.items():
        text = text.replace(said, option)
    return text


def _revise_command(args: dict[str, str], skill: str) -> str:
    words = ["git whetstone revise", skill, args.pop("entry_id", "ID")]
    if "action" in args:
        words.append(args.pop("action"))
    words += [_option(name, value) for name, value in args.items()]
    return " ".join(words)


def _option(name: str, value: str) -> str:
    return "--confirm" if (name, value) == ("confirm", "yes") else f"--{name.replace('_', '-')} {value}"
