"""Preference packs and rule files: export, import (merge, replace, dry run), hostile packs, and
AGENTS.md / CLAUDE.md / Cursor rules, driven through the CLI against real git stores."""
from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import random
import tarfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from git_whetstone.format import blocks, edits
from git_whetstone.ops.writing.capture import capture
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.sharing.packs import Item, build_pack, toml_string
from git_whetstone.ops.sharing.exchange import import_pack
from git_whetstone.ops.recall import recall
from git_whetstone.ops.writing.attach import attach
from git_whetstone.format.layout import scope_filename
from tests.helpers import git, run_cli, tree_state

TODAY = "2026-11-29"


@pytest.fixture(autouse=True)
def pinned_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHETSTONE_TODAY", TODAY)  # the CLI processes inherit it too


def ok(*args: str, **kwargs) -> dict:
    proc = run_cli(*args, "--json", **kwargs)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hand_write(store: Path, entries: list[tuple[str, str, str, int, str, str]]) -> None:
    """Write entries (id, scope, body, recurrence, first_seen, last_seen) as a person would, one
    commit for all of them."""
    files: dict[Path, str] = {}
    for bid, scope, body, recurrence, first, last in entries:
        folder = "learnings" if bid[0] == "L" else "issues"
        meta = [("recurrence", str(recurrence)), ("first_seen", first), ("last_seen", last)] if bid[0] == "L" else []
        meta += [("scope", scope), ("provenance", blocks.encode_value(f"{first} — 'said so, {bid}'"))]
        path = store / folder / scope_filename(scope)
        files[path] = edits.append(files.get(path, ""), edits.render(bid, blocks.derive_title(body), meta, body))
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    git(store, "add", "-A")
    git(store, "commit", "-qm", f"hand: {len(entries)} entries")


SCOPES = ["currency formatting", "color encoding", "column alignment", "header style", "font choice",
          "number precision", "date format", "row striping", "border style", "footnotes", "title text",
          "sort order", "missing values", "units of measure", "cell padding", "captions", "legend placement",
          "axis labels", "tooltips", "file export"]
VERBS = ["Show", "Render", "Write", "Keep", "Mark", "Set", "Print", "Give", "Display", "Draw"]
THINGS = ["totals", "subtitles", "footers", "tick marks", "group rows", "source notes", "spanners", "stub columns",
          "summary rows", "index labels", "gridlines", "sparklines", "badges", "icons"]
MANNERS = ["in small caps", "with a thin rule", "in muted grey", "in bold weight", "with wide margins",
           "in italics", "with a dotted underline", "in a serif face", "with generous spacing", "in teal"]


def big_store(store: Path) -> list[tuple[str, str, str, int, str, str]]:
    """200 distinct entries over 20 scopes: 7 learnings and 3 issues per scope."""
    rng = random.Random(6)
    entries, used, n_l, n_i = [], set(), 0, 0
    for scope in SCOPES:
        for k in range(10):
            while True:
                body = f"{rng.choice(VERBS)} the {rng.choice(THINGS)} {rng.choice(MANNERS)} for {scope}."
                if body not in used:
                    used.add(body)
                    break
            if k < 7:
                n_l += 1
                last = f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}"
                entries.append((f"L{n_l}", scope, body, rng.randint(1, 6), "2026-01-01", last))
            else:
                n_i += 1
                entries.append((f"I{n_i}", scope, f"Never leave out the {rng.choice(THINGS)} in {scope} "
                                f"({k}).", 1, "", ""))
    hand_write(store, entries)
    return entries


def rules_of(skill: str) -> set[tuple]:
    shown = ok("show", skill)
    return ({("issue", i["scope"], i["rule"]) for i in shown["issues"]}
            | {("learning", e["scope"], e["rule"], e["recurrence"], e["first_seen"], e["last_seen"])
               for e in shown["learnings"]})


INTENTS = ["styling a table: currency formatting, negative numbers and totals",
           "a chart with a legend placement and axis labels",
           "dates and units of measure in an exported file",
           "header style and font choice for a report title",
           "missing values, sort order and row striping"]


