"""The host's model as a second judge (SPEC §4, "MCP sampling").

A pair whetstone would put to the caller (the judge finds the new rule *likely* the same as a
stored one, or its opposite) is first put to a `decide` the door lends the library; the MCP server
makes it from `sampling/createMessage` when the client offers sampling. First the library's mapping
with a plain Python `decide` (fast), then the real server in a subprocess, driven by the SDK's stdio
client with a `sampling_callback` that answers as a scripted judge.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from git_whetstone.base.config import Config, load
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.format.entry import Entry
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.writing.revise import revise

from ..conftest import GIT_IDENTITY
from ..helpers import REPO, git
from .test_mcp import SERVER, Served

SCOPE = "status updates"
STORED = "Keep weekly status updates short."
# Likely the opposite of STORED (length: long against short), not sure: the caller would be asked.
OPPOSITE = "Keep weekly status updates long, listing every open risk."
# Likely STORED again in other words.
PARAPHRASE = "Keep weekly status updates short, one paragraph at most."
SECOND = "Keep weekly status updates brief and plain."  # with STORED: two likely look-alikes of OPPOSITE
OTHER = "Email the weekly update to the whole team."  # related to STORED, no more


class Scripted:
    """A `decide` that answers from a script and records what it was asked."""

    def __init__(self, *answers: str | None) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []  # (new rule, stored entry's id)

    def __call__(self, body: str, entry: Entry) -> str | None:
        self.asked.append((body, entry.id))
        return self.answers.pop(0) if self.answers else None


def head(skill: str, root: Path) -> str:
    return git(root / skill, "rev-parse", "HEAD").stdout.strip()


def store_text(root: Path, skill: str) -> str:
    return "".join(p.read_text() for p in sorted((root / skill / "learnings").glob("*.md")))


def block_of(text: str, entry_id: str) -> str:
    """One block of a scope file's text, from its heading to the next."""
    start = text.index(f"## {entry_id} ")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def stored(skill: str, *rules: str) -> None:
    for rule in rules:
        assert capture(skill, "learning", rule, SCOPE, "said", confirm="new")["status"] == "committed"


# --- the library's mapping, with a plain Python decide ------------------------------------------------

def test_the_pair_is_one_whetstone_would_ask_about() -> None:
    """The premise of every test here: with the hashing backend the suite pins, OPPOSITE and
    PARAPHRASE are likely (not sure) look-alikes of STORED in the same scope."""
    stored("premise", STORED)
    for body in (OPPOSITE, PARAPHRASE):
        asked = capture("premise", "learning", body, SCOPE, "y")
        assert asked["status"] == "needs_confirmation" and [c["id"] for c in asked["candidates"]] == ["L1"], asked
        assert "decided_by" not in asked


def test_same_reinforces_the_stored_rule(store_root: Path) -> None:
    stored("lib-same", STORED)
    judge = Scripted("same")
    result = capture("lib-same", "learning", PARAPHRASE, SCOPE, "y", decide=judge)
    assert judge.asked == [(PARAPHRASE, "L1")]
    assert result["status"] == "reinforced" and result["entry_id"] == "L1" and result["recurrence"] == 2
    assert result["decided_by"] == "host-model"
    events = [json.loads(line) for line in (store_root / "lib-same" / "events.jsonl").read_text().splitlines()]
    assert events[-1]["status"] == "reinforced" and events[-1]["decided_by"] == "host-model"


def test_same_for_an_issue_over_a_learning_still_asks_before_hardening(store_root: Path) -> None:
    """The host's model judges the relation; hardening a learning into a mandatory issue stays the
    person's call, as when the judge itself is sure the two are one rule."""
    stored("lib-harden", STORED)
    before = head("lib-harden", store_root)
    result = capture("lib-harden", "issue", PARAPHRASE, SCOPE, "y", decide=Scripted("same"))
    assert result["status"] == "needs_confirmation" and "hardens learning L1" in result["prompt"], result
    assert result["decided_by"] == "host-model" and head("lib-harden", store_root) == before
    done = capture("lib-harden", "issue", PARAPHRASE, SCOPE, "y", confirm="yes", decide=Scripted("same"))
    assert done["status"] == "committed" and done["entry_id"] == "I1" and done["decided_by"] == "host-model"


