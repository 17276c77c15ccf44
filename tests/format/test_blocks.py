"""The block format (SPEC §3): reader, writer, validator, and the fast reader agreeing with mistune.

Fixtures live in tests/fixtures/blocks: `valid/*.md` must read cleanly and round-trip byte for
byte; each `invalid/*.md` has an `invalid/*.expected` beside it with the exact `path:line: message`
lines validation must print (the path's first component is the folder the file is checked as).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from git_whetstone.format import blocks, edits, markdown
from git_whetstone.format.blocks import DOT, FormatError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "blocks"
VALID = sorted((FIXTURES / "valid").glob("*.md"))
INVALID = sorted((FIXTURES / "invalid").glob("*.md"))
# Fixtures written exactly as whetstone writes: one blank line between blocks, final newline.
CANONICAL = {"spec-example.md", "two-blocks.md", "multi-provenance.md", "multi-paragraph.md", "unicode.md",
             "currency-formatting-3f9a1c2b7d4e5f60.md", "issues-corner-radius.md", "applies-always.md",
             "issues-applies-always.md", "differs-from.md", "issues-differs-from.md"}

SPEC_EXAMPLE = (
    "## L1 · Format the price column as US dollars\n"
    "- recurrence: 2\n"
    "- first_seen: 2026-07-23\n"
    "- last_seen: 2026-07-24\n"
    "- scope: currency formatting\n"
    "- provenance: \"2026-07-24 — 'make the revenue column US dollars'\"\n"
    "\n"
    "Format the price (msrp) column as US dollars with no decimal places.\n"
)


def read(path: Path) -> str:
    """A fixture's exact text: no newline translation."""
    return path.read_bytes().decode("utf-8")


def folder_of(text: str) -> str:
    return "issues" if text.lstrip().startswith("## I") else "learnings"


def parse_ok(text: str, folder: str | None = None) -> list[blocks.Block]:
    parsed = blocks.parse(text, "t.md", folder)
    assert parsed.errors == [], [str(e) for e in parsed.errors]
    return parsed.blocks


def expected_errors(path: Path) -> tuple[str, str, list[str]]:
    """(path to report, folder, expected lines) for an invalid fixture."""
    lines = path.with_suffix(".expected").read_text(encoding="utf-8").splitlines()
    assert lines, f"{path.name}: an invalid fixture needs at least one expected error"
    shown = lines[0].split(":", 1)[0]
    assert shown.endswith("/" + path.name)
    return shown, shown.split("/", 1)[0], lines


def learning(bid: str = "L1", body: str = "Body text.", scope: str = "scope", **extra: str) -> str:
    fields = [("recurrence", extra.get("recurrence", "1")), ("first_seen", "2026-07-23"),
              ("last_seen", "2026-07-24"), ("scope", scope)]
    return edits.render(bid, blocks.derive_title(body), fields, body)


def test_fixture_sets_are_not_empty():
    assert len(VALID) >= 8 and len(INVALID) >= 12
    assert CANONICAL <= {p.name for p in VALID}
    for path in INVALID:
        assert path.with_suffix(".expected").exists(), path.name


# --- the exact SPEC example -------------------------------------------------------------------------

def test_spec_example_renders_byte_for_byte():
    fields = [("recurrence", "2"), ("first_seen", "2026-07-23"), ("last_seen", "2026-07-24"),
              ("scope", "currency formatting"),
              ("provenance", blocks.encode_value("2026-07-24 — 'make the revenue column US dollars'"))]
    text = edits.render("L1", "Format the price column as US dollars", fields,
                         "Format the price (msrp) column as US dollars with no decimal places.")
    assert text == SPEC_EXAMPLE
    assert read(FIXTURES / "valid" / "spec-example.md") == SPEC_EXAMPLE
    assert "\u00b7".encode() == b"\xc2\xb7" and text.encode("utf-8").startswith(b"## L1 \xc2\xb7 Format")


def test_spec_example_reads_back():
    (block,) = parse_ok(SPEC_EXAMPLE, "learnings")
    assert (block.id, block.title, block.line, block.kind, block.number) == (
        "L1", "Format the price column as US dollars", 1, "learning", 1)
    assert block.fields == (("recurrence", "2"), ("first_seen", "2026-07-23"), ("last_seen", "2026-07-24"),
                            ("scope", "currency formatting"),
                            ("provenance", "\"2026-07-24 — 'make the revenue column US dollars'\""))
    assert block.body == "Format the price (msrp) column as US dollars with no decimal places."
    assert block.recurrence == 2 and block.scope == "currency formatting"
    assert block.get("first_seen") == "2026-07-23" and block.get("last_seen") == "2026-07-24"
    assert block.provenance == ["2026-07-24 — 'make the revenue column US dollars'"]
    assert block.raw == SPEC_EXAMPLE and (block.start, block.end) == (0, len(SPEC_EXAMPLE))


# --- round trips on every valid fixture ----------------------------------------------------------

@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture_reads_without_errors_and_reassembles_exactly(path: Path):
    text = read(path)
    found = parse_ok(text, folder_of(text))
    assert found
    # the blocks tile the file: what precedes the first one, then every block's exact source
    assert text[: found[0].start].strip() == ""
    assert text[: found[0].start] + "".join(b.raw for b in found) == text
    for before, after in zip(found, found[1:]):
        assert before.end == after.start
    assert found[-1].end == len(text)
    for block in found:
        assert text[block.start:block.end] == block.raw
        assert text.split("\n")[block.line - 1].rstrip("\r").startswith(f"## {block.id} {DOT} ")
        assert block.body and block.body == block.body.strip("\n")
        assert "\r" not in block.body + block.title + "".join(v for _, v in block.fields)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture_render_parse_render_is_stable(path: Path):
    text = read(path)
    for block in parse_ok(text, folder_of(text)):
        once = edits.render(block.id, block.title, block.fields, block.body)
        (again,) = parse_ok(once, folder_of(text))
        assert (again.id, again.title, again.fields, again.body) == (block.id, block.title, block.fields, block.body)
        assert edits.render(again.id, again.title, again.fields, again.body) == once
        if path.name in CANONICAL:
            assert once == block.raw.rstrip("\n") + "\n"  # the written form is the file's form


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_canonical_fixture_is_exactly_its_blocks_rendered_and_joined(name: str):
    text = read(FIXTURES / "valid" / name)
    found = parse_ok(text, folder_of(text))
    assert "\n".join(edits.render(b.id, b.title, b.fields, b.body) for b in found) == text
    out = ""
    for b in found:
        out = edits.append(out, edits.render(b.id, b.title, b.fields, b.body))
    assert out == text


