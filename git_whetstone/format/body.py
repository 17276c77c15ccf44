"""What markdown would read as more than a block's body: a heading (ATX, or text underlined with
'=' or '-'), or a code fence or raw HTML left open, which would swallow every block after it.
`blocks` refuses such a body on every read, so the line reader and a markdown renderer agree.
"""
from __future__ import annotations

import re
import string

CONFLICT_MARKER = re.compile(r"^(<{7}|={7}|>{7}|\|{7})( |$)")
ATX = re.compile(r"^ {0,3}#{1,6}(\s|$)")
# A line of '=' or '-' right under paragraph text turns that text into a (setext) heading.
SETEXT = re.compile(r"^ {0,3}[=-]+[ \t]*$")  # mistune also takes a mix such as "=-="
# Lines that open a list item or a quote, or are indented code: a '---' under them is no underline.
CONTAINER = re.compile(r"^ {0,3}(?:(?:[-+*]|\d{1,9}[.)])(?=[ \t]|$)|>)")
INDENTED = re.compile(r"^(?: {4}|\t)")
# Raw HTML that runs until a closing marker, however many lines and blocks that takes.
_RAW_HTML = (
    (re.compile(r"^ {0,3}<(script|pre|style|textarea)(\s|>|$)", re.I), None),  # to its own end tag
    (re.compile(r"^ {0,3}<!--"), "-->"),
    (re.compile(r"^ {0,3}<\?"), "?>"),
    (re.compile(r"^ {0,3}<!\[CDATA\["), "]]>"),
    (re.compile(r"^ {0,3}<![A-Za-z]"), ">"),
)
FENCE = re.compile(r"^ {0,3}(`{3,}(?=[^`]*$)|~{3,})")  # a backtick fence's info string has no '`'
_LETTERS = frozenset(string.ascii_letters)


def check_body(lines: list[str], start: int, err) -> None:
    """Find what would make markdown read a body as more than a body: a heading (ATX, or text
    underlined with '=' or '-'), or a code fence or raw HTML left open, which would swallow every
    block after it. Nothing inside a closed fence or HTML region counts."""
    paragraph = container = False  # in a paragraph ('---' under it is an underline), or a list/quote
    region: tuple[str, str, int] | None = None  # an open fence or raw HTML: (what, its closer, line)
    for j, line in enumerate(lines):
        if region:
            if closes(region[1], line):
                region = None
            continue
        if line[:1] in _LETTERS:  # plain text: no heading, fence, HTML, list or quote starts so
            if not paragraph and not container:
                paragraph = True
            continue
        if ATX.match(line):
            err(start + j, "a heading inside a body (start a new block with '## L<n> · title')")
        elif paragraph and SETEXT.match(line) and not CONFLICT_MARKER.match(line):
            err(start + j, "a heading inside a body (a line of '=' or '-' right under text makes "
                           "that text a heading; leave a blank line before it)")
        fence, html = FENCE.match(line), raw_html(line)
        if fence:
            region, paragraph = ("a code fence", fence.group(1), start + j), False
        elif html and html[1] not in line[html[0]:].lower():
            region, paragraph = ("raw HTML", html[1], start + j), False
        elif not line.strip():
            paragraph = container = False
        elif not paragraph and not container:
            opener = CONTAINER.match(line)
            # an empty list item or quote ('-', '>') holds no paragraph for the next line to join
            container = bool(opener and line[opener.end():].strip())
            paragraph = not opener and not INDENTED.match(line)
    if region:
        what, closer, line = region
        err(line, f"{what} that is never closed (markdown would read the rest of the file into it); "
                  f"close it with {closer}")


def closes(closer: str, line: str) -> bool:
    """Whether `line` ends an open code fence (`closer` is its opening run) or raw HTML region."""
    if closer[0] in "`~":
        fence = FENCE.match(line)
        return bool(fence and fence.group(1)[0] == closer[0] and len(fence.group(1)) >= len(closer)
                    and not line[fence.end():].strip())
    return closer in line.lower()


def raw_html(line: str) -> tuple[int, str] | None:
    """If `line` opens raw HTML that runs to a closing marker: where its opener ends, and the marker."""
    if "<" not in line[:4]:  # every opener is '<' after at most three spaces
        return None
    for pattern, closer in _RAW_HTML:
        match = pattern.match(line)
        if match:
            return match.end(), closer or f"</{match.group(1).lower()}>"
    return None
