"""What capture and revise accept from a caller, checked before anything is touched: what could not
be written and read back exactly as given is refused with one line, the same through every door.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from ...base.clock import today
from ...base.errors import WhetstoneError, shown, unicode_text
from ...format import blocks, edits

MAX_BODY = 4000
MAX_SCOPE = 100
MAX_PROVENANCE = 1000
ANSWERS = {"yes": "yes", "y": "yes", "true": "yes", "confirm": "yes", "ok": "yes",
           "no": "no", "n": "no", "decline": "no",
           "new": "new", "separate": "new", "reinforce": "same", "same": "same", "replace": "replace",
           "keep": "keep"}
TARGETED = ("same", "replace", "keep")  # the answers that may name the entry they are about: same:L3
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_body(body: object) -> str:
    """A rule body as it will be written: trimmed, single blank lines between paragraphs."""
    if not isinstance(body, str):
        raise WhetstoneError(f"body must be text, got {shown(body)}")
    text = unicodedata.normalize("NFC", unicode_text(body, "body").replace("\r\n", "\n").replace("\r", "\n"))
    if _CONTROL.search(text.replace("\t", " ")):
        raise WhetstoneError("body contains control characters (NUL or similar); send plain text")
    lines = [line.rstrip() for line in text.strip().split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    if not text:
        raise WhetstoneError("body is empty: give the rule to remember")
    if len(text) > MAX_BODY:
        raise WhetstoneError(f"body is too long ({len(text)} characters; a rule fits in {MAX_BODY})")
    # A body is acceptable when a block holding it reads back as exactly that body: whatever the
    # format would misread (a heading, a list joining the metadata, an open fence) is refused here.
    for line in text.split("\n"):
        if line.startswith("#") and blocks.is_heading(line):
            raise WhetstoneError(f"body cannot be stored as written: the line {shown(line)} would be a heading")
    probe = blocks.parse(edits.render("I1", "probe", [("scope", "probe")], text), "body")
    if probe.errors or [b.body for b in probe.blocks] != [text]:
        problem = probe.errors[0].message if probe.errors else "it would not read back as written"
        raise WhetstoneError(f"body cannot be stored as written: {problem}")
    return text


def clean_scope(scope: object) -> str:
    if not isinstance(scope, str) or not " ".join(scope.split()):
        raise WhetstoneError("scope is empty: give a short phrase for when the rule applies")
    text = " ".join(unicodedata.normalize("NFC", unicode_text(scope, "scope")).split())
    if _CONTROL.search(text):
        raise WhetstoneError("scope contains control characters")
    if len(text) > MAX_SCOPE:
        raise WhetstoneError(f"scope is too long ({len(text)} characters; at most {MAX_SCOPE})")
    return text


def clean_provenance(provenance: object, *, cut: bool = False) -> str:
    """The caller's words as one line of provenance. Longer than `MAX_PROVENANCE` is refused, as an
    oversized body is (`cut`: shortened, with an ellipsis: a line a pack brings, already recorded)."""
    if provenance is None:
        return ""
    if not isinstance(provenance, str):
        raise WhetstoneError(f"provenance must be text, got {shown(provenance)}")
    text = " ".join(_CONTROL.sub(" ", unicode_text(provenance, "provenance")).split())
    if len(text) <= MAX_PROVENANCE:
        return text
    if not cut:
        raise WhetstoneError(f"provenance is too long ({len(provenance)} characters; quote the user's words in at "
                             f"most {MAX_PROVENANCE})")
    return text[: MAX_PROVENANCE - 1] + "…"


def clean_run_id(run_id: object) -> str | None:
    if run_id is None or run_id == "":
        return None
    if not isinstance(run_id, str) or len(run_id) > 100 or _CONTROL.search(run_id) or not run_id.isprintable():
        raise WhetstoneError(f"run_id must be the short text recall returned, got {shown(run_id)}")
    return run_id


@dataclass(frozen=True)
class Answer:
    """What a `confirm` argument says: `verb` is yes, no, new, same, replace or keep (None when
    nothing was said); `target` the entry id it names (same:L3, replace:I2, keep:G:L4), if any."""

    verb: str | None = None
    target: str | None = None


_TARGET = re.compile(r"(?:[Gg]:)?[LlIi][1-9]\d*")


def answer(confirm: object) -> Answer:
    """The meaning of a `confirm` argument: nothing, a bare answer (yes, no, new, same or reinforce,
    replace, keep) or one that names its entry (same:L3, replace:L3, keep:L3)."""
    if confirm is None or confirm is False or confirm == "":
        return Answer()
    if confirm is True:
        return Answer("yes")
    if isinstance(confirm, str):
        said = confirm.strip().lower()
        if said in ANSWERS:
            return Answer(ANSWERS[said])
        verb, colon, target = said.partition(":")
        if colon and ANSWERS.get(verb.strip()) in TARGETED and _TARGET.fullmatch(target.strip()):
            return Answer(ANSWERS[verb.strip()], target.strip().upper())
    raise WhetstoneError(f"confirm must be true, one of yes, no, new, same, replace, keep, or same:<id>, "
                         f"replace:<id>, keep:<id> (the id a prompt named); got {shown(confirm)}")


def clean_always(always: object) -> bool:
    """The `always` argument: true marks a rule for every task of the skill (None or false: not)."""
    if always is None:
        return False
    if not isinstance(always, bool):
        raise WhetstoneError(f"always must be true or false, got {shown(always)}")
    return always


def polarity_kind(polarity: object) -> str:
    if isinstance(polarity, str) and polarity.strip().lower() in ("learning", "issue"):
        return polarity.strip().lower()
    raise WhetstoneError(f"polarity must be 'learning' or 'issue', got {shown(polarity)}")


def stamp(provenance: str) -> str:
    """A provenance line as recorded: today's date, then the caller's words (quoted)."""
    day = today().isoformat()
    if not provenance:
        return f"{day} — (no provenance given)"
    return f"{day} — {provenance}" if provenance[0] in "'\"" else f"{day} — '{provenance}'"