def test_replaces_supersedes_the_stored_rule(store_root: Path) -> None:
    stored("lib-replaces", STORED)
    result = capture("lib-replaces", "learning", OPPOSITE, SCOPE, "y", decide=Scripted("replaces"))
    assert result["status"] == "committed" and result["entry_id"] == "L2" and result["replaced_id"] == "L1"
    assert result["decided_by"] == "host-model"
    text = store_text(store_root, "lib-replaces")
    assert "## L1 " not in text and "## L2 · Keep weekly status updates long" in text


def test_contradicts_is_a_conflict_and_writes_nothing(store_root: Path) -> None:
    stored("lib-contradicts", STORED)
    before = head("lib-contradicts", store_root)
    result = capture("lib-contradicts", "learning", OPPOSITE, SCOPE, "y", decide=Scripted("contradicts"))
    assert result["status"] == "conflict" and result["conflicts_with"]["id"] == "L1"
    assert "host's model" in result["reason"] and "host's model" in result["prompt"]
    assert result["decided_by"] == "host-model" and result["entry_id"] is None
    assert head("lib-contradicts", store_root) == before


def test_different_for_every_look_alike_writes_the_rule_with_both_remembered(store_root: Path) -> None:
    stored("lib-different", STORED, SECOND, OTHER)
    judge = Scripted("different", "different")
    result = capture("lib-different", "learning", OPPOSITE, SCOPE, "y", decide=judge)
    assert judge.asked == [(OPPOSITE, "L1"), (OPPOSITE, "L2")]  # nearest first, each once
    assert result["status"] == "committed" and result["entry_id"] == "L4" and result["decided_by"] == "host-model"
    assert "- differs_from: L1, L2\n" in block_of(store_text(store_root, "lib-different"), "L4")
    assert {c["id"] for c in result.get("similar", [])} <= {"L3"}  # the answered pairs are not mentioned
    # the same rule again is that entry again: reinforced, and the pairs are not put to anyone again
    again = Scripted()
    repeated = capture("lib-different", "learning", OPPOSITE, SCOPE, "z", decide=again)
    assert repeated["status"] == "reinforced" and repeated["entry_id"] == "L4" and again.asked == []
    assert "decided_by" not in repeated


def test_the_first_clear_answer_after_different_decides() -> None:
    stored("lib-second", STORED, SECOND)
    judge = Scripted("different", "same")
    result = capture("lib-second", "learning", OPPOSITE, SCOPE, "y", decide=judge)
    assert judge.asked == [(OPPOSITE, "L1"), (OPPOSITE, "L2")]
    assert result["status"] == "reinforced" and result["entry_id"] == "L2" and result["decided_by"] == "host-model"


@pytest.mark.parametrize("answers", [(None,), ("maybe",), ("SAME",), ("different", None), (1,)])
def test_no_clear_answer_asks_the_caller_as_before(answers: tuple[Any, ...], store_root: Path) -> None:
    """None, a word that is not one of the four (the library takes them exactly), or no clear answer
    about a later look-alike: needs_confirmation with every candidate, as without decide."""
    skill = "lib-unclear"
    stored(skill, STORED, SECOND)
    before = head(skill, store_root)
    without = capture(skill, "learning", OPPOSITE, SCOPE, "y")
    judge = Scripted(*answers)
    result = capture(skill, "learning", OPPOSITE, SCOPE, "y", decide=judge)
    assert len(judge.asked) == len(answers)
    assert result == without and "decided_by" not in result
    assert head(skill, store_root) == before


