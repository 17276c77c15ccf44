"""The command line's frame: the `git whetstone` group and its options, the JSON or text a command
prints (`emit`), the MCP server started in the same process, and the entry points, which turn
every failure into one line on stderr and an exit code (0 the call ran, whatever its status; 1 a
runtime failure; 2 bad usage or input).
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, NoReturn

import click

from .. import __version__
from ..base.calls import for_command_line
from ..base.errors import WhetstoneError


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class State:
    def __init__(self, store_root: str | None, as_json: bool) -> None:
        self.store_root = store_root
        self.as_json = as_json
        self._config = None

    def config(self):
        if self._config is None:
            from ..base.config import load
            self._config = load(self.store_root)
        return self._config




@click.group(context_settings=CONTEXT)
@click.option("--store-root", metavar="DIR", help="Store root for this call (default: config, then "
              "$WHETSTONE_STORE_ROOT, then ~/.local/share/whetstone).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON results for every command.")
@click.version_option(__version__, "-V", "--version", prog_name="whetstone")
@click.pass_context
def main(ctx: click.Context, store_root: str | None, as_json: bool) -> None:
    """A git-native memory of your taste for AI skills.

    Each skill gets a git repository of markdown learnings (weighted preferences) and issues
    (mandatory always/never rules). Agents recall them at the start of a task and capture each
    correction; you read, edit, revert and push them with git.

    \b
    Example:
      git whetstone attach great-tables
      git whetstone capture great-tables "Format currency as USD, no decimals" --scope "currency formatting"
      git whetstone recall great-tables "styling a table: currency formatting, alignment"
    """
    ctx.obj = State(store_root, as_json)


def command(group: click.Group = main, **settings: Any) -> Callable[[Callable], click.Command]:
    """A command of `group` that gets the `State` and takes --json (listed after its own options)."""
    def make(fn: Callable) -> click.Command:
        own = getattr(fn, "__click_params__", [])
        fn.__click_params__ = []  # click lists the options added first last
        fn = click.option("--json", "as_json", is_flag=True, help="Print the library's JSON result.")(
            click.pass_obj(fn))
        fn.__click_params__ += own
        return group.command(**settings)(fn)
    return make


def emit(state: State, as_json: bool, result: Any, human: Callable[[Any], None], ok: bool = True) -> None:
    """The result as JSON (`--json`, here or before the command: the MCP tool's JSON, its words
    included), else as `human` prints it, and its warnings on stderr, in the command line's words;
    then exit 1 unless the call went `ok`."""
    if as_json or state.as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        result = in_our_words(result)
        human(result)
        for warning in result.get("warnings", []) if isinstance(result, dict) else []:
            click.echo(f"warning: {warning}", err=True)
    if not ok:
        raise SystemExit(1)


SAID = ("prompt", "confirmation", "warnings", "promotion")  # what a result says to the caller, in words


def in_our_words(result: Any) -> Any:
    """A result whose messages name the command line's options and commands, not the MCP tool's
    arguments (`base.calls`): the same result otherwise."""
    if not isinstance(result, dict):
        return result
    skill = result.get("skill") if isinstance(result.get("skill"), str) else "SKILL"

    def phrased(value: Any) -> Any:
        if isinstance(value, str):
            return for_command_line(value, skill)
        if isinstance(value, list):
            return [phrased(v) for v in value]
        if isinstance(value, dict):
            return {k: phrased(v) if k in SAID else v for k, v in value.items()}
        return value
    return {key: phrased(value) if key in SAID else value for key, value in result.items()}


@main.command()
@click.pass_obj
def mcp(state: State) -> None:
    """Serve the MCP tools over stdio (what an agent host runs; see 'whetstone-mcp').

    \b
    Example:
      claude mcp add whetstone -- git whetstone mcp
    """
    if state.store_root:  # the server's tools load the config per call, so pass the choice on
        os.environ["WHETSTONE_STORE_ROOT"] = state.store_root
    serve_mcp()


def serve_mcp() -> None:
    """Become the MCP server (`python -m mcp_entry.server`): the same process, so the host's pipes
    stay as they are; the server is a door of its own, which this one does not import."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, "-m", "mcp_entry.server"])
    except OSError as exc:
        raise WhetstoneError(f"cannot start the MCP server ({sys.executable} -m mcp_entry.server): "
                             f"{exc.strerror or exc}", exit_code=1) from None


def run(argv: list[str] | None = None, prog_name: str = "git whetstone") -> NoReturn:
    """Run the CLI, turning every failure into one line on stderr and an exit code, then end the
    process at once (`_leave`)."""
    try:
        _run(argv, prog_name)
    except SystemExit as exc:  # how _run always ends, with an int
        _leave(exc.code if isinstance(exc.code, int) else 1)


def _leave(code: int) -> NoReturn:
    """End the process now, its output flushed. A command has closed its files, index connections
    and child processes when it returns, and nothing on these paths registers an atexit handler:
    the interpreter's teardown would only free every module and object one by one (60 ms after a
    recall, a sixth of the process)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # the reader went away (a closed pipe), as a command's broken pipe
            code = code or 1
    os._exit(code)


def _run(argv: list[str] | None, prog_name: str) -> NoReturn:
    try:
        code = main.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except WhetstoneError as exc:
        _fail(prog_name, exc.message, exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `git whetstone`: the help, not an error
        click.echo(exc.ctx.get_help() if exc.ctx else main.get_help(click.Context(main)))
        sys.exit(0)
    except click.UsageError as exc:
        if exc.ctx is not None and exc.ctx.parent is not None:
            hint = f" (see '{prog_name} {exc.ctx.info_name} -h')"
        else:
            hint = f" (see '{prog_name} -h')"
        _fail(prog_name, exc.format_message() + hint, 2)
    except click.Abort:
        _fail(prog_name, "aborted", 1)
    except click.ClickException as exc:
        _fail(prog_name, exc.format_message(), exc.exit_code)
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(1)
    except Exception as exc:  # a bug: say so in one line unless asked for the traceback
        if os.environ.get("WHETSTONE_DEBUG") == "1":
            raise
        _fail(prog_name, f"internal error: {type(exc).__name__}: {exc} (WHETSTONE_DEBUG=1 shows a traceback)", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(prog_name: str, message: str, code: int) -> None:
    click.echo(f"{prog_name}: {for_command_line(' '.join(str(message).split()))}", err=True)
    sys.exit(code)


def run_whetstone() -> None:
    """`whetstone`: the same commands under a shorter name. With no arguments it serves MCP when
    stdin is not a terminal (an agent host started it) and prints the help on a terminal."""
    argv = None
    if len(sys.argv) <= 1:
        argv = ["mcp"] if sys.stdin is not None and not sys.stdin.isatty() else ["-h"]
    run(argv, prog_name="whetstone")
