"""The whetstone MCP server (SPEC §9): five tools over stdio, each one call into the library.

attach, recall, capture, revise and metrics call the same `git_whetstone` functions as the CLI
and return the same JSON, as structured content and as text (for hosts that only read text).
A `WhetstoneError` becomes an MCP tool error carrying its one-line message, exactly what the CLI
prints after `git whetstone: `; the server keeps serving. Configuration is loaded by the library
on every call (WHETSTONE_STORE_ROOT, the config file), and the library's in-memory index notices
a store that changed under it (a hand edit, another process's capture, a git revert).

When the client declares the `sampling` capability, capture and revise hand the library a
`decide`: a look-alike whetstone would otherwise put to the agent (`needs_confirmation`) is first
put to the host's model (`sampling/createMessage`, both rules, one word back), within
`sampling_timeout` seconds; no clear word, a refusal or a timeout leaves the question to the agent.

Run it as `whetstone-mcp`, `git whetstone mcp`, `python -m mcp_entry.server`, or `whetstone` with
no arguments and stdin not a terminal.
"""
from __future__ import annotations

import json
import logging
import string
import threading
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Callable

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import CallToolResult, ClientCapabilities, SamplingCapability, SamplingMessage, TextContent
from pydantic import Field, ValidationError

from git_whetstone import __version__, api
from git_whetstone.base.errors import WhetstoneError, shown

if TYPE_CHECKING:
    from git_whetstone.format.entry import Entry

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