@pytest.mark.parametrize("mode", ["supervised", "autonomous"])
def test_decide_is_asked_only_in_balanced_mode(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stored(f"lib-{mode}", STORED)
    monkeypatch.setenv("WHETSTONE_SUPERVISION", mode)
    judge = Scripted("same")
    result = capture(f"lib-{mode}", "learning", OPPOSITE, SCOPE, "y", decide=judge)
    assert judge.asked == [] and "decided_by" not in result
    assert result["status"] == ("needs_confirmation" if mode == "supervised" else "committed"), result


def test_decide_is_not_asked_when_the_judge_is_sure_or_the_caller_answered() -> None:
    stored("lib-sure", STORED)
    judge = Scripted("different", "different", "different")
    assert capture("lib-sure", "learning", STORED, SCOPE, "y", decide=judge)["status"] == "reinforced"
    assert capture("lib-sure", "learning", "Keep weekly status updates long.", SCOPE, "y",
                   decide=judge)["status"] == "conflict"
    assert capture("lib-sure", "learning", "Name chart files after their date.", "file names", "y",
                   decide=judge)["status"] == "committed"
    assert capture("lib-sure", "learning", OPPOSITE, SCOPE, "y", confirm="keep:L1", decide=judge)["status"] == "noop"
    assert judge.asked == []


# --- revise -------------------------------------------------------------------------------------------

def test_revise_different_goes_ahead_with_both_remembered(store_root: Path) -> None:
    stored("rev-different", STORED, OTHER)
    judge = Scripted("different")
    result = revise("rev-different", "L2", "reinforce", body=OPPOSITE, decide=judge)
    assert judge.asked == [(OPPOSITE, "L1")]
    assert result["status"] == "committed" and result["entry_id"] == "L2" and result["recurrence"] == 2
    assert result["decided_by"] == "host-model" and "similar" not in result
    text = store_text(store_root, "rev-different")
    assert "- differs_from: L2\n" in block_of(text, "L1") and OPPOSITE in block_of(text, "L2")


def test_revise_contradicts_is_a_conflict(store_root: Path) -> None:
    stored("rev-contradicts", STORED, OTHER)
    before = head("rev-contradicts", store_root)
    result = revise("rev-contradicts", "L2", "reinforce", body=OPPOSITE, decide=Scripted("contradicts"))
    assert result["status"] == "conflict" and result["conflicts_with"]["id"] == "L1"
    assert "host's model" in result["reason"] and result["decided_by"] == "host-model"
    assert head("rev-contradicts", store_root) == before


@pytest.mark.parametrize(("said", "call"), [("same", "same"), ("replaces", "replace")])
def test_revise_same_or_replaces_names_the_entry_and_the_call_that_settles_it(said: str, call: str,
                                                                             store_root: Path) -> None:
    skill = f"rev-{said}"
    stored(skill, STORED, OTHER)
    before = head(skill, store_root)
    result = revise(skill, "L2", "reinforce", body=OPPOSITE, decide=Scripted(said))
    assert result["status"] == "needs_confirmation" and result["decided_by"] == "host-model"
    assert [c["id"] for c in result["candidates"]] == ["L1"]
    assert "host's model" in result["prompt"] and f"revise(entry_id='L2', action='{call}', target='L1')" in result["prompt"]
    assert head(skill, store_root) == before


def test_revise_without_a_clear_answer_asks_as_before() -> None:
    stored("rev-unclear", STORED, OTHER)
    without = revise("rev-unclear", "L2", "reinforce", body=OPPOSITE)
    result = revise("rev-unclear", "L2", "reinforce", body=OPPOSITE, decide=Scripted("perhaps"))
    assert result["status"] == "needs_confirmation" and result == without and "decided_by" not in result


def test_revise_promote_judged_different_still_asks_the_person_to_confirm(store_root: Path) -> None:
    stored("rev-promote", STORED, OTHER)
    revise("rev-promote", "L2", "reinforce", body=OPPOSITE, confirm="yes")  # now a look-alike of L1
    before = head("rev-promote", store_root)
    judge = Scripted("different")
    asked = revise("rev-promote", "L2", "promote", decide=judge)
    assert judge.asked == [(OPPOSITE, "L1")]
    assert asked["status"] == "needs_confirmation" and "mandatory issue" in asked["prompt"]
    assert asked["decided_by"] == "host-model" and head("rev-promote", store_root) == before
    done = revise("rev-promote", "L2", "promote", confirm="yes", decide=judge)
    assert done["status"] == "committed" and len(judge.asked) == 1  # 'yes' answers the look-alike too


# --- the configuration key ----------------------------------------------------------------------------

def test_sampling_timeout_defaults_overrides_and_refusals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Config().sampling_timeout == 8 and load().sampling_timeout == 8
    monkeypatch.setenv("WHETSTONE_SAMPLING_TIMEOUT", "0")
    assert load().sampling_timeout == 0
    monkeypatch.setenv("WHETSTONE_SAMPLING_TIMEOUT", "2.5")
    assert load().sampling_timeout == 2.5
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv("WHETSTONE_SAMPLING_TIMEOUT", bad)
        with pytest.raises(WhetstoneError) as refused:
            load()
        assert "WHETSTONE_SAMPLING_TIMEOUT" in refused.value.message and "sampling_timeout" in refused.value.message
    monkeypatch.delenv("WHETSTONE_SAMPLING_TIMEOUT")
    config_file = tmp_path / "config.toml"
    config_file.write_text("sampling_timeout = 0\n")
    monkeypatch.setenv("WHETSTONE_CONFIG", str(config_file))
    assert load().sampling_timeout == 0
    config_file.write_text('sampling_timeout = "never"\n')
    with pytest.raises(WhetstoneError, match="sampling_timeout"):
        load()


# --- the server's reading of the host model's reply ---------------------------------------------------

@pytest.mark.parametrize(("text", "word"), [
    ("same", "same"), ("Same.", "same"), ("  DIFFERENT\n", "different"), ("replaces!", "replaces"),
    ("**contradicts**", "contradicts"), ("maybe", None), ("same or different", None), ("", None),
    ("The same.", None), ("replace", None),
])
def test_the_reply_is_one_of_the_four_words_or_nothing(text: str, word: str | None) -> None:
    from mcp_entry.server import answer_of
    reply = types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=text), model="m")
    assert answer_of(reply) == word
    image = types.CreateMessageResult(role="assistant", model="m", content=types.ImageContent(
        type="image", data="AAAA", mime_type="image/png"))
    assert answer_of(image) is None and answer_of(None) is None