def test_hand_edited_quirks_are_read_and_kept():
    text = read(FIXTURES / "valid" / "hand-edited-spacing.md")
    l2, l3, l7 = parse_ok(text, "learnings")
    assert text.startswith("\n") and l2.start == 1 and l2.line == 2
    assert l2.title == "Warm palette for heat maps"  # trailing spaces after the title are not part of it
    assert l2.get("scope") == "color encoding" and l2.scope == "color encoding"
    assert l2.provenance == ["typed by hand, not quoted"]  # an unquoted provenance reads as written
    assert l2.body.split("\n")[0].endswith("  ")  # a markdown hard break survives
    assert l2.raw.endswith("\n\n\n") and l3.raw.endswith("\n\n\n\n")  # two and three blank lines kept
    assert l3.provenance == []


def test_multiple_provenance_lines_keep_their_order():
    (block,) = parse_ok(read(FIXTURES / "valid" / "multi-provenance.md"), "learnings")
    assert block.provenance == [
        "2026-05-02 — 'line the dollars up on the right'",
        "2026-06-11 — 'right-align the money again'",
        "2026-07-24 — 'still left-aligned?! right-align it'",
        "2026-07-24 — declined promotion to an issue",
    ]
    assert [k for k, _ in block.fields].count("provenance") == 4


def test_multi_paragraph_body_is_read_whole():
    (block,) = parse_ok(read(FIXTURES / "valid" / "multi-paragraph.md"), "learnings")
    paragraphs = block.body.split("\n\n")
    assert paragraphs[0] == "Band every other row with a very light grey (#f5f5f5)."
    assert "# a comment in a code fence is not a heading" in block.body
    assert paragraphs[-1] == "A thematic break above (after a blank line) is fine too."
    assert block.title == "Band every other row"


def test_unicode_fixture_keeps_every_code_point():
    text = read(FIXTURES / "valid" / "unicode.md")
    l8, l9, l10 = parse_ok(text, "learnings")
    assert l8.title == "价格列用美元显示，不要小数" and l8.scope == "货币格式"
    assert l8.provenance == ["2026-07-24 — '价格用美元' 🙂"]
    assert l9.scope == "typographie française" and "Ça s'applique aussi à « ; »." in l9.body
    assert blocks.derive_title(l9.body) == "Préférez les espaces insécables avant les deux-points : c'est la règle"
    assert l10.scope == "emoji status markers 🚦"
    assert "👍🏽 and 👨‍👩‍👧" in l10.body
    assert l10.provenance == ['2026-07-24 — "fire for hot, check for done" — with a \\ backslash and a \x07 bell']


def test_earlier_implementation_file_reads_unchanged():
    """whetstone-mcp 0.1.0 wrote the same format into `<slug>-<16hex>.md`: names carry no meaning."""
    path = FIXTURES / "valid" / "currency-formatting-3f9a1c2b7d4e5f60.md"
    assert re.fullmatch(r"[a-z0-9-]+-[0-9a-f]{16}\.md", path.name)
    text = read(path)
    l1, l3 = parse_ok(text, "learnings")
    assert (l1.id, l1.title, l1.recurrence, l1.scope) == ("L1", "Format msrp as USD, 0 decimals", 2,
                                                         "currency formatting")
    assert (l3.id, l3.recurrence, len(l3.provenance)) == ("L3", 5, 2)
    assert l3.body == "Negatives in parentheses, e.g. (1,200) rather than -1,200."
    assert markdown.validate(text, f"learnings/{path.name}", "learnings") == []


def test_file_without_final_newline_reads_and_gains_one_on_write():
    text = read(FIXTURES / "valid" / "no-final-newline.md")
    assert not text.endswith("\n")
    (block,) = parse_ok(text, "issues")
    assert block.body == "Never use Comic Sans, in any size." and block.raw == text
    changed = edits.replace(text, block, edits.update_fields(block, {"scope": "typefaces"}))
    assert changed == text.replace("- scope: fonts", "- scope: typefaces") + "\n"
    added = edits.append(text, edits.render("I4", "Never", [("scope", "fonts")], "Never."))
    assert added == text + "\n\n" + "## I4 · Never\n- scope: fonts\n\nNever.\n"


# --- CRLF: read like LF, kept as CRLF ---------------------------------------------------------------
# Decision: a file with Windows line endings (an editor, or git's autocrlf) is valid. Its values,
# titles and bodies read without '\r'; untouched blocks keep their bytes; what a tool write adds or
# changes takes the file's CRLF ending, so the file never ends up with mixed line endings.

CRLF = FIXTURES / "valid" / "crlf-windows.md"


def no_bare_lf(text: str) -> bool:
    return re.search(r"(?<!\r)\n", text) is None


def test_crlf_file_reads_exactly_like_its_lf_twin():
    text, twin = read(CRLF), read(FIXTURES / "valid" / "two-blocks.md")
    assert text == twin.replace("\n", "\r\n") and no_bare_lf(text)
    got = [(b.id, b.title, b.fields, b.body, b.line) for b in parse_ok(text, "learnings")]
    assert got == [(b.id, b.title, b.fields, b.body, b.line) for b in parse_ok(twin, "learnings")]
    assert markdown.validate(text, "learnings/crlf.md", "learnings") == []


