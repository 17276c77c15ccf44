"""How a message names the call that answers it. The library writes every call it suggests in the MCP
tools' notation (`confirm='same:L1'`, `revise(entry_id='L2', action='promote', confirm='yes')`), which
its JSON carries; the command line prints the same messages in its own words (`for_command_line`).
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