def test_no_decide_without_a_request_context_or_with_sampling_off() -> None:
    from mcp_entry.server import _host_model
    assert _host_model(None, 20, "s", SCOPE) is None
    assert _host_model(object(), 0, "s", SCOPE) is None  # type: ignore[arg-type]
    assert _host_model(object(), 20, "s", SCOPE) is None  # type: ignore[arg-type]  (no request_context)


# --- the real server, its client offering sampling -----------------------------------------------------

class HostModel:
    """The client's `sampling_callback`: answers as a scripted judge ("same", …, an ErrorData for a
    refusal, or a pause longer than the server waits), and records every request it got."""

    def __init__(self) -> None:
        self.reply: str | types.ErrorData = "different"
        self.pause = 0.0
        self.requests: list[types.CreateMessageRequestParams] = []

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams
                       ) -> types.CreateMessageResult | types.ErrorData:
        self.requests.append(params)
        if self.pause:
            await anyio.sleep(self.pause)
        if isinstance(self.reply, types.ErrorData):
            return self.reply
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=self.reply),
                                         model="scripted", stop_reason="endTurn")

    def script(self, reply: str | types.ErrorData, pause: float = 0.0) -> None:
        self.reply, self.pause, self.requests = reply, pause, []


@asynccontextmanager
async def session(env: dict[str, str], errlog_path: Path,
                  sampling: HostModel | None) -> AsyncIterator[tuple[ClientSession, Any]]:
    """A connected, initialized client on a fresh server process, offering sampling when given a model."""
    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=env, cwd=str(REPO))
    with open(errlog_path, "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, sampling_callback=sampling) as client:
                with anyio.fail_after(60):
                    init = await client.initialize()
                yield client, init


class Host(Served):
    """A served module's server with its client's model, and the config file both read."""

    model: HostModel
    config_file: Path

    def configure(self, text: str) -> None:
        self.config_file.parent.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(text)


def serve(tmp_path_factory: pytest.TempPathFactory, name: str, sampling: HostModel | None,
          **env_extra: str) -> Iterator[Host]:
    base = tmp_path_factory.mktemp(name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHETSTONE_")}
    env.update(GIT_IDENTITY, HOME=str(base / "home"), XDG_CONFIG_HOME=str(base / "home" / ".config"),
               XDG_DATA_HOME=str(base / "home" / ".local" / "share"), GIT_CONFIG_NOSYSTEM="1",
               WHETSTONE_STORE_ROOT=str(base / "stores"), WHETSTONE_EMBEDDING_BACKEND="hashing", **env_extra)
    (base / "home").mkdir()
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(session(env, base / "server-stderr.log", sampling)) as (client, init):
            host = Host(portal, client, init, env, base / "stores")
            host.model = sampling or HostModel()
            host.config_file = base / "home" / ".config" / "whetstone" / "config.toml"
            yield host
    assert "Traceback" not in (base / "server-stderr.log").read_text()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """The server, its client offering sampling (a scripted model)."""
    yield from serve(tmp_path_factory, "sampling", HostModel())


@pytest.fixture
def judged(host: Host) -> Iterator[Host]:
    """The host with its model scripted afresh and no config file; removed again after the test."""
    host.model.script("different")
    host.config_file.unlink(missing_ok=True)
    yield host
    host.config_file.unlink(missing_ok=True)


def seed(host: Host, skill: str, *rules: str) -> None:
    for rule in rules:
        assert host.call("capture", skill=skill, polarity="learning", body=rule, scope=SCOPE, provenance="x",
                         confirm="new")["status"] == "committed"


def commits(host: Host, skill: str) -> int:
    return int(git(host.root / skill, "rev-list", "--count", "HEAD").stdout)


def put(host: Host, skill: str, body: str, **more: Any) -> dict[str, Any]:
    return host.call("capture", skill=skill, polarity="learning", body=body, scope=SCOPE, provenance="y", **more)


def test_the_context_parameter_is_hidden_from_the_tools_schemas(judged: Host) -> None:
    tools = {t.name: t for t in judged.portal.call(judged.client.list_tools).tools}
    assert set(tools["capture"].input_schema["properties"]) == {"skill", "polarity", "body", "scope", "provenance",
                                                                "run_id", "confirm", "always"}
    assert "ctx" not in tools["revise"].input_schema["properties"]
    assert "ctx" not in json.dumps(tools["capture"].input_schema)
    assert "host's model" in tools["capture"].description and "sampling" in tools["capture"].description


def test_host_model_same_reinforces(judged: Host) -> None:
    skill = "host-same"
    seed(judged, skill, STORED)
    judged.model.script("same")
    result = put(judged, skill, PARAPHRASE)
    assert result["status"] == "reinforced" and result["entry_id"] == "L1" and result["recurrence"] == 2
    assert result["decided_by"] == "host-model"
    [request] = judged.model.requests
    asked = request.messages[0].content.text
    assert STORED in asked and PARAPHRASE in asked
    assert asked.count(f"(scope: {SCOPE})") == 2  # both rules, each with its scope
    assert request.max_tokens <= 16
    for word in ("same", "replaces", "contradicts", "different"):
        assert word in request.system_prompt and word in asked


def test_host_model_replaces(judged: Host) -> None:
    skill = "host-replaces"
    seed(judged, skill, STORED)
    judged.model.script("replaces")
    result = put(judged, skill, OPPOSITE)
    assert result["status"] == "committed" and result["replaced_id"] == "L1" and result["entry_id"] == "L2"
    assert result["decided_by"] == "host-model"
    assert "## L1 " not in store_text(judged.root, skill)


def test_host_model_contradicts_writes_nothing(judged: Host) -> None:
    skill = "host-contradicts"
    seed(judged, skill, STORED)
    before = commits(judged, skill)
    judged.model.script("Contradicts.")
    result = put(judged, skill, OPPOSITE)
    assert result["status"] == "conflict" and result["conflicts_with"]["id"] == "L1"
    assert result["decided_by"] == "host-model" and "host's model" in result["reason"]
    assert commits(judged, skill) == before


def test_host_model_different_stores_the_rule_and_is_not_asked_again(judged: Host) -> None:
    skill = "host-different"
    seed(judged, skill, STORED)
    before = commits(judged, skill)
    judged.model.script("  Different.\n")
    result = put(judged, skill, OPPOSITE)
    assert result["status"] == "committed" and result["entry_id"] == "L2" and result["decided_by"] == "host-model"
    assert commits(judged, skill) == before + 1 and len(judged.model.requests) == 1
    assert "- differs_from: L1\n" in block_of(store_text(judged.root, skill), "L2")
    judged.model.script("different")
    again = put(judged, skill, OPPOSITE)
    assert again["status"] == "reinforced" and again["entry_id"] == "L2" and judged.model.requests == []


@pytest.mark.parametrize("reply", [types.ErrorData(code=types.INVALID_REQUEST, message="the user declined"),
                                   "maybe", "same or different", ""])
def test_a_refusal_or_an_unclear_answer_falls_back_to_needs_confirmation(reply: Any, judged: Host) -> None:
    skill = "host-unclear"
    if not (judged.root / skill).exists():
        seed(judged, skill, STORED)
    before = commits(judged, skill)
    judged.model.script(reply)
    result = put(judged, skill, OPPOSITE)
    assert result["status"] == "needs_confirmation" and result["candidates"][0]["id"] == "L1", result
    assert "decided_by" not in result and len(judged.model.requests) == 1
    assert commits(judged, skill) == before


def test_supervised_or_sampling_timeout_zero_never_asks_the_host(judged: Host) -> None:
    skill = "host-off"
    seed(judged, skill, STORED)
    judged.model.script("same")
    for config in ('supervision = "supervised"\n', "sampling_timeout = 0\n"):
        judged.configure(config)
        result = put(judged, skill, OPPOSITE)
        assert result["status"] == "needs_confirmation" and "decided_by" not in result, (config, result)
    assert judged.model.requests == []


def test_revise_asks_the_host_model_too(judged: Host) -> None:
    skill = "host-revise"
    seed(judged, skill, STORED, OTHER)
    judged.model.script("different")
    result = judged.call("revise", skill=skill, entry_id="L2", action="reinforce", body=OPPOSITE)
    assert result["status"] == "committed" and result["decided_by"] == "host-model", result
    [request] = judged.model.requests
    assert STORED in request.messages[0].content.text and OPPOSITE in request.messages[0].content.text
    assert "- differs_from: L2\n" in block_of(store_text(judged.root, skill), "L1")


def test_the_server_keeps_serving_while_the_host_model_thinks(judged: Host) -> None:
    """A call that arrives while a capture waits for the host's model waits for it (one library call
    at a time) and then runs: the event loop keeps serving, nothing deadlocks."""
    skill = "host-busy"
    seed(judged, skill, STORED)
    judged.model.script("same", pause=1.0)
    results: dict[str, Any] = {}

    async def both() -> None:
        async def one(name: str, tool: str, arguments: dict[str, Any]) -> None:
            results[name] = await judged.client.call_tool(tool, arguments)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(one, "capture", "capture", {"skill": skill, "polarity": "learning",
                                                             "body": PARAPHRASE, "scope": SCOPE, "provenance": "y"})
                await anyio.sleep(0.3)
                group.start_soon(one, "recall", "recall", {"skill": skill, "intent": "weekly status updates"})

    judged.portal.call(both)
    assert results["capture"].structured_content["status"] == "reinforced"
    assert [e["recurrence"] for e in results["recall"].structured_content["learnings"]] == [2]


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """A server that waits 1 s for the host's model (whose model takes 6 s in the test)."""
    model = HostModel()
    yield from serve(tmp_path_factory, "impatient", model, WHETSTONE_SAMPLING_TIMEOUT="1")


def test_a_host_model_slower_than_sampling_timeout_falls_back(impatient: Host) -> None:
    skill = "host-slow"
    seed(impatient, skill, STORED)
    impatient.model.script("same", pause=6.0)
    started = time.monotonic()
    result = put(impatient, skill, OPPOSITE)
    waited = time.monotonic() - started
    assert result["status"] == "needs_confirmation" and "decided_by" not in result, result
    assert len(impatient.model.requests) == 1 and 0.9 < waited < 5  # not the model's 6 s
    assert impatient.call("recall", skill=skill, intent="weekly status updates")["learnings"]  # still serving


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    """A server whose client does not offer sampling."""
    yield from serve(tmp_path_factory, "plain", None)


def test_a_client_without_sampling_is_asked_as_before(plain: Host) -> None:
    skill = "no-sampling"
    seed(plain, skill, STORED)
    result = put(plain, skill, OPPOSITE)
    assert result["status"] == "needs_confirmation" and "decided_by" not in result
    assert plain.model.requests == []