def test_crlf_file_keeps_crlf_through_every_write():
    text = read(CRLF)
    first, second = parse_ok(text, "learnings")
    bumped = edits.replace(text, second, edits.update_fields(
        second, {"recurrence": "2", "last_seen": "2026-08-01"}, add_provenance="2026-08-01 — 'again'"))
    assert no_bare_lf(bumped) and bumped.startswith(first.raw)
    again = parse_ok(bumped, "learnings")[1]
    assert again.recurrence == 2 and again.provenance[-1] == "2026-08-01 — 'again'"

    reworded = edits.replace(text, first, learning("L1", "Show prices in whole US dollars."))
    assert no_bare_lf(reworded) and reworded.endswith(second.raw)
    assert parse_ok(reworded, "learnings")[0].body == "Show prices in whole US dollars."

    appended = edits.append(text, learning("L9", "Another rule."))
    assert no_bare_lf(appended) and appended.startswith(text)
    assert appended[len(text):].startswith("\r\n## L9 · ")
    assert [b.id for b in parse_ok(appended, "learnings")] == ["L1", "L4", "L9"]

    assert edits.remove(text, second) == first.raw[: -len("\r\n")]  # the separating blank line goes
    assert edits.remove(text, first) == second.raw


# --- writes touch only the block they change ---------------------------------------------------------

def others_unchanged(before: list[blocks.Block], after: list[blocks.Block], changed: str | None) -> None:
    old = {b.id: b.raw for b in before if b.id != changed}
    new = {b.id: b.raw for b in after if b.id != changed}
    assert new == old


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_update_fields_changes_only_the_named_lines_of_one_block(path: Path):
    text = read(path)
    folder = folder_of(text)
    found = parse_ok(text, folder)
    for block in found:
        key = "recurrence" if block.kind == "learning" else "scope"
        value = "7" if key == "recurrence" else "a new scope"
        new_block = edits.update_fields(block, {key: value}, add_provenance="2026-08-01 — 'said “again”'")
        out = edits.replace(text, block, new_block)
        rest = text[block.end:]
        assert out[: block.start] == text[: block.start] and out.endswith(rest)
        middle = out[block.start: len(out) - len(rest)]
        assert middle == new_block or (not text.endswith("\n") and middle == new_block + "\n")
        after = parse_ok(out, folder)
        others_unchanged(found, after, block.id)
        (mine,) = [b for b in after if b.id == block.id]
        assert mine.get(key) == value and mine.body == block.body and mine.title == block.title
        assert mine.provenance == block.provenance + ["2026-08-01 — 'said “again”'"]
        old_lines, new_lines = block.raw.rstrip("\r\n").split("\n"), mine.raw.rstrip("\r\n").split("\n")
        assert len(new_lines) == len(old_lines) + 1
        # exactly the changed field line differs, and one provenance line was inserted
        field_line = 1 + [k for k, _ in block.fields].index(key)
        inserted = new_lines.index(next(line for line in new_lines if "said “again”" in line))
        assert old_lines[field_line] != new_lines[field_line]
        assert new_lines[:inserted] == old_lines[:field_line] + [new_lines[field_line]] + \
            old_lines[field_line + 1:inserted]
        assert new_lines[inserted + 1:] == old_lines[inserted:]


def test_update_fields_edits_values_in_place_and_adds_provenance_after_the_last():
    text = read(FIXTURES / "valid" / "two-blocks.md")
    first, second = parse_ok(text, "learnings")
    new = edits.update_fields(first, {"recurrence": "3", "last_seen": "2026-08-02"}, "2026-08-02 — 'yes'")
    assert new == first.raw.replace("- recurrence: 2", "- recurrence: 3").replace(
        "- last_seen: 2026-07-24", "- last_seen: 2026-08-02").replace(
        "dollars'\"\n", "dollars'\"\n- provenance: \"2026-08-02 — 'yes'\"\n", 1)
    # with no provenance yet, the new one goes after the last field, before the blank line
    (plain,) = parse_ok(learning("L5", "Plain rule."), "learnings")
    out = edits.update_fields(plain, {}, "x")
    assert out.split("\n")[5:7] == ['- provenance: "x"', ""]
    # unchanged when nothing is asked
    assert edits.update_fields(second, {}) == second.raw


def test_replace_keeps_the_separator_that_was_there():
    text = read(FIXTURES / "valid" / "hand-edited-spacing.md")
    l2, l3, l7 = parse_ok(text, "learnings")
    new = learning("L3", "Label every legend with its unit, always.")
    out = edits.replace(text, l3, new)
    assert out == text[: l3.start] + new.rstrip("\n") + "\n\n\n\n" + text[l3.end:]
    after = parse_ok(out, "learnings")
    others_unchanged([l2, l3, l7], after, "L3")
    # a replacement given with extra trailing newlines does not add blank lines
    assert edits.replace(text, l3, new + "\n\n") == out


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_remove_each_block_leaves_the_others_byte_identical(path: Path):
    text = read(path)
    folder = folder_of(text)
    found = parse_ok(text, folder)
    for block in found:
        out = edits.remove(text, block)
        rest = [b for b in found if b.id != block.id]
        if not rest:
            assert out == ""
            continue
        after = parse_ok(out, folder)
        assert [b.id for b in after] == [b.id for b in rest]
        for old, new in zip(rest[:-1], after[:-1]):
            assert new.raw == old.raw
        if block is found[-1]:
            # the last block went: the one before it now ends the file, with exactly one newline
            newline = "\r\n" if "\r\n" in text else "\n"
            assert out == text[: block.start].rstrip("\r\n") + newline
        else:
            assert after[-1].raw == rest[-1].raw
            assert out == text[: block.start] + text[block.end:]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_append_keeps_the_file_and_adds_one_blank_line(path: Path):
    text = read(path)
    folder = folder_of(text)
    found = parse_ok(text, folder)
    bid = ("L" if folder == "learnings" else "I") + "99"
    fields = [("recurrence", "1"), ("first_seen", "2026-08-01"), ("last_seen", "2026-08-01"),
              ("scope", "new")] if folder == "learnings" else [("scope", "new")]
    new = edits.render(bid, "A new rule", fields, "A new rule.")
    out = edits.append(text, new)
    newline = "\r\n" if "\r\n" in text else "\n"
    base = text if text.endswith("\n") else text + newline
    assert out.startswith(base)
    tail = out[len(base):]
    if re.search(r"\n[ \t\r]*\n\Z", base):  # already ends with a blank line: nothing added
        assert tail == new.replace("\n", newline)
    else:
        assert tail == newline + new.replace("\n", newline)
    after = parse_ok(out, folder)
    assert [b.id for b in after] == [b.id for b in found] + [bid]
    for old, now in zip(found[:-1], after):
        assert now.raw == old.raw