def test_round_trip_of_200_entries(store_root: Path, tmp_path: Path) -> None:
    attach("source")
    source = store_root / "source"
    big_store(source)
    pack = tmp_path / "source.tar.gz"
    exported = ok("export", "source", "-o", str(pack))
    assert (exported["learnings"], exported["issues"], exported["scopes"]) == (140, 60, 20)

    # deterministic: the same store gives the same bytes
    again = tmp_path / "again.tar.gz"
    ok("export", "source", "-o", str(again))
    assert pack.read_bytes() == again.read_bytes()
    data = pack.read_bytes()
    assert data[3] & 0x08 == 0 and data[4:8] == b"\0\0\0\0"  # gzip: no file name, no time
    with tarfile.open(pack) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[0] == "pack.toml" and names[1:] == sorted(names[1:])
    assert all(n.startswith(("learnings/", "issues/")) for n in names[1:])
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" and m.mode == 0o644 for m in members)
    with tarfile.open(pack) as tar:
        manifest = tomllib.loads(tar.extractfile("pack.toml").read().decode())
    assert manifest["skill"] == "source" and manifest["learnings"] == 140 and manifest["issues"] == 60
    assert len(manifest["entries"]) == 200 and sorted(manifest["scopes"]) == sorted(SCOPES)

    # into an empty skill: the same rules, scopes and recurrences, in one commit
    result = ok("import", "copy", str(pack))
    assert result["status"] == "committed" and result["counts"]["committed"] == 200
    copy = store_root / "copy"
    assert git(copy, "log", "--format=%s").stdout.splitlines()[0] == "import: 200 added, 0 reinforced from pack source"
    assert len(git(copy, "log", "--format=%s").stdout.splitlines()) == 2  # attach, import
    git(copy, "fsck", "--strict")
    assert rules_of("copy") == rules_of("source")
    for intent in INTENTS:
        a, b = recall("source", intent), recall("copy", intent)
        assert [(e["rule"], e["scope"], e["weight"]) for e in a["learnings"]] == \
            [(e["rule"], e["scope"], e["weight"]) for e in b["learnings"]], intent
        assert [e["rule"] for e in a["issues"]] == [e["rule"] for e in b["issues"]], intent
        assert a["omitted"] == b["omitted"]

    # into the skill it came from, and again into the copy: nothing changes, no commit
    for skill in ("source", "copy"):
        before = tree_state(store_root / skill)
        again = ok("import", skill, str(pack))
        assert again["status"] == "unchanged" and again["commit"] is None
        assert again["counts"] == {"committed": 0, "reinforced": 0, "noop": 200, "conflicts": 0, "marked": 0, "removed": 0}
        assert tree_state(store_root / skill) == before


