"""The report's page, a pure function of what `report.gather` collected: HTML with its CSS and SVG
charts inline, nothing fetched, no script. Accessible: one heading outline, every chart a titled and
described `role="img"` with its numbers in a table beside it, colours at least 3:1 against white
(text 4.5:1). Every drawn data mark has the class `mark`.
"""
from __future__ import annotations

from html import escape
from typing import Any

# one colour per kind of commit on the timeline (each at least 3:1 against white)
KIND_COLOURS = {"capture": "#0b5cad", "reinforcement": "#1a7f37", "hand edit": "#8250df",
                "revert": "#cf222e", "other change": "#6e7781"}
W, H = 560, 180                          # a chart's viewBox
LEFT, RIGHT, TOP, BOTTOM = 40, 10, 10, 26  # its margins
BAR_MAX = 28                             # the widest a bar is drawn
LISTED = 50                              # items of one advisory list shown before "and N more"
RATE = "repeat-correction rate, last 4 weeks"
OPEN_SCOPES = 40                         # stores with at most this many scopes show them all open

CSS = """
:root{color-scheme:light;--ink:#1b1f24;--muted:#57606a;--line:#d0d7de;--accent:#0b5cad;--track:#c9d7e8}
*{box-sizing:border-box}
body{margin:0 auto;max-width:60rem;padding:1rem;font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;
color:var(--ink);background:#fff;overflow-wrap:anywhere}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.35rem;margin-top:2rem;border-bottom:1px solid var(--line)}
h3{font-size:1.15rem;margin-top:1.5rem}h4{font-size:1rem}
.muted,.meta{color:var(--muted)}.meta{font-size:.9rem;margin:.2rem 0 0}
nav ul{padding-left:1.2rem}
.kpis{display:grid;grid-template-columns:repeat(auto-fill,minmax(11rem,1fr));gap:.6rem;margin:1rem 0;padding:0}
.kpis div{border:1px solid var(--line);border-radius:6px;padding:.5rem .7rem}
.kpis dt{font-size:.85rem;color:var(--muted)}.kpis dd{margin:0;font-size:1.3rem;font-weight:600}
.kpis small{display:block;font-size:.8rem;font-weight:400}
figure{margin:1rem 0;max-width:42rem}svg{width:100%;height:auto;display:block}figcaption{font-size:.9rem;color:var(--muted)}
svg text{font:13px system-ui,sans-serif;fill:#57606a}svg .grid{stroke:#d0d7de;stroke-width:1}
.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.3rem 1rem;font-size:.9rem}
.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.3rem;vertical-align:-1px}
table{border-collapse:collapse;font-size:.9rem}td,th{border:1px solid var(--line);padding:.2rem .5rem;text-align:right}
th:first-child,td:first-child{text-align:left}.scroll{overflow-x:auto}
ul.rules{list-style:none;padding:0;margin:.5rem 0}ul.rules li{border-top:1px solid var(--line);padding:.5rem 0}
.rule p{margin:.2rem 0}.id{font-weight:600;font-family:ui-monospace,monospace;margin-right:.4rem}
.badge{display:inline-block;font-size:.8rem;border-radius:1rem;padding:0 .5rem;margin-right:.3rem;font-weight:600}
.must{background:#cf222e;color:#fff}.always{background:#0b5cad;color:#fff}.soon{background:#fff1c2;color:#6f4400}
.bar{position:relative;height:.75rem;background:#f0f3f6;border-radius:3px;margin:.3rem 0;max-width:28rem}
.bar span{position:absolute;top:0;bottom:0;left:0;border-radius:3px}
.bar .strength{background:var(--track)}.bar .now{background:var(--accent)}
.bar .cut{width:2px;background:#cf222e;border-radius:0}
details{margin:.4rem 0}summary{cursor:pointer}summary h3,summary h4,summary h5{display:inline;margin:0}
code{font-family:ui-monospace,monospace;font-size:.9em}
@media (max-width:40rem){body{padding:.6rem}h1{font-size:1.3rem}.kpis{grid-template-columns:1fr 1fr}}
"""