def test_append_to_an_empty_or_blank_file_is_the_block_alone():
    new = learning("L1", "Rule.")
    assert edits.append("", new) == new
    assert edits.append("\n\n", new) == new


# --- validation: every error as path:line: message ------------------------------------------------

@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture_reports_exactly_the_expected_errors(path: Path):
    shown, folder, expected = expected_errors(path)
    text = read(path)
    got = [str(e) for e in markdown.validate(text, shown, folder)]
    assert got == expected
    assert [str(e) for e in blocks.parse(text, shown, folder).errors] == expected
    for line in got:
        match = re.fullmatch(r"(.+?):(\d+): (.+)", line)
        assert match and match.group(1) == shown
        assert 1 <= int(match.group(2)) <= text.count("\n") + 1


def test_format_error_prints_as_path_line_message():
    error = FormatError("learnings/color-8f2a.md", 14, "recurrence must be a positive integer, got '0'")
    assert str(error) == "learnings/color-8f2a.md:14: recurrence must be a positive integer, got '0'"


def test_blocks_with_errors_are_left_out_and_their_neighbours_kept():
    text = read(FIXTURES / "invalid" / "unknown-id-prefix.md")
    parsed = blocks.parse(text, "learnings/x.md", "learnings")
    assert [b.id for b in parsed.blocks] == ["L1"] and len(parsed.errors) == 2
    # read with no folder, an I block is fine and only the unknown X3 is an error
    parsed = blocks.parse(text, "x.md")
    assert [b.id for b in parsed.blocks] == ["L1", "I2"]
    assert [str(e) for e in parsed.errors] == [
        "x.md:14: unknown id 'X3': expected L<n> for a learning or I<n> for an issue"]


@pytest.mark.parametrize(("text", "line", "message"), [
    (learning().replace("- recurrence: 1", "- recurrence:"), 2, "recurrence must be a positive integer, got ''"),
    (learning().replace("- recurrence: 1", "- recurrence: 1.5"), 2, "recurrence must be a positive integer"),
    (learning().replace("- recurrence: 1", "- recurrence: 01"), 2, "recurrence must be a positive integer"),
    (learning().replace("2026-07-23", "2026-7-23"), 3, "first_seen must be a date (YYYY-MM-DD), got '2026-7-23'"),
    (learning().replace("2026-07-24", "2025-02-29"), 4, "last_seen must be a date (YYYY-MM-DD), got '2025-02-29'"),
    (learning().replace("2026-07-24", "2026-07-22"), 1, "L1: last_seen 2026-07-22 is before first_seen 2026-07-23"),
    (learning().replace("## L1", "## L0"), 1, "malformed id 'L0'"),
    (learning().replace("## L1 · ", "##  L1 · "), 1, "malformed heading"),
    (learning().replace("## L1 · ", "## L1 ·"), 1, "malformed heading"),
    (learning().replace("- scope: scope", "* scope: scope"), 5, "malformed field"),
    ("## L1 · t\nBody right under the heading.\n", 2, "L1 has no metadata lines"),
    (learning() + "\n## L2 · x\n", 9, "L2 has an empty body"),
    (learning(body="Text\n\n## Section"), 9, "malformed heading"),  # "## " always starts a block
    (learning(body="Text\n\n   ### Indented"), 9, "a heading inside a body"),
    (learning(body="Text\n="), 8, "a heading inside a body"),
    (learning(body="<pre>\ncode"), 7, "raw HTML that is never closed"),
    (learning(body="```\n```x\n"), 7, "a code fence that is never closed"),
    ("\ufeff" + learning(), 1, "byte-order mark"),
    ("# My learnings\n\n" + learning(), 1, "text before the first block"),
])
def test_single_error_cases(text: str, line: int, message: str):
    errors = markdown.validate(text, "learnings/t.md", "learnings")
    assert errors, text
    assert (errors[0].line, errors[0].path) == (line, "learnings/t.md"), [str(e) for e in errors]
    assert message in errors[0].message


def test_conflict_markers_are_found_wherever_they_are():
    text = learning() + "\n<<<<<<< ours\n" + learning("L2") + "=======\n" + learning("L3") + ">>>>>>> theirs\n"
    lines = {e.line for e in markdown.validate(text, "t.md", "learnings")
             if e.message == "unresolved merge conflict marker"}
    all_lines = text.split("\n")
    assert lines == {i + 1 for i, l in enumerate(all_lines) if l[:7] in ("<<<<<<<", "=======", ">>>>>>>")}


def test_two_versions_of_a_block_between_conflict_markers_are_reported_as_the_markers_alone():
    """What a merge leaves (one block, two versions) is one problem, the markers: not also a
    duplicate id, nor text before the first block when the conflict opens the file."""
    text = ("<<<<<<< ours\n" + learning("L1", "Red palette.") + "=======\n" + learning("L1", "Orange palette.")
            + ">>>>>>> theirs\n\n" + learning("L2"))
    errors = markdown.validate(text, "t.md", "learnings")
    assert [(e.line, e.message) for e in errors] == [(1, "unresolved merge conflict marker"),
                                                     (9, "unresolved merge conflict marker"),
                                                     (17, "unresolved merge conflict marker")]
    twice = learning("L1") + "\n" + learning("L1", "Another body.")  # outside markers it is a duplicate
    assert [e.message for e in markdown.validate(twice, "t.md", "learnings")] == ["duplicate id L1 (also at line 1)"]


def test_valid_things_that_look_risky_are_accepted():
    for body in ["Text\n\n---\n\nafter a thematic break", "* a star list is its own list", "1. ordered list",
                 "Text\n\n```sh\n# shell comment\n```", "<!-- a closed comment -->\nText",
                 "Use `#` for comments, C# and F# are fine", "Text with - a dash and ## inside a line",
                 "~~~\n===\n~~~", "Text\n\n> quoted\n---", "-x is not a list item"]:
        text = learning(body=body)
        assert markdown.validate(text, "t.md", "learnings") == [], body
        (block,) = parse_ok(text, "learnings")
        assert block.body == body


# --- the fast reader and mistune agree ---------------------------------------------------------------