class Server(MCPServer):
    """The SDK's server, with arguments its input schema refuses (a missing body, a word for a
    number) answered as the library's own refusals are: one line naming the argument, not
    pydantic's report with a link in it."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(refused(exc.__cause__)) from exc.__cause__
            raise


EXPECTED = {"string": "text", "int": "a whole number", "float": "a number", "bool": "true or false",
            "list": "a list", "dict": "an object"}  # what a pydantic error type (by its first word) asked for


def refused(error: ValidationError) -> str:
    """A validation error as one line: each argument it names, once, and what was wrong with it."""
    said: dict[str, str] = {}
    for problem in error.errors(include_url=False):
        name = str(problem["loc"][0]) if problem["loc"] else "arguments"
        if name in said:
            continue  # a union's other members refused it too
        kind = str(problem["type"])
        if kind == "missing":
            said[name] = f"{name} is missing"
        elif kind.split("_")[0] in EXPECTED:
            said[name] = f"{name} must be {EXPECTED[kind.split('_')[0]]}, got {shown(problem.get('input'))}"
        else:
            said[name] = f"{name}: {' '.join(str(problem['msg']).split()).lower()}"
    return "; ".join(said.values()) or "the arguments do not fit the tool's input schema"


server: MCPServer = Server("whetstone", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
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


# --- the host's model as a second judge (MCP sampling) -----------------------------------------------

SAMPLING_PROMPT = (
    "You compare two rules one person gave an AI assistant, kept in a memory of their preferences. "
    "Answer with exactly one word: same, replaces, contradicts or different.")
SAMPLING_TOKENS = 8  # one word, and room for a full stop


def _with_host(fn: Callable[..., dict[str, Any]], ctx: Context | None, skill: object,
               scope: object) -> Callable[..., dict[str, Any]]:
    """`fn` (the library's capture or revise) called with the configuration loaded here and, when
    the client offers sampling and `sampling_timeout` is above 0, a `decide` that asks the host's
    model about a look-alike."""
    def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
        from git_whetstone.base.config import load
        config = load()
        decide = _host_model(ctx, config.sampling_timeout, skill, scope)
        return fn(*args, config=config, decide=decide, **kwargs)
    run.__name__ = getattr(fn, "__name__", "call")
    return run


def _host_model(ctx: Context | None, timeout: float, skill: object,
                scope: object) -> Callable[[str, Entry], str | None] | None:
    """A `decide` for the library that puts a pair to the host's model through the client
    (`sampling/createMessage`), or None when the client did not declare sampling or it is off.
    It runs on the tool's worker thread and awaits the answer on the server's event loop (which
    keeps serving meanwhile); no clear answer in time is None, never an error."""
    if ctx is None or timeout <= 0:
        return None
    try:
        session = ctx.request_context.session
        request_id = ctx.request_context.request_id
        if not session.check_client_capability(ClientCapabilities(sampling=SamplingCapability())):
            return None
    except Exception as exc:  # no request context (a direct call), a transport without one
        log.debug("whetstone: no sampling: %r", exc)
        return None

    def decide(body: str, entry: Entry) -> str | None:
        async def ask() -> Any:
            with anyio.fail_after(timeout):
                return await session.create_message(
                    messages=[SamplingMessage(role="user", content=TextContent(
                        type="text", text=_question(skill, body, scope, entry)))],
                    max_tokens=SAMPLING_TOKENS, system_prompt=SAMPLING_PROMPT, related_request_id=request_id)
        try:
            result = anyio.from_thread.run(ask)
        except Exception as exc:  # a refusal (MCPError), a timeout, a closed connection: the agent is asked
            log.debug("whetstone: the host's model did not judge %s: %r", entry.id, exc)
            return None
        verdict = answer_of(result)
        log.debug("whetstone: the host's model judged %s: %r", entry.id, verdict)
        return verdict
    return decide


def _question(skill: object, body: str, scope: object, entry: Entry) -> str:
    """The user message put to the host's model: both rules with their scopes, and the four answers."""
    where = f" (scope: {scope})" if isinstance(scope, str) and scope.strip() else ""
    return (f"Two rules from one person's corrections for the skill '{skill}'.\n\n"
            f"Stored rule (scope: {entry.scope}): {entry.body}\n"
            f"New rule{where}: {body}\n\n"
            "How does the new rule relate to the stored one? Answer with exactly one word:\n"
            "same - it says the same thing, perhaps in other words;\n"
            "replaces - it changes the stored rule (the person changed their mind): the new one holds instead;\n"
            "contradicts - the two cannot both hold, and it is unclear which one the person wants now;\n"
            "different - both hold: they are about different things or different cases.")


def answer_of(result: Any) -> str | None:
    """The host model's answer: its text stripped, lower-cased, its surrounding punctuation removed;
    one of the words the library's `decide` may say (`api.VERDICTS`), or None for anything else."""
    content = getattr(result, "content", None)
    blocks = content if isinstance(content, list) else [content]
    text = "".join(getattr(block, "text", "") or "" for block in blocks if getattr(block, "type", "") == "text")
    word = text.strip().lower().strip(string.punctuation + string.whitespace)
    return word if word in api.VERDICTS else None


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
    return _call(api.attach, skill, path)


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
    return _call(api.recall, skill, intent, learnings_k, scopes)


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
    provenance: Annotated[str | None, Field(
        description="The user's own words that prompted this, quoted briefly (leave it out if there were none).")] = "",
    run_id: RunId = None,
    confirm: Confirm = None,
    always: Annotated[bool | None, Field(description=(
        "true when the user states the rule for everything done with this skill, not for one kind of "
        "task (e.g. a language, dialect, tone or house style that holds whatever the task): recall then "
        "returns it on every call."))] = None,
    ctx: Context | None = None,
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
    on the first call. When the host offers sampling, whetstone may first ask the host's model about
    such a pair and act on its clear answer (the result then says decided_by 'host-model'). A result
    with `similar` was stored but looks like those entries: check them. If it carries a promotion
    question, ask the user and answer it with revise. Relay the returned confirmation to the user."""
    return _call(_with_host(api.capture, ctx, skill, scope), skill, polarity, body, scope, provenance, run_id,
                 confirm, always)


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
    ctx: Context | None = None,
) -> Result:
    """Change an entry that recall showed, by its id: reinforce it when the user repeats it, weaken it
    when they push back, reword it (body) or move it (scope), promote a learning the user now treats as
    a hard rule, demote an issue, or remove it; or set always=true (no action) when the user says an
    entry holds for every task. remove, promote and demote first return needs_confirmation: ask the
    user the prompt, then call again with confirm. To settle a look-alike a capture named under
    `similar` (or two entries you find overlap), give target and the relation you judged: same,
    replace or distinct; it is done in one commit, without a question. Relay the returned
    confirmation to the user."""
    return _call(_with_host(api.revise, ctx, skill, scope), skill, entry_id, action, body, scope, run_id, confirm,
                 always, target)


@tool
def metrics(
    skill: Annotated[str | None, Field(description="One skill; omit for every skill in the store.")] = None,
) -> Result:
    """How the recall/capture loop is doing, per skill: runs, learnings surfaced per run, captures by
    status, the weekly rate of corrections that repeated an earlier one, and how many learnings
    survived. Read-only; use it when the user asks whether whetstone is working."""
    return _call(api.metrics, skill)


def main() -> None:
    """Serve the five tools over stdio until the host closes stdin."""
    # MCP's 2026-07-28 revision deprecates sampling (SEP-2577); the hosts that offer it speak an
    # earlier one, and a warning on stderr for every pair put to their model would only be noise
    warnings.filterwarnings("ignore", message="The sampling capability is deprecated",
                            category=MCPDeprecationWarning)
    server.run("stdio")


if __name__ == "__main__":
    main()