def render(page: dict[str, Any]) -> str:
    every = page["every"]
    parts = [f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f'<title>{escape(page["title"])}</title><style>{CSS}</style></head><body>',
             f'<header><h1>{escape(page["title"])}</h1><p class="muted">Built {page["date"]} from the markdown, '
             f'its git history and events.jsonl. Weights halve every {page["half_life"]:g} days without use; '
             f'compact retires a learning below weight {page["retire_threshold"]:g}.</p></header><main>']
    if every:
        parts.append('<nav aria-label="Skills"><ul>' + "".join(
            f'<li><a href="#{anchor(s["skill"])}">{escape(s["skill"])}</a></li>' for s in page["skills"])
            + ('<li><a href="#global">global layer</a></li>' if page["global"] else "") + "</ul></nav>")
        if not page["skills"]:
            parts.append("<p>No stores yet.</p>")
    for n, part in enumerate(page["skills"]):
        parts.append(skill_section(page, part, n, 3 if every else 2))
    if not page["is_global"]:  # the global layer's own page has nothing to inherit
        parts.append(global_section(page, 2))
    parts.append("</main></body></html>\n")
    return "".join(parts)


def anchor(text: str) -> str:
    return "skill-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def h(level: int, text: str, ident: str | None = None) -> str:
    attribute = f' id="{ident}"' if ident else ""
    return f"<h{level}{attribute}>{text}</h{level}>"


def skill_section(page: dict[str, Any], part: dict[str, Any], n: int, level: int) -> str:
    weeks = part["weeks"]
    out = ["<section>"]
    if page["every"]:
        out = [f'<section aria-labelledby="{anchor(part["skill"])}">', h(2, escape(part["skill"]), anchor(part["skill"]))]
    out.append(f'<p class="muted">Store: <code>{escape(part["path"])}</code></p>')
    out += [f'<p class="muted">warning: {escape(w)}</p>' for w in part["warnings"]]
    out.append(kpis(page, part))

    out.append(h(level, "Is the agent repeating corrections?"))
    out.append(dots(f"rate-{n}", "Repeat-correction rate per week",
                    "Share of each week's captures that repeated a correction already stored "
                    "(reinforced a learning or met an issue again). Lower is better.", weeks))
    out.append(bars(f"captures-{n}", "Captures per week",
                    "Corrections captured each week (new, reinforced or already an issue).", weeks,
                    [("captures", "captures", "#0b5cad")]))
    out.append(numbers(weeks, [("captures", "captures"), ("repeats", "repeats")], rate=True))

    out.append(h(level, "Rules by scope"))
    out.append(f'<p class="muted">Issues are hard rules the skill must not break. Each learning\'s bar is its weight '
               f'today (dark) against its strength from recurrence before decay (light); the red tick is where compact '
               f'retires it. "retires soon": below that within {page["retire_soon_days"]} days unless seen again.</p>')
    if not part["scopes"]:
        out.append("<p>No learnings or issues yet.</p>")
    fading = sorted((x for x in part["learnings"] if x["retires_in"] is not None
                     and x["retires_in"] <= page["retire_soon_days"]), key=lambda x: (x["retires_in"], x["id"]))
    if fading:
        out.append(h(level + 1, f"Retiring soon ({len(fading)})"))
        out.append(capped([f'{x["id"]} ({escape(x["scope"])}): {escape(x["title"])} — {retire_text(x)}'
                           for x in fading]))
    many = len(part["scopes"]) > OPEN_SCOPES
    for scope in part["scopes"]:
        summary = (f'{escape(scope["scope"])} <span class="muted">({count(len(scope["issues"]), "issue")}, '
                   f'{count(len(scope["learnings"]), "learning")})</span>')
        out.append(f'<details{"" if many else " open"}><summary>{h(level + 1, summary)}</summary>')
        out.append(rules(page, scope["issues"], scope["learnings"]))
        out.append("</details>")

    hist = part["history"]
    out.append(h(level, "History"))
    out.append(bars(f"history-{n}", "Commits per week by kind",
                    f"The store's {hist['commits']} commits from git, by week: "
                    + ", ".join(f"{v} {kind}{'s' if v != 1 else ''}" for kind, v in hist["totals"].items()) + ".",
                    hist["weeks"], [(kind, kind, colour) for kind, colour in KIND_COLOURS.items()]))
    out.append('<ul class="legend">' + "".join(
        f'<li><span class="swatch" style="background:{colour}"></span>{kind} ({hist["totals"][kind]})</li>'
        for kind, colour in KIND_COLOURS.items()) + "</ul>")
    out.append(numbers(hist["weeks"], [(kind, kind) for kind in KIND_COLOURS]))
    out.append(f'<p>Latest {len(hist["recent"])} of {hist["commits"]} commits:</p><ol class="recent">' + "".join(
        f'<li><time datetime="{c["date"]}">{c["date"]}</time> <span class="badge" style="background:'
        f'{KIND_COLOURS[c["kind"]]};color:#fff">{c["kind"]}</span> {escape(c["subject"])} '
        f'<code class="muted">{c["commit"]}</code></li>' for c in hist["recent"]) + "</ol>")

    out.append(h(level, "Waiting for a decision"))
    out.append(advice(part["advice"], level + 1))
    out.append("</section>")
    return "".join(out)