@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_line_reader_and_mistune_agree_on_valid_fixture(path: Path):
    text = read(path)
    found = parse_ok(text, folder_of(text))
    view = markdown.markdown_view(text)
    assert len(view) == len(found)
    for block, (heading, items, has_body) in zip(found, view):
        assert heading.startswith(f"{block.id} {DOT} ")
        assert [item.split(":", 1)[0] for item in items] == [key for key, _ in block.fields]
        assert all("\n" not in item for item in items)
        assert has_body


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture_is_refused_by_validate(path: Path):
    _, folder, _ = expected_errors(path)
    assert markdown.validate(read(path), "x.md", folder)


@pytest.mark.parametrize(("body", "why"), [
    ("- a list right under the metadata", "items"),
    ("  indented text", "nobody"),
    ("Text\nunderlined\n---", "heading"),
    ("```\nnever closed", "swallowed"),
    ("<!-- never closed", "swallowed"),
])
def test_reader_errors_for_markdown_structure_are_what_mistune_really_sees(body: str, why: str):
    """The reader's markdown-structure errors are real: mistune reads these blocks differently."""
    text = learning("L1", body) + "\n" + learning("L2", "Second rule.")
    assert blocks.parse(text, "t.md", "learnings").errors
    view = markdown.markdown_view(text)
    if why == "items":
        assert len(view[0][1]) == 5  # the body became a fifth metadata item
    elif why == "nobody":
        assert view[0][2] is False
    elif why == "heading":
        assert len(view) == 3
    else:
        assert len(view) == 1  # the second block vanished into the first


_PIECES = ["a", "Foo bar", "-", "- ", "*", "+ ", "1. ", "10) ", ">", " ", "  ", "    ", "\t", "#", "## ",
           "```", "~~~", "---", "===", "=", "<div>", "<!--", "-->", "<pre>", "</pre>", "<?", "<!X", "|",
           "\\", "`", "[x]: /u", "***", "\n", "\n", "\n\n", "·", "L2", "<a>"]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12))
def test_whatever_the_line_reader_accepts_mistune_reads_the_same_way(parts: list[str]):
    body = "".join(parts).strip("\n")
    text = learning("L1", body) + "\n" + learning("L2", "End.")
    parsed = blocks.parse(text, "t.md", "learnings")
    if parsed.errors:
        assert markdown.validate(text, "t.md", "learnings")
        return
    view = markdown.markdown_view(text)
    assert len(view) == len(parsed.blocks) == 2
    for block, (_, items, has_body) in zip(parsed.blocks, view):
        assert [i.split(":", 1)[0] for i in items] == [k for k, _ in block.fields]
        assert has_body
    assert markdown.validate(text, "t.md", "learnings") == []


# --- titles ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "title"), [
    ("Format the price (msrp) column as US dollars with no decimal places.",
     "Format the price (msrp) column as US dollars with no decimal places"),
    ("Show prices in U.S. dollars. Round to whole numbers.", "Show prices in U.S. dollars"),
    ("Show prices in U.S. Dollars. Round to whole numbers.", "Show prices in U.S. Dollars"),
    ("Prefer a serif, e.g. Georgia. Never Arial.", "Prefer a serif, e.g. Georgia"),
    ("Why green? Use a warm ramp.", "Why green?"),
    ("Stop! Square corners only.", "Stop!"),
    ("Use 3.5 pt rules. Thin ones.", "Use 3.5 pt rules"),
    ("First paragraph, no stop\n\nSecond paragraph.", "First paragraph, no stop"),
    ("First paragraph\n   \nSecond paragraph after a line of spaces.", "First paragraph"),
    ("A sentence that\nwraps onto a second line. And more.", "A sentence that wraps onto a second line"),
    ("价格列用美元显示。不要小数。", "价格列用美元显示"),
    ("  Leading and trailing blanks.  \n", "Leading and trailing blanks"),
    ("Use 🔥 for hot items. ✅ for done.", "Use 🔥 for hot items. ✅ for done"),
    ("Préférez l'euro. Ça évite les conversions.", "Préférez l'euro"),
    ("Используйте рубли. Без копеек.", "Используйте рубли"),
    ("Say “no decimals.” Then stop.", "Say “no decimals.” Then stop"),
    ("Write it as «net». «Gross» is wrong.", "Write it as «net»"),
])
def test_derive_title(body: str, title: str):
    assert blocks.derive_title(body) == title


def test_long_first_sentence_is_cut_at_a_word_boundary():
    body = ("Always format every currency column in the quarterly revenue table as whole US dollars "
            "with thousands separators and no decimals. Second sentence.")
    title = blocks.derive_title(body)
    assert title.endswith("…") and len(title) <= blocks.TITLE_LIMIT
    kept = title[:-1]
    assert body.startswith(kept) and body[len(kept)] == " "
    assert kept == "Always format every currency column in the quarterly revenue table as"


def test_a_word_ending_exactly_at_the_limit_is_kept():
    words = "abcd efgh " * 10
    title = blocks.derive_title(words, limit=20)
    assert title == "abcd efgh abcd efgh…"  # 19 characters fit, the space after them is the cut


def test_one_token_longer_than_the_limit_is_cut_inside():
    body = "https://example.com/" + "x" * 100 + " is the docs link."
    title = blocks.derive_title(body)
    assert len(title) == blocks.TITLE_LIMIT and title.endswith("…") and body.startswith(title[:-1])
    cjk = "价格" * 60
    assert blocks.derive_title(cjk) == cjk[: blocks.TITLE_LIMIT - 1] + "…"