def test_merge_reinforces_once_per_source_skips_conflicts_and_is_idempotent(store_root: Path,
                                                                             tmp_path: Path) -> None:
    attach("mine")
    mine = store_root / "mine"
    hand_write(mine, [
        ("L1", "currency formatting", "Format currency columns as US dollars with no decimal places", 1,
         "2026-10-01", "2026-11-01"),
        ("L2", "column alignment", "Right-align numeric columns", 2, "2026-10-01", "2026-11-01"),
        ("I1", "corner radius", "Never round table corners", 1, "", ""),
    ])
    attach("theirs")
    hand_write(store_root / "theirs", [
        ("L1", "currency formatting", "Format currency columns in US dollars, no decimal places", 3,
         "2026-09-01", "2026-09-02"),
        ("L2", "column alignment", "Never right-align numeric columns", 1, "2026-10-01", "2026-11-01"),
        ("L3", "color encoding", "Use a warm palette for heat maps", 1, "2026-10-01", "2026-11-01"),
        ("I1", "corner radius", "Never round the corners of a table", 1, "", ""),
    ])
    pack = tmp_path / "theirs.tar.gz"
    ok("export", "theirs", "-o", str(pack))

    dry = ok("import", "mine", str(pack), "--dry-run")
    assert dry["status"] == "dry_run" and dry["counts"]["committed"] == 1

    head = git(mine, "rev-parse", "HEAD").stdout
    result = ok("import", "mine", str(pack))
    assert result["counts"] == {"committed": 1, "reinforced": 1, "noop": 1, "conflicts": 1, "marked": 0, "removed": 0}
    assert result["reinforced"][0]["id"] == "L1" and result["reinforced"][0]["recurrence"] == 2
    assert result["conflicts"][0]["conflicts_with"]["id"] == "L2"
    assert result["noop"][0] == {"id": "I1", "from": "I1", "reason": "an issue already says this"}
    assert result["committed"][0]["rule"] == "Use a warm palette for heat maps"
    new_id = result["committed"][0]["id"]
    assert git(mine, "rev-parse", "HEAD~1").stdout == head  # one commit
    shown = {e["id"]: e for e in ok("show", "mine")["learnings"]}
    assert shown["L1"]["recurrence"] == 2 and shown["L1"]["last_seen"] == TODAY
    assert any("(import:theirs:" in p for p in shown["L1"]["provenance"])
    assert shown[new_id]["provenance"][0] == "2026-10-01 — 'said so, L3'"  # the source's history comes along
    assert shown[new_id]["last_seen"] == "2026-11-01"  # and its dates

    before = tree_state(mine)
    again = ok("import", "mine", str(pack))
    assert again["status"] == "unchanged" and again["counts"]["reinforced"] == 0
    assert again["counts"]["conflicts"] == 1  # still reported, still not written
    assert tree_state(mine) == before

    # the same rule from a different source reinforces again, once
    attach("others")
    hand_write(store_root / "others", [("L1", "currency formatting", "Format currency columns as US dollars, "
                                        "no decimal places", 1, "2026-10-01", "2026-11-01")])
    other_pack = tmp_path / "others.tar.gz"
    ok("export", "others", "-o", str(other_pack))
    assert ok("import", "mine", str(other_pack))["counts"]["reinforced"] == 1
    assert ok("import", "mine", str(other_pack))["status"] == "unchanged"
    assert {e["id"]: e for e in ok("show", "mine")["learnings"]}["L1"]["recurrence"] == 3


def test_replace_is_one_commit_that_git_revert_undoes(store_root: Path, tmp_path: Path) -> None:
    attach("mine")
    mine = store_root / "mine"
    hand_write(mine, [("L1", "fonts", "Set body text in a serif face", 2, "2026-10-01", "2026-11-01"),
                      ("I1", "corner radius", "Never round table corners", 1, "", "")])
    attach("theirs")
    hand_write(store_root / "theirs", [("L1", "color encoding", "Use a warm palette for heat maps", 1,
                                        "2026-10-01", "2026-11-01"),
                                       ("I1", "titles", "Always title a table in sentence case", 1, "", "")])
    pack = tmp_path / "theirs.tar.gz"
    ok("export", "theirs", "-o", str(pack))
    before = tree_state(mine)

    dry = ok("import", "mine", str(pack), "--replace", "--dry-run")
    assert dry["removed"] == ["L1", "I1"] and dry["counts"]["committed"] == 2
    assert tree_state(mine) == before

    result = ok("import", "mine", str(pack), "--replace")
    assert result["status"] == "committed" and result["removed"] == ["L1", "I1"]
    assert git(mine, "rev-parse", "HEAD~1").stdout.strip().encode() == before["@HEAD"]
    shown = ok("show", "mine")
    assert [e["rule"] for e in shown["learnings"]] == ["Use a warm palette for heat maps"]
    assert [e["rule"] for e in shown["issues"]] == ["Always title a table in sentence case"]
    assert {e["id"] for e in shown["learnings"] + shown["issues"]}.isdisjoint({"L1", "I1"})  # ids never reused
    assert ok("import", "mine", str(pack), "--replace")["status"] == "unchanged"  # already its content

    git(mine, "revert", "--no-edit", "HEAD")
    after = tree_state(mine)
    after.pop("@HEAD"), before.pop("@HEAD")
    assert after == before
    assert [e["rule"] for e in recall("mine", "serif fonts for body text")["learnings"]] == \
        ["Set body text in a serif face"]