def kpis(page: dict[str, Any], part: dict[str, Any]) -> str:
    k, weeks = part["kpis"], part["weeks"]
    recent, before = window(weeks[-4:]), window(weeks[-8:-4])
    trend = "no captures yet" if recent is None else f"{recent:.0%}" + (
        f'<small class="muted"> (the 4 weeks before: {before:.0%})</small>' if before is not None else "")
    always = sum(x["always"] for x in part["learnings"] + part["issues"])
    soon = sum(x["retires_in"] is not None and x["retires_in"] <= page["retire_soon_days"] for x in part["learnings"])
    advice = part["advice"]
    pending = len(advice["look_alikes"]) + len(advice["unresolved_conflicts"])
    survived = k["learnings_survived"]
    items = [("learnings", k["learnings"]), ("issues (hard rules)", k["issues"]), ("always on", always),
             ("recalls", k["runs"]), ("corrections captured", sum(w["captures"] for w in weeks)),
             (RATE, trend),
             ("learnings survived", "-" if survived is None else f"{survived:.0%}"),
             (f"retiring within {page['retire_soon_days']} days", soon),
             ("look-alikes and conflicts to settle", pending)]
    return '<dl class="kpis">' + "".join(f"<div><dt>{escape(a)}</dt><dd>{b if a == RATE else escape(str(b))}</dd></div>"
                                         for a, b in items) + "</dl>"


def window(weeks: list[dict[str, Any]]) -> float | None:
    captures = sum(w["captures"] for w in weeks)
    return sum(w["repeats"] for w in weeks) / captures if captures else None


def rules(page: dict[str, Any], issues: list[dict], learnings: list[dict]) -> str:
    out = ['<ul class="rules">']
    for x in issues:
        out.append(f'<li class="rule issue"><span class="id">{x["id"]}</span><span class="badge must">must</span>'
                   f'{always_badge(x)}{body(x["rule"])}</li>')
    cut = page["retire_threshold"] * 100
    for x in learnings:
        soon = x["retires_in"] is not None and x["retires_in"] <= page["retire_soon_days"]
        out.append(
            f'<li class="rule learning"><span class="id">{x["id"]}</span>{always_badge(x)}'
            + ('<span class="badge soon">retires soon</span>' if soon else "") + body(x["rule"])
            + f'<div class="bar" role="img" aria-label="weight {x["weight"]:.2f} of 1, {x["strength"]:.2f} before decay">'
            f'<span class="strength" style="width:{x["strength"] * 100:.1f}%"></span>'
            f'<span class="now" style="width:{x["weight"] * 100:.1f}%"></span>'
            f'<span class="cut" style="left:{cut:.1f}%"></span></div>'
            f'<p class="meta">weight {x["weight"]:.2f} · recurrence {x["recurrence"]} · last seen '
            f'{x["last_seen"] or "-"} · {retire_text(x)}</p></li>')
    out.append("</ul>")
    return "".join(out)


def always_badge(x: dict[str, Any]) -> str:
    return '<span class="badge always">always on</span>' if x["always"] else ""