_WORD = st.text(alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Lo", "Nd")), min_size=1, max_size=14)


@settings(max_examples=200, deadline=None)
@given(st.lists(_WORD, min_size=1, max_size=40), st.integers(min_value=20, max_value=120))
def test_titles_never_cut_mid_word(words: list[str], limit: int):
    sentence = " ".join(words)
    assume(all(len(w) < limit // 3 for w in words))
    title = blocks.derive_title(sentence, limit=limit)
    assert 0 < len(title) <= limit
    if title.endswith("…"):
        kept = title[:-1]
        assert sentence.startswith(kept) and sentence[len(kept)] == " "
    else:
        assert title == sentence


# --- values -----------------------------------------------------------------------------------------

@given(st.text())
def test_encode_decode_value_round_trip(value: str):
    encoded = blocks.encode_value(value)
    assert "\n" not in encoded and "\r" not in encoded and encoded.startswith('"')
    assert blocks.decode_value(encoded) == value


def test_decode_value_leaves_unquoted_or_broken_values_as_written():
    assert blocks.decode_value("typed by hand") == "typed by hand"
    assert blocks.decode_value('"never closed') == '"never closed'


# --- render -> parse over generated entries ------------------------------------------------------
# Bodies and scopes restricted to what capture would write: clean_body/clean_scope leave them as
# they are (no control characters, no line starting with '#', no conflict markers), and every line
# starts with a letter, digit or symbol, so no line opens markdown structure (a list, an underline,
# a fence, raw HTML).

_CHAR = st.characters(blacklist_categories=("Cc", "Cs", "Co", "Cn", "Zl", "Zp"))
_LINE = st.tuples(st.characters(whitelist_categories=("L", "N", "So")), st.text(_CHAR, max_size=50)).map(
    lambda t: (t[0] + t[1]).rstrip())
_PARAGRAPH = st.lists(_LINE, min_size=1, max_size=3).map("\n".join)
_BODY = st.lists(_PARAGRAPH, min_size=1, max_size=3).map("\n\n".join)
_SCOPE = st.text(_CHAR, min_size=1, max_size=60).map(lambda s: " ".join(s.split())).filter(bool)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from("LI"), number=st.integers(1, 10**6), body=_BODY, scope=_SCOPE,
       recurrence=st.integers(1, 10**4), provenance=st.lists(st.text(), max_size=3),
       days=st.tuples(st.dates(), st.dates()))
def test_render_then_parse_gives_the_entry_back(kind, number, body, scope, recurrence, provenance, days):
    import unicodedata

    from git_whetstone.ops.writing.inputs import clean_body, clean_scope

    body = unicodedata.normalize("NFC", body)
    scope = unicodedata.normalize("NFC", scope)
    assume(body.strip() == body and len(body) <= 4000)
    try:
        assert clean_body(body) == body and clean_scope(scope) == scope
    except Exception:  # capture would refuse it, so it never reaches the writer
        assume(False)
    first, last = sorted(days)
    fields = [("scope", scope)] + [("provenance", blocks.encode_value(p)) for p in provenance]
    if kind == "L":
        fields = [("recurrence", str(recurrence)), ("first_seen", first.isoformat()),
                  ("last_seen", last.isoformat())] + fields
    bid, title = f"{kind}{number}", blocks.derive_title(body)
    text = edits.render(bid, title, fields, body)
    parsed = blocks.parse(text, "t.md", "learnings" if kind == "L" else "issues")
    assert parsed.errors == [], [str(e) for e in parsed.errors]
    (block,) = parsed.blocks
    assert (block.id, block.title, block.fields, block.body) == (bid, title, tuple(fields), body)
    assert block.provenance == provenance and block.scope == scope
    assert edits.render(block.id, block.title, block.fields, block.body) == text == block.raw
    assert markdown.validate(text, "t.md") == []


# --- capture never writes a body the format cannot hold ---------------------------------------------

@pytest.mark.parametrize("body", ["- warm colours\n- no green", "Palette\n---\nwarm only", "Palette\n===",
                                  "```\nnever closed", "<!-- never closed", "[docs]: https://example.com"])
def test_capture_refuses_a_body_the_block_format_cannot_hold(body: str):
    """A body that starts with a '-' list item or holds an underlined heading would be written, then read
    as metadata or a heading (mistune agrees), dropped on read and refused by validation."""
    from git_whetstone.ops.writing.inputs import clean_body
    from git_whetstone.base.errors import WhetstoneError

    assert markdown.validate(learning("L1", body), "t.md", "learnings")
    with pytest.raises(WhetstoneError):
        clean_body(body)


def test_applies_always_is_read_set_and_cleared_byte_exactly() -> None:
    """`- applies: always` sits after `scope`; setting it adds that one line, clearing it takes that
    line away, and every other byte of the block (CRLF line endings too) stays as written."""
    text = read(FIXTURES / "valid" / "applies-always.md")
    marked, plain = parse_ok(text, "learnings")
    assert marked.always and not plain.always
    assert edits.with_always(marked, True) == marked.raw
    cleared = edits.with_always(marked, False)
    assert "applies" not in cleared and cleared == marked.raw.replace("- applies: always\n", "")
    again = parse_ok(cleared, "learnings")[0]
    assert not again.always and edits.with_always(again, True) == marked.raw
    set_on_plain = edits.with_always(plain, True)
    assert set_on_plain.split("\n")[5] == "- applies: always" and parse_ok(set_on_plain, "learnings")[0].always
    crlf = text.replace("\n", "\r\n")
    marked_crlf = parse_ok(crlf, "learnings")[0]
    assert edits.with_always(marked_crlf, False) == marked_crlf.raw.replace("- applies: always\r\n", "")
    issue = parse_ok(read(FIXTURES / "valid" / "issues-applies-always.md"), "issues")[0]
    assert issue.always and edits.with_always(issue, False).count("\n") == issue.raw.count("\n") - 1


def test_a_quoted_value_reads_as_json_reads_it() -> None:
    """Plain quoted values skip the JSON decoder (a build decodes 100,000 provenance lines): what
    they give, and whether they are valid, must be what JSON says."""
    import json
    import random

    rng = random.Random(5)
    alphabet = ['a', ' ', '"', '\\', '\t', '\n', '\x00', '\x1f', '\x7f', '\u00a0', '\u2028', 'é', '日', '😀', '/', 'u']
    raws = ['"', '""', '"a"', '"a\\"', '"\\u00e9"', '"x"y"', '"\udc80"', 'plain', '"tab\there"']
    for _ in range(3000):
        inner = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6)))
        raws += ['"' + inner + '"', json.dumps(inner, ensure_ascii=False), '"' + inner]
    for raw in raws:
        try:
            expected = json.loads(raw)
            valid = isinstance(expected, str)
        except ValueError:
            valid = False
        assert blocks._is_json_string(raw) == valid, repr(raw)
        assert blocks.decode_value(raw) == (expected if valid else raw), repr(raw)