def test_dry_run_into_a_new_skill_creates_nothing(store_root: Path, tmp_path: Path) -> None:
    attach("theirs")
    hand_write(store_root / "theirs", [("L1", "color encoding", "Use a warm palette for heat maps", 1,
                                        "2026-10-01", "2026-11-01")])
    pack = tmp_path / "theirs.tar.gz"
    ok("export", "theirs", "-o", str(pack))
    result = ok("import", "fresh", str(pack), "--dry-run")
    assert result["status"] == "dry_run" and result["counts"]["committed"] == 1
    assert result["committed"][0]["id"] is None
    assert not (store_root / "fresh").exists()
    human = run_cli("import", "fresh", str(pack), "--dry-run")
    assert human.returncode == 0 and "would import" in human.stdout and "1 committed" in human.stdout


def test_progress_is_reported_per_entry(store_root: Path, tmp_path: Path) -> None:
    attach("theirs")
    hand_write(store_root / "theirs", [(f"L{i}", "color encoding", f"Colour rule number {i} of the heat map", 1,
                                        "2026-10-01", "2026-11-01") for i in range(1, 6)])
    pack = tmp_path / "theirs.tar.gz"
    ok("export", "theirs", "-o", str(pack))
    calls: list[tuple[int, int]] = []
    import_pack("mine", str(pack), dry_run=True, progress=lambda done, total: calls.append((done, total)))
    attach("mine")
    import_pack("mine", str(pack), progress=lambda done, total: calls.append((done, total)))
    assert calls[-10:] == [(n, 10) for n in range(1, 11)]  # judging 5 entries, then writing 5


# --- hostile packs --------------------------------------------------------------------------------