def body(text: str) -> str:
    return "".join(f"<p>{escape(p)}</p>" for p in text.split("\n\n") if p.strip())


def retire_text(x: dict[str, Any]) -> str:
    if x["retires_in"] is None:
        return "never retires"
    return "below the retire threshold now" if x["retires_in"] == 0 else f"retires in {x['retires_in']} days unused"


def advice(found: dict[str, list[dict[str, Any]]], level: int) -> str:
    out = [h(level, "Look-alikes and contradictions the judge could not settle")]
    out.append(capped([f'{" / ".join(p["ids"])} ({escape(p["scope"])}, similarity {p["similarity"]}): '
                       f'{"contradict each other" if p["relation"] == "contradicts" else "one rule, or opposed?"}'
                       + (f' ({escape(p["reason"])})' if p["reason"] else "") + " — "
                       + " / ".join(f"“{escape(r)}”" for r in p["rules"]) for p in found["look_alikes"]]))
    out.append(h(level, "Conflicts captured and never resolved"))
    out.append(capped([f'{c["date"]}: a capture in {escape(str(c["scope"]))} contradicted {escape(str(c["conflicts_with"]))}'
                       for c in found["unresolved_conflicts"]]))
    out.append(h(level, "Worth hardening into an issue"))
    out.append(capped([f'{x["id"]} ({escape(x["scope"])}): recurrence {x["recurrence"]}, reinforced '
                       f'{x["reinforced_recently"]} times lately — {escape(x["rule"])}' for x in found["harden"]]))
    out.append(h(level, "May hold for every task"))
    out.append(capped([f'{x["id"]} ({escape(x["scope"])}): {escape(x["why"])} — {escape(x["rule"])}'
                       for x in found.get("always", [])]))
    out.append(h(level, "Scopes with churn"))
    out.append(capped([f'{escape(c["scope"])}: {", ".join(c["entries"])} captured, then weakened or removed'
                       for c in found["churn"]]))
    out.append(h(level, "Stale: not recalled for 90 days"))
    out.append(capped([f'{x["id"]} ({escape(x["scope"])}): last recalled {x["last_surfaced"] or "never"}'
                       for x in found["stale"]]))
    out.append('<p class="muted">Advisory, as in <code>git whetstone compact</code>: settle one with '
               '<code>git whetstone revise</code>, or leave it.</p>')
    return "".join(out)


def capped(lines: list[str]) -> str:
    if not lines:
        return "<p>None.</p>"
    more = f"<p>… and {len(lines) - LISTED} more.</p>" if len(lines) > LISTED else ""
    return "<ul>" + "".join(f"<li>{line}</li>" for line in lines[:LISTED]) + "</ul>" + more


def global_section(page: dict[str, Any], level: int) -> str:
    layer = page["global"]
    out = [f'<section aria-labelledby="global">{h(level, "Inherited from the global layer", "global")}']
    if not page["consult_global"]:
        out.append("<p>consult_global is off: recall serves no global entries.</p>")
    elif layer is None:
        out.append("<p>No global layer yet (<code>git whetstone promote</code> lifts an entry into it).</p>")
    else:
        out.append(f'<p class="muted">Recall serves these beside each skill\'s own entries (a skill\'s own entry '
                   f'that says the same wins): {count(len(layer["issues"]), "issue")}, '
                   f'{count(len(layer["learnings"]), "learning")}.</p>')
        out += [f'<p class="muted">warning: {escape(w)}</p>' for w in layer["warnings"]]
        out.append(rules(page, layer["issues"], layer["learnings"]))
    out.append("</section>")
    return "".join(out)


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# --- charts ---------------------------------------------------------------------------------------