# --- the fast reader reads what the plain one read ------------------------------------------------------

TRICKY_LINES = ["", " ", "\r", "#", "# Title", "## L5 · another", "## L5 · again", "## I2 · an issue", "##", "## L07 · x",
                "---", "===", "-=-", "Text", "text under", "  indented", "    code", "\tTab", "1. item", "2) item",
                "- item", "* star", "+ plus", "> quote", ">", "-", "```", "```py", "~~~", "````", "<div>", "</div>",
                "<!--", "-->", "<pre>", "</pre>", "<?php", "?>", "<![CDATA[", "]]>", "<!DOCTYPE", "[ref]: /url",
                "- scope: x", "- scope:", "- recurrence: 0", "- recurrence: 3", "- first_seen: 2026-02-30",
                "- last_seen: 2026-13-01", "- last_seen: 2025-01-01", "- first_seen: 2026-07-23",
                "- provenance: \"bad", "- provenance: \"ok — 'fine'\"", "- provenance: \"esc \\\" q\"",
                "- applies: always", "- applies: often", "- differs_from: L3, I2", "- differs_from: L3,I2",
                "- differs_from: L07", "- differs_from:", "- colour: red", "- scope: x\r", "<<<<<<< ours",
                "=======", ">>>>>>> theirs", "||||||| base", "\ufeffBOM", "Ünïcödé text", "表格", "a<b", "Zed",
                "- scope: padded ", "- scope:  x", "- provenance: \"ok\" ", "- provenance:  plain", "- provenance: ", "- provenance: plain", "- provenance: \"\"",
                "- provenance: \"\\u00e9\"", "- Scope: x", "- recurrence: 01", "Text ", "Tail\u00a0", "## L١ · digit"]


