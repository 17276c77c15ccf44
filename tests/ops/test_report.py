"""`git whetstone report` (issue 21): one self-contained HTML page, checked in a real browser.

The store is built by the test through the library and real git, on pinned dates (WHETSTONE_TODAY
for the markdown, GIT_*_DATE for the commits) so the weeks are known: three weeks with commits and
captures, a quiet week between the first two. events.jsonl is written in its own format for the same
weeks (the library stamps events with the wall clock, which a test cannot move).
"""
from __future__ import annotations

import datetime as dt
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from git_whetstone.base import config as config_mod
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.looking.report import commit_kind, report
from git_whetstone.store.weight import days_to_retire, weight

from ..browser import Browser, find
from ..helpers import git, run_cli, tree_state

SKILL = "great-tables"
EMOJI_RULE = "Never use emoji in commit messages."

WEEK_A, WEEK_B, WEEK_C = "2026-03-02", "2026-03-16", "2026-03-23"  # 2026-W10, W12, W13; W11 is quiet
TODAY = "2026-03-25"


def on(monkeypatch: pytest.MonkeyPatch, day: str) -> None:
    monkeypatch.setenv("WHETSTONE_TODAY", day)
    stamp = f"{day}T10:00:00+00:00"
    monkeypatch.setenv("GIT_AUTHOR_DATE", stamp)
    monkeypatch.setenv("GIT_COMMITTER_DATE", stamp)


def learn(body: str, scope: str, kind: str = "learning") -> dict:
    result = capture(SKILL, kind, body, scope, "said so", config=config_mod.load())
    assert result["status"] in ("committed", "reinforced"), result
    return result