def frame(cid: str, title: str, desc: str, weeks: list[dict[str, Any]], top: float, percent: bool) -> list[str]:
    """An SVG's opening, its title and description, gridlines with the y labels, and the first,
    middle and last week under the x axis."""
    out = [f'<figure><figcaption><strong>{escape(title)}</strong> · {escape(desc)}</figcaption>'
           f'<svg viewBox="0 0 {W} {H}" role="img" aria-labelledby="{cid}-t {cid}-d" id="{cid}">'
           f'<title id="{cid}-t">{escape(title)}</title><desc id="{cid}-d">{escape(desc)}</desc>']
    for share in (0, 0.5, 1):
        y = TOP + (H - TOP - BOTTOM) * (1 - share)
        label = f"{share:.0%}" if percent else f"{top * share:g}"
        out.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    picks = sorted({0, len(weeks) // 2, len(weeks) - 1})
    for i in picks:
        anchor_at = "middle" if len(weeks) == 1 else "start" if i == 0 else "end" if i == len(weeks) - 1 else "middle"
        out.append(f'<text x="{x_of(i, len(weeks), 0.5):.1f}" y="{H - 8}" text-anchor="{anchor_at}">'
                   f'{weeks[i]["monday"]}</text>')
    return out


def x_of(i: int, n: int, at: float) -> float:
    return LEFT + (W - LEFT - RIGHT) * (i + at) / n


def y_of(value: float, top: float) -> float:
    return TOP + (H - TOP - BOTTOM) * (1 - value / top)


def bars(cid: str, title: str, desc: str, weeks: list[dict[str, Any]], series: list[tuple[str, str, str]]) -> str:
    """Stacked bars, one rect per week and series with a count above zero."""
    if not weeks:
        return f'<p>{escape(title)}: nothing recorded yet.</p>'
    top = max(1, max(sum(w[key] for key, _, _ in series) for w in weeks))
    out = frame(cid, title, desc, weeks, top, percent=False)
    width = min(BAR_MAX, max(0.6, (W - LEFT - RIGHT) / len(weeks) * 0.8))
    for i, w in enumerate(weeks):
        base = 0
        for key, label, colour in series:
            if w[key] <= 0:
                continue
            y0, y1 = y_of(base, top), y_of(base + w[key], top)
            base += w[key]
            out.append(f'<rect class="mark" x="{x_of(i, len(weeks), 0.5) - width / 2:.2f}" y="{y1:.2f}" width="{width:.2f}" '
                       f'height="{y0 - y1:.2f}" fill="{colour}"><title>week of {w["monday"]}: {w[key]} '
                       f'{escape(label)}</title></rect>')
    out.append("</svg></figure>")
    return "".join(out)


def dots(cid: str, title: str, desc: str, weeks: list[dict[str, Any]]) -> str:
    """The weekly rate as a line through one dot per week that had captures."""
    points = [(i, w) for i, w in enumerate(weeks) if w["rate"] is not None]
    if not points:
        return f'<p>{escape(title)}: no captures recorded yet.</p>'
    out = frame(cid, title, desc, weeks, 1, percent=True)
    xy = [(x_of(i, len(weeks), 0.5), y_of(w["rate"], 1)) for i, w in points]
    out.append('<polyline fill="none" stroke="#0b5cad" stroke-width="1.5" points="'
               + " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) + '"/>')
    for (x, y), (_, w) in zip(xy, points):
        out.append(f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="#0b5cad"><title>week of '
                   f'{w["monday"]}: {w["repeats"]} of {w["captures"]} captures repeated ({w["rate"]:.0%})</title></circle>')
    out.append("</svg></figure>")
    return "".join(out)


def numbers(weeks: list[dict[str, Any]], columns: list[tuple[str, str]], rate: bool = False) -> str:
    """A chart's numbers as a table, folded away: weeks with nothing are left out."""
    rows = [w for w in weeks if any(w[key] for key, _ in columns)]
    if not rows:
        return ""
    head = "".join(f"<th scope=col>{escape(label)}</th>" for _, label in columns) + ("<th scope=col>rate</th>" if rate else "")
    body_rows = "".join(
        f'<tr><th scope=row>{w["week"]}</th>' + "".join(f"<td>{w[key]}</td>" for key, _ in columns)
        + (f'<td>{w["rate"]:.0%}</td>' if rate else "") + "</tr>" for w in rows)
    return (f'<details><summary>The numbers, week by week</summary><div class="scroll"><table><thead><tr>'
            f'<th scope=col>week</th>{head}</tr></thead><tbody>{body_rows}</tbody></table></div></details>')
