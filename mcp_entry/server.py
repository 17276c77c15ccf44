"""The whetstone MCP server (SPEC §9): five tools over stdio, each one call into the library.

attach, recall, capture, revise and metrics call the same `git_whetstone` functions as the CLI
and return the same JSON, as structured content and as text (for hosts that only read text).
A `WhetstoneError` becomes an MCP tool error carrying its one-line message, exactly what the CLI
prints after `git whetstone: `; the server keeps serving. Configuration is loaded by the library
on every call (WHETSTONE_STORE_ROOT, the config file), and the library's in-memory index notices
a store that changed under it (a hand edit, another process's capture, a git revert).

Run it as `whetstone-mcp`, `git whetstone mcp`, `python -m mcp_entry.server`, or `whetstone` with
no arguments and stdin not a terminal.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Annotated, Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from git_whetstone import __version__
from git_whetstone.base.errors import WhetstoneError

INSTRUCTIONS = (
    "whetstone remembers one person's taste for each AI skill: learnings (weighted preferences) and "
    "issues (mandatory always/never rules), kept as markdown in a git repository per skill. At the start "
    "of every task that uses a skill, call recall with the skill name and an intent elaborated into the "
    "task's dimensions (what is being made and each aspect you will decide: formatting, layout, color, "
    "wording…), not the user's raw words. Apply every returned issue as mandatory and each learning by "
    "its weight, and keep the run_id. Entries with always true hold for every task of the skill. If the "
    "task touches a scope listed in other_scopes, call recall again with scopes=[that scope]. The moment "
    "you act on a correction or stated preference from the user, call capture: the generalized rule as "
    "body, polarity 'learning' for a taste or 'issue' for an always/never rule, a short scope phrase, the "
    "user's words as provenance, always=true when the user states it for everything done with the skill, "
    "and the run_id. To "
    "strengthen, weaken, reword, remove, promote or demote an entry, call revise with an id that recall "
    "showed. When whetstone cannot tell whether a new rule is the same as a stored one, its opposite or a "
    "different rule, it does not guess: capture returns needs_confirmation with the look-alikes as "
    "candidates, and you are the judge. Read the two rules: if the answer is clear, call capture again "
    "with confirm set to same:<id>, replace:<id>, keep:<id> or new; if it is not, ask the user. "
    "Relay every returned confirmation to the user in one short sentence."
)

# Tool results: the library's JSON object. Declared so hosts see an output schema (an object).
Result = Annotated[CallToolResult, dict[str, Any]]

Skill = Annotated[str, Field(description="The skill's name, e.g. 'great-tables' (lower-case letters, digits, "
                                         ". _ -; spaces become '-').")]
RunId = Annotated[str | None, Field(description="The run_id the last recall returned, linking this call to it.")]
Confirm = Annotated[bool | str | None, Field(
    description="The answer to a previous needs_confirmation (or said up front when you already know): "
                "'same:<id>' the new rule is that entry again (reinforce it); 'replace:<id>' the new rule "
                "supersedes it (one commit); 'keep:<id>' that entry still holds (write nothing); 'new' a "
                "different rule (store it); 'yes' go ahead; 'no' decline a promotion.")]

server: MCPServer = MCPServer("whetstone", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
log = logging.getLogger(__name__)

# One library call at a time: the SDK runs each sync tool on a worker thread, and the library (like
# the CLI) expects one call per process at a time. Cross-process safety is the library's store lock.
_serial = threading.Lock()


def _call(fn: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> CallToolResult:
    """Run one library function; its JSON as structured content and text, or its error as a tool error."""
    try:
        with _serial:
            result = fn(*args, **kwargs)
    except WhetstoneError as exc:
        return _error(exc.message)
    except Exception as exc:  # a library bug: say so in one line, as the CLI does, and keep serving
        log.exception("whetstone: internal error in %s", getattr(fn, "__name__", fn))
        return _error(" ".join(f"internal error: {type(exc).__name__}: {exc}".split()))
    text = json.dumps(result, ensure_ascii=False, indent=2)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=result)


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def tool(fn: Callable[..., Result]) -> Callable[..., Result]:
    """Register `fn` as a tool; its docstring, as one paragraph, is the description the agent reads."""
    server.add_tool(fn, description=" ".join((fn.__doc__ or "").split()))
    return fn


@tool
def attach(
    skill: Skill,
    path: Annotated[str | None, Field(description="The skill's own directory, recorded in the store.")] = None,
) -> Result:
    """Create a skill's memory (a git repository of markdown learnings and issues) if it does not exist
    yet; calling it again is harmless. Optional: capture creates the store on first use too. Returns
    {skill, path, created, status: attached | already_attached}."""
    from git_whetstone.ops.attach import attach as run_attach
    return _call(run_attach, skill, path)


@tool
def recall(
    skill: Skill,
    intent: Annotated[str, Field(description=(
        "The task elaborated into its dimensions, e.g. 'styling a car price table: currency formatting, "
        "column alignment, color encoding of msrp, title and source note' - not the user's raw words."))],
    learnings_k: Annotated[int | None, Field(description="At most this many learnings (1-100; default 12).")] = None,
    scopes: Annotated[list[str] | None, Field(description=(
        "Scope names whose entries you want whatever the intent, e.g. one that other_scopes listed and "
        "the task touches."))] = None,
) -> Result:
    """Call at the start of every task that uses a skill, before you produce anything. Elaborate the
    intent into the dimensions of the task (each aspect you will decide), since entries are matched per
    dimension. Entries with always=true are the user's rules for every task of this skill: they come
    first on every call; apply them whatever the task. Apply every returned issue as mandatory; apply
    learnings by weight (0-1: follow strong ones by default, weigh weak ones against the request).
    other_scopes maps the scopes nothing was returned from to their entry counts: if the task touches
    one of them after all, call recall again with scopes=[that scope] to get its entries. Keep run_id
    for capture and revise, and use the ids shown here with revise. An unknown skill gives empty lists,
    not an error."""
    from git_whetstone.ops.recall import recall as run_recall
    return _call(run_recall, skill, intent, learnings_k, scopes)


@tool
def capture(
    skill: Skill,
    polarity: Annotated[str, Field(description=(
        "'learning' for a taste or soft preference (weighted, grows when repeated); 'issue' for a hard "
        "always/never rule that must not be broken again."), json_schema_extra={"enum": ["learning", "issue"]})],
    body: Annotated[str, Field(description=(
        "The correction generalized into a rule another run can apply, e.g. 'Format the price column "
        "as US dollars with no decimal places.'"))],
    scope: Annotated[str, Field(description="A short phrase for when the rule applies, e.g. 'currency formatting'.")],
    provenance: Annotated[str, Field(
        description="The user's own words that prompted this, quoted briefly ('' if there were none).")],
    run_id: RunId = None,
    confirm: Confirm = None,
    always: Annotated[bool | None, Field(description=(
        "true when the user states the rule for everything done with this skill, not for one kind of "
        "task (e.g. a language, dialect, tone or house style that holds whatever the task): recall then "
        "returns it on every call."))] = None,
) -> Result:
    """Call this the moment you act on a correction or stated preference from the user, not at the end
    of the task: one correction is enough for it to stick. Use polarity 'learning' for taste and
    'issue' for always/never rules. Set always=true when the user says the rule holds for every task of
    the skill ("always", "in everything you write", "whatever the task"): such rules share no words with
    most tasks, so only the mark brings them back every time. Whetstone decides alone only when it is sure: the same rule again
    is reinforced (an issue: a no-op); a rule whose words say the opposite of a stored one comes back
    as status conflict naming both (nothing written). When it is not sure, you are the judge: status
    needs_confirmation lists `candidates` (id, rule, scope, similarity). Compare the new rule with each:
    call capture again with the same arguments plus confirm='same:<id>' if it says the same thing,
    'replace:<id>' if it changes that rule (the user changed their mind), 'keep:<id>' if the stored rule
    still holds and the new one should not be kept, or 'new' if it is a different rule; when you cannot
    tell, or the two contradict, ask the user which holds. If you already know the relation, pass confirm
    on the first call. A result with `similar` was stored but looks like those entries: check them. If
    it carries a promotion question, ask the user and answer it with revise. Relay the returned
    confirmation to the user."""
    from git_whetstone.ops.capture import capture as run_capture
    return _call(run_capture, skill, polarity, body, scope, provenance, run_id, confirm, always)


@tool
def revise(
    skill: Skill,
    entry_id: Annotated[str, Field(description="The id of an entry recall showed, e.g. 'L3' or 'I2'.")],
    action: Annotated[str | None, Field(description=(
        "reinforce or weaken (learnings), remove, promote (learning to issue), demote (issue to learning); "
        "with target: same (entry_id says what target says: fold it into target), replace (entry_id "
        "supersedes target, which is removed), distinct (both hold: never asked about or mentioned as a "
        "pair again); omit it when you only set always."),
        json_schema_extra={"enum": ["reinforce", "weaken", "remove", "promote", "demote", "same", "replace",
                                    "distinct", None]})] = None,
    body: Annotated[str | None, Field(description="New wording for the entry (optional).")] = None,
    scope: Annotated[str | None, Field(description="Move the entry to this scope (optional).")] = None,
    run_id: RunId = None,
    confirm: Confirm = None,
    always: Annotated[bool | None, Field(description=(
        "true marks the entry as a rule for every task of the skill (recalled first, every time); false "
        "takes the mark off. Given without an action."))] = None,
    target: Annotated[str | None, Field(description=(
        "The entry the action is about, for same/replace/distinct, e.g. 'L3' (an id a capture's similar "
        "or candidates named)."))] = None,
) -> Result:
    """Change an entry that recall showed, by its id: reinforce it when the user repeats it, weaken it
    when they push back, reword it (body) or move it (scope), promote a learning the user now treats as
    a hard rule, demote an issue, or remove it; or set always=true (no action) when the user says an
    entry holds for every task. remove, promote and demote first return needs_confirmation: ask the
    user the prompt, then call again with confirm. To settle a look-alike a capture named under
    `similar` (or two entries you find overlap), give target and the relation you judged: same,
    replace or distinct; it is done in one commit, without a question. Relay the returned
    confirmation to the user."""
    from git_whetstone.ops.revise import revise as run_revise
    return _call(run_revise, skill, entry_id, action, body, scope, run_id, confirm, always, target)


@tool
def metrics(
    skill: Annotated[str | None, Field(description="One skill; omit for every skill in the store.")] = None,
) -> Result:
    """How the recall/capture loop is doing, per skill: runs, learnings surfaced per run, captures by
    status, the weekly rate of corrections that repeated an earlier one, and how many learnings
    survived. Read-only; use it when the user asks whether whetstone is working."""
    from git_whetstone.ops.metrics import metrics as run_metrics
    return _call(run_metrics, skill)


def main() -> None:
    """Serve the five tools over stdio until the host closes stdin."""
    tune_malloc()
    server.run("stdio")


def tune_malloc() -> None:
    """glibc raises its mmap threshold (up to 32 MB) each time a big block is freed; from then on a
    recall's multi-megabyte numpy temporaries come from the heap of the worker thread that ran the
    call and stay resident once freed: 14 MB more peak memory after ten recalls at 100,000
    entries. A fixed threshold keeps blocks of 4 MB and more mapped, given back when freed.
    And one arena for every thread: the SDK runs each call (and each read of stdin) on whichever
    worker thread is free, and glibc gives each new thread an arena of its own when it first
    allocates, which kept what a call left free for that thread only: 2 to 6 MB more peak memory
    after ten recalls at 100,000 entries, varying from run to run. Calls run one at a time
    (`_serial`), so threads hardly ever wait for the arena's lock."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-8, 1)        # M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc: its allocator decides
        pass


if __name__ == "__main__":
    main()