def mutated(rng, text: str) -> str:
    """`text` with a few lines inserted, dropped, swapped or given a carriage return."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(lines) + 1)
        what = rng.random()
        if what < 0.5:
            lines.insert(at, rng.choice(TRICKY_LINES))
        elif what < 0.7 and lines:
            del lines[min(at, len(lines) - 1)]
        elif what < 0.85 and len(lines) > 1:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif lines:
            lines[min(at, len(lines) - 1)] += "\r"
    return "\n".join(lines) + rng.choice(["", "\n", "\n\n", "\r\n"])


def test_the_reader_reads_what_the_plain_reader_read() -> None:
    """The reader's fast paths (one split for every line, carriage returns stripped once, plain body
    lines past the markdown patterns, dates checked once, a file as whetstone writes it one match a
    block) change nothing: every fixture, and a few
    thousand of them mutated with the lines most likely to matter, read as the reader before them
    (tests/format/reference_blocks.py) read them, blocks, offsets, raw text and errors alike."""
    import random

    from tests.format import reference_blocks

    rng = random.Random(20)
    provenance = ("provenance", blocks.encode_value("2026-07-24 — 'make it \"bold\"'"))
    reversed_dates = learning("L4", "Dates the wrong way round.").replace("2026-07-24", "2026-07-01")
    written = [  # files as whetstone writes them, which the one-match-a-block path takes (but the last)
        "\n".join([SPEC_EXAMPLE, learning("L2", "Right-align the totals.\n\nThen bold them, always.", "tables",
                                           recurrence="3"),
                   edits.render("L9", "Keep the logo", [("recurrence", "1"), ("first_seen", "2026-07-23"),
                                                         ("last_seen", "2026-07-23"), ("scope", "brand"),
                                                         ("applies", "always"), provenance, provenance],
                                 "Keep the logo top left.")]),
        "\n".join(edits.render(f"I{n}", "Never use red", [("scope", f"charts {n}"), provenance], f"Never red {n}.")
                  for n in (1, 2, 30)),
        SPEC_EXAMPLE + "\n" + reversed_dates, SPEC_EXAMPLE.replace("dollars'\"\n", "dollars'\" \n"),
        SPEC_EXAMPLE.replace("places.\n", "places. \n") + "\n"]
    texts = [read(p) for p in VALID + INVALID] + written + [SPEC_EXAMPLE, "", "\n", "\r\n", "##", "## L1 · x"]
    cases = list(texts)
    for _ in range(4000):
        base = rng.choice(texts)
        cases.append(mutated(rng, base if rng.random() < 0.7 else base + "\n" + rng.choice(texts)))
    for _ in range(2000):
        cases.append(mutated(rng, rng.choice(written)))
    cases += written
    differ = 0
    for text in cases:
        for folder in (None, "learnings", "issues"):
            if blocks.parse(text, "f.md", folder) != reference_blocks.parse(text, "f.md", folder):
                differ += 1
    errors = sum(bool(blocks.parse(t).errors) for t in cases)
    assert differ == 0
    assert errors > len(cases) // 4 and len(cases) - errors > 200  # the cases reach both errors and clean reads
    # and the one-match-a-block path (`_parse_clean`) both takes files and turns them down
    taken = sum(blocks._parse_clean(t, None) is not None for t in cases)
    assert 80 < taken < len(cases) - errors
    # and what a build takes of such a file without its Blocks (`clean_blocks`) is what the
    # reference's blocks say, or None where the one-match-a-block path turns the file down
    found = 0
    for text in cases:
        for folder in (None, "learnings", "issues"):
            clean = blocks.clean_blocks(text, folder)
            if clean is None:
                assert blocks._parse_clean(text, blocks.PREFIX.get(folder)) is None
                continue
            parsed = reference_blocks.parse(text, "f.md", folder)
            assert not parsed.errors
            assert [(*c[:4], {k: v for k, v in c[4].items() if k != "provenance"}, c[5]) for c in clean] == [
                (b.id, b.title, b.body, b.line, {k: b.get(k) for k, _ in b.fields if k != "provenance"},
                 tuple(b.provenance)) for b in parsed.blocks], text
            found += 1
    assert found > 80


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["## L1 · a", "## L12 · b", "## I3 · c", "## L0 · d", "## L1٣ · e", "##  L4 · f",
                                 "## L5 ·", "## L6", "text", "", "## I7 · g\r", " ## L8 · h"]), max_size=12))
def test_the_set_of_heading_ids_is_what_heading_ids_finds(lines: list[str]) -> None:
    """`heading_id_set` (the journal's staging order asks it of every file of a change) holds the
    ids `heading_ids` lists, whatever the lines around them."""
    from git_whetstone.format.ids import heading_id_set, heading_ids

    text = "\n".join(lines)
    assert heading_id_set(text) == {bid for bid, _ in heading_ids(text)}


# --- a block as whetstone writes its fields, read off one match ---------------------------------------

_PROVENANCE_INNERS = ["2026-07-24 — 'make it bold'", "", "tab\there", "nbsp\u00a0", "nul\x00", "sep\u2028", "back\\slash",
                      'in"ner', "é日😀", "\x7f", " padded "]
# each piece as whetstone writes it, or (a time in ten) one a field pass turns down or reads otherwise
_WRITTEN_PIECES = {
    "digits": (["1", "12", "7"], ["0", "01", "\u0661"]),
    "title": (["Right-align totals", " padded ", "a · b"], ["", "  "]),
    "recurrence": (["1", "3", "12"], ["0", "01", "\u0663", " 2"]),
    "date": (["2026-07-23", "2026-07-24", "2025-01-01"], ["2026-02-30", "2026-13-01", "\u0662026-07-23", "2026-7-23"]),
    "scope": (["tables", "currency  formatting", "x", "日本"], [" padded", "padded "]),
    "applies": ([None, "always"], ["often"]),
    "differs": ([None, "L3", "L3, L10, I2", "I2, L3"], ["L3,I2", "L03", "x", "L3, ", "G:L3"]),
    "provenance": (['"2026-07-24 — \'make it bold\'"', '"é日😀"', '""'],
                   ['"' + inner + '"' for inner in _PROVENANCE_INNERS] + ["plain words", '"unterminated', '"\\u00e9"',
                                                                          '"esc \\" q"']),
    "body": (["Keep it.", "Keep it.\n\nThen more."], ["- a list", "# heading", "Tail\u00a0", "  indented"]),
}


def _piece(draw, name: str):
    good, odd = _WRITTEN_PIECES[name]
    return draw(st.sampled_from(odd if draw(st.integers(0, 9)) == 0 else good))


@st.composite
def _written_block(draw) -> str:
    prefix = draw(st.sampled_from(["L", "I"]))
    fields = []
    if prefix == "L":
        fields += [("recurrence", _piece(draw, "recurrence")), ("first_seen", _piece(draw, "date")),
                   ("last_seen", _piece(draw, "date"))]
    fields.append(("scope", _piece(draw, "scope")))
    applies = _piece(draw, "applies")
    if applies:
        fields.append(("applies", applies))
    differs = _piece(draw, "differs")
    if differs:
        fields.append(("differs_from", differs))
    fields += [("provenance", _piece(draw, "provenance")) for _ in range(draw(st.integers(0, 3)))]
    if draw(st.integers(0, 9)) == 0:  # out of order, or a field twice, or one unknown
        what = draw(st.sampled_from(["swap", "twice", "unknown", "drop"]))
        i, j = draw(st.integers(0, len(fields) - 1)), draw(st.integers(0, len(fields) - 1))
        if what == "swap":
            fields[i], fields[j] = fields[j], fields[i]
        elif what == "twice":
            fields.insert(j, fields[i])
        elif what == "unknown":
            fields.insert(j, ("colour", "red"))
        else:
            del fields[i]
    text = edits.render(prefix + _piece(draw, "digits"), _piece(draw, "title"), fields, _piece(draw, "body"))
    return text + "\n" * draw(st.integers(0, 2))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_written_block(), min_size=1, max_size=4), st.sampled_from([None, "learnings", "issues"]))
def test_a_written_file_read_off_one_match_a_block_is_what_the_line_parser_reads(parts: list[str], folder) -> None:
    """A file of blocks as whetstone writes them is read off one match a block (a build reads
    thousands of files): the same blocks as the line-by-line parser, whatever the fields' order,
    repeats, dates, numbers, spaces and provenance characters; anything it turns down goes the long way."""
    text = "\n".join(parts)
    quick = blocks.clean_blocks(text, folder)
    full = blocks.parse_lines(text, "f.md", folder)
    if quick is not None:
        assert not full.errors
        assert [(b[0], b[1], b[2], b[3]) for b in quick] == [(b.id, b.title, b.body, b.line) for b in full.blocks]
        assert [b[5] for b in quick] == [tuple(b.provenance) for b in full.blocks]
        assert blocks.parse(text, "f.md", folder) == full


def test_the_blocks_whetstone_writes_are_read_off_one_match() -> None:
    """The shapes a store holds take the one-match path (else the test above compares nothing)."""
    provenance = ("provenance", blocks.encode_value("2026-07-24 — 'make it bold'"))
    learning_fields = [("recurrence", "2"), ("first_seen", "2026-07-23"), ("last_seen", "2026-07-24"), ("scope", "tables")]
    texts = [edits.render("L1", "Bold", learning_fields + [provenance], "Bold it."),
             edits.render("L2", "Bold", learning_fields + [("applies", "always"), provenance, provenance], "Bold it."),
             edits.render("I3", "Red", [("scope", "charts"), ("differs_from", "L1, I2"), provenance], "Never red.\n\nNever."),
             edits.render("I4", "Red", [("scope", "charts")], "Never red.")]
    found = blocks.clean_blocks("\n".join(texts))
    assert found is not None and [b[5] for b in found] == [("2026-07-24 — 'make it bold'",),
                                                          ("2026-07-24 — 'make it bold'",) * 2,
                                                          ("2026-07-24 — 'make it bold'",), ()]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="a\r\n \t#", max_size=12),
       st.lists(st.text(alphabet="a\r\n \t#", max_size=8), max_size=6))
def test_blocks_appended_at_once_as_one_by_one(text: str, added: list[str]) -> None:
    """`edits.append_all` (a file's arriving blocks, as compact adds them) is `append` in turn,
    whatever the file's line endings, blank lines, or a block of blank space alone."""
    want = text
    for block_text in added:
        want = edits.append(want, block_text)
    assert edits.append_all(text, added) == want