def entry(name: str, data: bytes, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, linkname
    return info, data


def build(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            if info.isreg():
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(raw.getvalue(), compresslevel=1)


def unpack(data: bytes) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]


def replaced(members, name: str, change) -> list:
    return [(info, change(data) if info.name == name else data) for info, data in members]


def _learning_file(members) -> str:
    return next(info.name for info, _ in members if info.name.startswith("learnings/"))


def _bomb(members) -> bytes:
    chunk = b"\0" * (1 << 20)
    return build(members + [entry(f"learnings/z{i}.md", chunk) for i in range(65)])


def _refit(data: bytes) -> bytes:  # same block, altered body: still valid markdown
    return data.replace(b"Use a warm palette", b"Use a cold palette")


HOSTILE = {
    "absolute path": (lambda m: build(m + [entry("/tmp/evil.md", b"x")]), "absolute path"),
    "absolute entry": (lambda m: build([(entry("/" + i.name, d)[0], d) for i, d in m]), "absolute path"),
    "dot-dot": (lambda m: build(m + [entry("learnings/../../evil.md", b"x")]), "'..'"),
    "symlink": (lambda m: build(m + [entry("learnings/link.md", b"", tarfile.SYMTYPE, "/etc/passwd")]),
                "symbolic link"),
    "hardlink": (lambda m: build(m + [entry("learnings/hard.md", b"", tarfile.LNKTYPE, "pack.toml")]),
                 "hard link"),
    "char device": (lambda m: build(m + [entry("learnings/tty.md", b"", tarfile.CHRTYPE)]), "device or a fifo"),
    "block device": (lambda m: build(m + [entry("learnings/sda.md", b"", tarfile.BLKTYPE)]), "device or a fifo"),
    "fifo": (lambda m: build(m + [entry("learnings/pipe.md", b"", tarfile.FIFOTYPE)]), "device or a fifo"),
    "outside file": (lambda m: build(m + [entry("hooks/post-commit", b"#!/bin/sh\n")]), "outside"),
    "outside dir": (lambda m: build(m + [entry("hooks", b"", tarfile.DIRTYPE)]), "outside"),
    "nested": (lambda m: build(m + [entry("learnings/deep/x.md", b"x")]), "outside"),
    "not markdown": (lambda m: build(m + [entry("learnings/notes.txt", b"x")]), "outside"),
    "git dir": (lambda m: build(m + [entry(".git/config", b"x")]), "outside"),
    "big member": (lambda m: build(m + [entry("learnings/big.md", b"a" * ((1 << 20) + 1))]), "larger than 1 MiB"),
    "bomb": (_bomb, "64 MiB"),
    "twice": (lambda m: build(m + [m[-1]]), "appears twice"),
    "invalid markdown": (lambda m: build(replaced(m, _learning_file(m), lambda d: d.replace(
        b"- recurrence: 1", b"- recurrence: none"))), ":2: recurrence must be a positive integer"),
    "hash mismatch": (lambda m: build(replaced(m, _learning_file(m), _refit)), "does not match its hash"),
    "unlisted entry": (lambda m: build(replaced(m, _learning_file(m), lambda d: d + b"\n" + edits.render(
        "L9", "Extra", [("recurrence", "1"), ("first_seen", TODAY), ("last_seen", TODAY), ("scope", "x")],
        "Extra").encode())), "L9 is not listed in pack.toml"),
    "missing entry": (lambda m: build([(i, d) for i, d in m if not i.name.startswith("issues/")]),
                      "which the pack does not hold"),
    "not gzip": (lambda m: b"## L1 \xc2\xb7 just markdown\n", "not a gzip file"),
    "gzip, not tar": (lambda m: gzip.compress(b"hello, I am not a tar archive" * 30), "not a valid tar archive"),
    "truncated": (lambda m: build(m)[:-12], "truncated"),
    "no manifest": (lambda m: build([(i, d) for i, d in m if i.name != "pack.toml"]), "no pack.toml"),
    "bad toml": (lambda m: build(replaced(m, "pack.toml", lambda d: d + b"entries = [\n")), "not valid TOML"),
    "bad manifest": (lambda m: build(replaced(m, "pack.toml", lambda d: d.replace(b"format = 1", b'format = "one"'))),
                     "'format' must be"),
    "bad skill": (lambda m: build(replaced(m, "pack.toml", lambda d: d.replace(b'skill = "theirs"',
                                                                                 b'skill = "../x"'))),
                  "invalid skill name"),
}


@pytest.fixture(scope="module")
def valid_pack() -> list[tuple[tarfile.TarInfo, bytes]]:
    """The members of a good pack of skill 'theirs' (built in memory, as export builds it)."""
    items = [Item("L1", "learning", "color encoding", "Use a warm palette for heat maps", "Use a warm palette",
                  1, "2026-10-01", "2026-11-01", ("2026-10-01 — 'said so'",)),
             Item("I1", "issue", "corner radius", "Never round table corners", "Never round table corners")]
    return unpack(build_pack("theirs", items, dt.date(2026, 11, 29)))


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_pack_is_refused_and_nothing_is_written(case: str, valid_pack, store_root: Path,
                                                        tmp_path: Path) -> None:
    capture("mine", "learning", "Set body text in a serif face", "fonts")  # (faster than a hand commit)
    mine = store_root / "mine"
    make, message = HOSTILE[case]
    pack = tmp_path / "hostile.tar.gz"
    pack.write_bytes(make(valid_pack))
    before = tree_state(mine)
    for mode in ("merge", "replace"):
        with pytest.raises(WhetstoneError) as caught:
            import_pack("mine", str(pack), mode)
        assert message in caught.value.message and "\n" not in caught.value.message
        assert caught.value.message.startswith("hostile.tar.gz: ")
    with pytest.raises(WhetstoneError):
        import_pack("newcomer", str(pack))
    assert tree_state(mine) == before
    assert not (store_root / "newcomer").exists()


def test_hostile_pack_through_the_cli(valid_pack, store_root: Path, tmp_path: Path) -> None:
    attach("mine")
    before = tree_state(store_root / "mine")
    pack = tmp_path / "evil.tar.gz"
    pack.write_bytes(HOSTILE["dot-dot"][0](valid_pack))
    proc = run_cli("import", "mine", str(pack))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "refusing the pack" in proc.stderr and "Traceback" not in proc.stderr
    assert tree_state(store_root / "mine") == before


def test_a_valid_pack_rebuilt_by_another_tar_is_accepted(valid_pack, store_root: Path, tmp_path: Path) -> None:
    """Directories for learnings/ and issues/ and a './' prefix (as `tar -C dir .` writes) are fine."""
    members = [entry("./", b"", tarfile.DIRTYPE), entry("./learnings", b"", tarfile.DIRTYPE),
               entry("./issues", b"", tarfile.DIRTYPE)]
    members += [entry("./" + info.name, data) for info, data in valid_pack]
    pack = tmp_path / "retarred.tar.gz"
    pack.write_bytes(build(members))
    assert import_pack("mine", str(pack))["counts"]["committed"] == 2


@given(st.text())
def test_toml_strings_read_back(text: str) -> None:
    assert tomllib.loads(f"x = {toml_string(text)}")["x"] == text


# --- rule files -----------------------------------------------------------------------------------

AGENTS_MD = """\
# Team conventions

These notes are for coding agents.

## Tables

- Always right-align numeric columns.
- Never round table corners.
- Prefer a warm palette for heat maps.

### Currency

- Format currency as US dollars with no decimal places.
* Put negative amounts in parentheses.

## Writing

1. You must cite a source for every figure.
2. Keep captions short
   and factual.
- [ ] Use sentence case for titles.

```sh
- this is code, not a rule
```

<!--
- nor is this
-->
"""


def test_agents_md_imports_into_issues_and_learnings_and_exports_back(store_root: Path, tmp_path: Path) -> None:
    source = tmp_path / "AGENTS.md"
    source.write_text(AGENTS_MD)
    result = ok("import", "team", str(source), "--from", "agents-md")
    assert result["status"] == "committed"
    got = {(c["kind"], c["scope"], c["rule"]) for c in result["committed"]}
    assert got == {
        ("issue", "Tables", "Always right-align numeric columns."),
        ("issue", "Tables", "Never round table corners."),
        ("learning", "Tables", "Prefer a warm palette for heat maps."),
        ("learning", "Currency", "Format currency as US dollars with no decimal places."),
        ("learning", "Currency", "Put negative amounts in parentheses."),
        ("issue", "Writing", "You must cite a source for every figure."),
        ("learning", "Writing", "Keep captions short and factual."),
        ("learning", "Writing", "Use sentence case for titles."),
    }
    shown = ok("show", "team")
    assert {(i["scope"], i["rule"]) for i in shown["issues"]} == {(s, r) for k, s, r in got if k == "issue"}
    assert all("AGENTS.md:" in e["provenance"][0] for e in shown["learnings"] + shown["issues"])
    team = store_root / "team"
    git(team, "fsck", "--strict")

    # the same file again: nothing new
    before = tree_state(team)
    assert ok("import", "team", str(source), "--from", "agents-md")["status"] == "unchanged"
    assert tree_state(team) == before

    # exporting back lists every rule: issues as MUST, learnings as SHOULD, under their scopes
    exported = run_cli("export", "team", "--format", "agents-md")
    assert exported.returncode == 0
    text = exported.stdout
    for kind, scope, rule in got:
        assert (f"- MUST: {rule}" if kind == "issue" else f"- SHOULD: {rule} (weight 0.50)") in text
    assert text.index("## Rules (MUST)") < text.index("### Tables") < text.index("## Preferences")
    out = tmp_path / "AGENTS.out.md"
    written = ok("export", "team", "--format", "agents-md", "-o", str(out))
    assert written["rules"] == 3 and written["preferences"] == 5 and out.read_text() == text

    # reading the export back into the same store changes nothing; into a new one gives the same rules
    assert ok("import", "team", str(out), "--from", "agents-md")["status"] == "unchanged"
    assert tree_state(team) == before
    ok("import", "team2", str(out), "--from", "agents-md")
    assert ({(i["scope"], i["rule"]) for i in ok("show", "team2")["issues"]}
            == {(i["scope"], i["rule"]) for i in shown["issues"]})
    assert ({(i["scope"], i["rule"]) for i in ok("show", "team2")["learnings"]}
            == {(i["scope"], i["rule"]) for i in shown["learnings"]})


def test_cursor_rule_and_claude_md(store_root: Path, tmp_path: Path) -> None:
    attach("tables")
    hand_write(store_root / "tables", [
        ("L1", "color encoding", "Always use a warm palette for heat maps", 3, "2026-10-01", "2026-11-20"),
        ("L2", "color encoding", "Shade totals lightly", 1, "2025-01-01", "2025-01-02"),  # too weak to list
        ("I1", "corner radius", "Never round table corners", 1, "", "")])
    mdc = tmp_path / "tables.mdc"
    result = ok("export", "tables", "--format", "cursor-rule", "-o", str(mdc))
    assert result["preferences"] == 1 and result["left_out"] == 1
    text = mdc.read_text()
    assert text.startswith("---\ndescription: ") and "\nalwaysApply: true\n---\n" in text
    assert "Shade totals" not in text
    # a SHOULD label keeps a learning that says "always" a learning
    back = ok("import", "copy", str(mdc), "--from", "cursor-rule")
    assert {(c["kind"], c["rule"]) for c in back["committed"]} == {
        ("learning", "Always use a warm palette for heat maps"), ("issue", "Never round table corners")}

    claude = run_cli("export", "tables", "--format", "claude-md", "--min-weight", "0")
    assert claude.returncode == 0 and "Shade totals lightly" in claude.stdout

    # a Cursor rule without headings takes its scope from the description
    plain = tmp_path / "plain.mdc"
    plain.write_text("---\ndescription: chart colours\nalwaysApply: false\n---\n\n- Never use red and green together\n")
    got = ok("import", "charts", str(plain), "--from", "cursor-rule")["committed"]
    assert [(c["kind"], c["scope"]) for c in got] == [("issue", "chart colours")]


def test_rule_file_errors_name_the_line(store_root: Path, tmp_path: Path) -> None:
    bad = tmp_path / "AGENTS.md"
    bad.write_text("# Rules\n\n- fine\n- bad \x01 control\n")
    proc = run_cli("import", "team", str(bad), "--from", "agents-md")
    assert proc.returncode == 2 and "AGENTS.md:4: body contains control characters" in proc.stderr
    assert not (store_root / "team").exists()
    missing = run_cli("import", "team", str(tmp_path / "nope.md"), "--from", "agents-md")
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_a_pack_is_the_same_tar_at_any_gzip_level_and_imports_the_same(store_root: Path, tmp_path: Path,
                                                                        monkeypatch) -> None:
    """Export compresses at level 6 (it was 9): the archive inside is byte for byte the one level 9
    wrapped, and both packs read back as the same entries."""
    from git_whetstone.ops.sharing import packs
    from git_whetstone.ops.sharing.packs import read_pack
    from git_whetstone.ops.sharing.exchange import export
    from tests.helpers import bench_store

    _, config, _ = bench_store(monkeypatch, "big", 1_500, 4)
    fast, old = tmp_path / "fast.tar.gz", tmp_path / "old.tar.gz"
    export("big", str(fast), config=config)
    monkeypatch.setattr(packs, "COMPRESS_LEVEL", 9)
    export("big", str(old), config=config)
    a, b = fast.read_bytes(), old.read_bytes()
    assert a != b and gzip.decompress(a) == gzip.decompress(b)
    assert read_pack(a, "fast") == read_pack(b, "old")
    assert len(read_pack(a, "fast").items) == 1_500