@pytest.fixture
def store(store_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store with a known history: week A the store and three entries, week B a reinforcement,
    a new learning and a hand edit, week C a revert of that new learning."""
    monkeypatch.setenv("WHETSTONE_SUPERVISION", "autonomous")
    on(monkeypatch, WEEK_A)
    learn("Format the price column as US dollars with no decimal places.", "currency formatting")
    learn("Heat-map msrp with a warm palette, not green.", "color encoding")
    learn(EMOJI_RULE, "commit messages", "issue")
    path = store_root / SKILL
    on(monkeypatch, WEEK_B)
    assert learn("Format the price column as US dollars with no decimal places.",
                 "currency formatting")["status"] == "reinforced"
    added = learn("Band alternate rows in light grey.", "row banding")
    color = next((path / "learnings").glob("color-encoding-*.md"))
    color.write_text(color.read_text().replace("not green.", "never green."))
    git(path, "commit", "-qam", "Say the palette rule more firmly")
    on(monkeypatch, WEEK_C)
    git(path, "revert", "--no-edit", "HEAD~1")
    assert added["entry_id"] == "L3"
    on(monkeypatch, TODAY)
    events = [("2026-03-02T09:00:00+00:00", "recall", {"learnings": []})]
    events += [(f"{WEEK_A}T10:0{i}:00+00:00", "capture", {"status": "committed", "entry_id": e, "scope": "s"})
               for i, e in enumerate(("L1", "L2", "I1"))]
    events += [(f"{WEEK_B}T10:00:00+00:00", "capture", {"status": "reinforced", "entry_id": "L1", "scope": "s"}),
               (f"{WEEK_B}T10:01:00+00:00", "capture", {"status": "committed", "entry_id": "L3", "scope": "s"}),
               (f"{WEEK_C}T10:00:00+00:00", "capture", {"status": "noop", "entry_id": "I1", "scope": "s"})]
    (path / "events.jsonl").write_text("".join(json.dumps({"ts": ts, "event": kind, **fields}) + "\n"
                                               for ts, kind, fields in events))
    return path


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


# every element with text of its own: its colour against the first opaque background behind it
CONTRAST = """(() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const bg = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || c[3] > 0) return c; } return [255, 255, 255]; };
  const worst = [];
  for (const el of document.querySelectorAll('body *')) {
    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const style = getComputedStyle(el);
    const fg = rgb(el instanceof SVGElement ? style.fill : style.color);
    const [a, b] = [lum(fg), lum(bg(el))].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < 4.5) worst.push(el.tagName + ' ' + ratio.toFixed(2) + ' ' + el.textContent.slice(0, 40));
  }
  return worst;
})()"""


def test_the_page_renders_in_a_real_browser(store: Path, tmp_path: Path) -> None:
    executable = find()
    assert executable, "no chromium: install it (apt-get install -y chromium; .ci/run does) to run this test"
    page = tmp_path / "report.html"
    result = run_cli("report", SKILL, "-o", str(page), "--json", env={"WHETSTONE_TODAY": TODAY})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == str(page)
    html = page.read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html and "<script" not in html
    with Browser(executable) as browser:
        browser.load(page)
        shot = browser.screenshot(tmp_path / "wide.png")
        assert png_size(shot)[0] >= 1000 and len(shot) > 20_000, "the screenshot looks empty"
        assert browser.errors() == []
        assert browser.requests() == [page.resolve().as_uri()], "the page fetched something"
        count = "document.querySelectorAll('{}').length".format
        # W10, W12 and W13 had captures (rates 0, 1/2 and 1); W11 was quiet and has no dot
        assert browser.evaluate(count("#rate-0 .mark")) == 3
        assert browser.evaluate(count("#captures-0 .mark")) == 3
        heights = browser.evaluate("[...document.querySelectorAll('#captures-0 .mark')].map(r => r.getBBox().height)")
        assert heights[0] == pytest.approx(heights[1] * 3 / 2, rel=0.02) == pytest.approx(heights[2] * 3, rel=0.02)
        # W10: attach (other change) and 3 captures; W12: a reinforcement, a capture, a hand edit; W13: a revert
        assert browser.evaluate(count("#history-0 .mark")) == 6
        assert browser.evaluate("[...document.querySelectorAll('#history-0 .mark title')].map(t => t.textContent)") == [
            "week of 2026-03-02: 3 capture", "week of 2026-03-02: 1 other change",
            "week of 2026-03-16: 1 capture", "week of 2026-03-16: 1 reinforcement",
            "week of 2026-03-16: 1 hand edit", "week of 2026-03-23: 1 revert"]
        # two learnings (the third was reverted), each with its bar; the issue listed as a must
        assert browser.evaluate(count(".rule.learning .bar[role=img]")) == 2
        assert browser.evaluate("document.body.innerText").count(EMOJI_RULE) == 1
        box = browser.evaluate(f"""(() => {{ const li = [...document.querySelectorAll('.rule.issue')]
            .find(el => el.innerText.includes({json.dumps(EMOJI_RULE)}));
            const r = li.getBoundingClientRect(); return [r.width, r.height, li.innerText]; }})()""")
        assert box[0] > 100 and box[1] > 10 and "must" in box[2]
        assert "Band alternate rows" not in browser.evaluate("document.body.innerText")
        # accessible: one h1, no skipped heading level, every chart an image with a title and a description
        levels = browser.evaluate("[...document.querySelectorAll('h1,h2,h3,h4,h5')].map(h => +h.tagName[1])")
        assert levels[0] == 1 and levels.count(1) == 1 and all(b - a <= 1 for a, b in zip(levels, levels[1:]))
        assert browser.evaluate("""[...document.querySelectorAll('svg')].every(s => s.getAttribute('role') === 'img'
            && s.querySelector(':scope > title').textContent && s.querySelector(':scope > desc').textContent)""")
        assert browser.evaluate(count("svg")) == 3
        assert browser.evaluate(CONTRAST) == []
        # a phone: one column, nothing wider than the screen
        browser.resize(375, 800)
        browser.load(page)
        assert browser.evaluate("document.documentElement.scrollWidth") <= 375
        assert png_size(browser.screenshot(tmp_path / "narrow.png"))[0] == 375
        assert browser.errors() == []


def test_the_page_shows_kpis_scopes_advice_and_the_global_layer(store: Path, store_root: Path, tmp_path: Path) -> None:
    from git_whetstone.ops.upkeep.global_layer import promote

    cfg = config_mod.load()
    promote(SKILL, "L2", config=cfg)
    capture(SKILL, "learning", "Keep emails brief.", "email tone", "said so", config=cfg)
    capture("slides", "learning", "Use one idea per slide.", "slide layout", "said so", config=cfg)
    out = report(every=True, output=str(tmp_path / "all.html"), config=cfg)
    assert out["skills"] == ["great-tables", "slides"] and out["learnings"] == 3 and out["issues"] == 1
    html = (tmp_path / "all.html").read_text(encoding="utf-8")
    assert 'id="skill-great-tables"' in html and 'id="skill-slides"' in html
    # the promoted learning left the skill and is listed once, as what every skill inherits
    assert html.count("Heat-map msrp with a warm palette, never green.") == 1
    global_part = html[html.index('id="global"'):]
    assert "Heat-map msrp with a warm palette, never green." in global_part
    assert "recurrence 1 · last seen 2026-03-25" in global_part
    # compact's advice: the capture that contradicted nothing is not a conflict; the reverted L3 is gone
    assert "Conflicts captured and never resolved" in html and "Band alternate rows" not in html
    one = report(SKILL, output=str(tmp_path / "one.html"), config=cfg)
    assert one["skills"] == [SKILL]
    assert "Inherited from the global layer" in (tmp_path / "one.html").read_text(encoding="utf-8")


def test_bad_input_is_one_line_and_changes_nothing(store: Path, tmp_path: Path) -> None:
    before = tree_state(store)
    for args, said in [((), "give a SKILL or --all"), ((SKILL, "--all"), "give a SKILL or --all"),
                       (("no-such-skill",), "no store for skill 'no-such-skill'"),
                       (("../etc",), "skill"),
                       ((SKILL, "-o", str(tmp_path / "missing" / "r.html")), "its folder does not exist"),
                       ((SKILL, "-o", str(tmp_path)), "that is a directory")]:
        proc = run_cli("report", *args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp_path.glob("*.html")) and not (tmp_path / "missing").exists()
    proc = run_cli("report", SKILL, "-o", "/proc/whetstone-report.html")  # a folder nobody can write in
    assert proc.returncode == 1 and proc.stderr.startswith("git whetstone: cannot write the report to")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert tree_state(store) == before
    proc = run_cli("report", SKILL, cwd=tmp_path)  # the default name, in the current directory
    assert proc.returncode == 0 and (tmp_path / f"{SKILL}-report.html").is_file(), proc.stderr
    assert tree_state(store) == before


def test_commit_kinds_follow_the_subjects_whetstone_and_git_write() -> None:
    assert commit_kind("capture: add L7 (color encoding)") == "capture"
    assert commit_kind("capture: reinforce L3 (currency), recurrence 2") == "reinforcement"
    assert commit_kind("revise: reinforce L3 (currency), recurrence 3") == "reinforcement"
    assert commit_kind('Revert "capture: add L7 (color encoding)"') == "revert"
    assert commit_kind("edit: change L2 (color encoding)") == "hand edit"
    assert commit_kind("Tidy the palette rules") == "hand edit"
    assert commit_kind("compact: 3 changes") == "other change"
    assert commit_kind("revise: remove L4 (tone)") == "other change"


def test_days_to_retire_is_where_the_weight_crosses_the_threshold() -> None:
    cfg = config_mod.load()
    day = dt.date(2026, 3, 25)
    for recurrence, ago in ((1, 0), (3, 40), (6, 200)):
        seen = (day - dt.timedelta(days=ago)).isoformat()
        left = int(days_to_retire(np.array([weight(recurrence, seen, day, cfg)]), cfg)[0])
        assert weight(recurrence, seen, day + dt.timedelta(days=left), cfg) >= cfg.retire_weight_threshold - 1e-3
        assert weight(recurrence, seen, day + dt.timedelta(days=left + 2), cfg) < cfg.retire_weight_threshold
    assert days_to_retire(np.array([0.05]), cfg)[0] == 0
    import dataclasses
    assert np.isinf(days_to_retire(np.array([0.5]), dataclasses.replace(cfg, learnings_decay=False))[0])


def test_always_on_rules_are_badged() -> None:
    from git_whetstone.ops.looking.report_html import rules

    page = {"retire_threshold": 0.15, "retire_soon_days": 30}
    html = rules(page, [{"id": "I1", "rule": EMOJI_RULE, "always": True}],
                 [{"id": "L1", "rule": "Short.", "always": False, "weight": 0.1, "strength": 0.5,
                   "recurrence": 1, "last_seen": "2026-01-01", "retires_in": 0}])
    assert html.count("always on") == 1 and "retires soon" in html and "below the retire threshold now" in html


def test_always_on_rules_are_read_from_the_applies_field(store: Path, tmp_path: Path) -> None:
    """`- applies: always` (after `scope`) marks a rule for every task of the skill."""
    issue_file = next((store / "issues").glob("*.md"))
    issue_file.write_text(issue_file.read_text().replace("- scope: commit messages\n",
                                                         "- scope: commit messages\n- applies: always\n"))
    git(store, "commit", "-qam", "mark I1 for every task")
    out = tmp_path / "page.html"
    report(SKILL, output=str(out), config=config_mod.load())
    html = out.read_text(encoding="utf-8")
    assert html.count('<span class="badge always">always on</span>') == 1
