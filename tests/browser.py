"""A real headless browser for the tests: Debian's chromium, driven over the DevTools protocol.

Chromium is started with `--remote-debugging-pipe`: it reads protocol messages (JSON, each ended
by a NUL byte) on its file descriptor 3 and writes them on 4. No websocket library, no driver
download, no network. `.ci/run` installs chromium when it is missing; without it these tests fail
(they never skip), saying how to install it.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find() -> str | None:
    """The browser to use: $WHETSTONE_TEST_CHROMIUM, else the first candidate on PATH."""
    chosen = os.environ.get("WHETSTONE_TEST_CHROMIUM")
    if chosen:
        return chosen
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


class Browser:
    """One headless chromium with one page; collects what the page logs while it loads."""

    def __init__(self, executable: str, width: int = 1100, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="whetstone-chromium-")
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()
        # the child's ends, moved above 9 so that placing them on 3 and 4 cannot clobber one another
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_child, from_child)]
        for fd in (to_child, from_child):
            os.close(fd)
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{ends[0]} 4>&{ends[1]}', "bash", executable, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-sync", "--disable-component-update",
             "--allow-file-access-from-files", f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            pass_fds=tuple(ends), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in ends:
            os.close(fd)
        self._ids = iter(range(1, 1 << 30))
        self._buffer = b""
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=True)
        self.resize(width, height)

    # --- the protocol ---------------------------------------------------------------------------

    def send(self, method: str, session: bool = False, timeout: float = 60, **params: Any) -> dict[str, Any]:
        """Call one protocol method and wait for its answer (events met meanwhile are kept)."""
        ident = next(self._ids)
        message = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._next(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            if "method" in reply:
                self.events.append(reply)

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise RuntimeError(f"chromium exited (code {self.proc.poll()})")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def wait_for(self, method: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = next((e for e in self.events if e["method"] == method), None)
            if found is not None:
                return found
            event = self._next(deadline)
            if "method" in event:
                self.events.append(event)

    # --- what the tests use ---------------------------------------------------------------------

    def resize(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=width < 600)

    def load(self, path: Path) -> None:
        self.events.clear()
        self.send("Page.navigate", session=True, url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = True) -> bytes:
        data = base64.b64decode(self.send("Page.captureScreenshot", session=True, format="png",
                                          captureBeyondViewport=full_page)["data"])
        path.write_bytes(data)
        return data

    def errors(self) -> list[str]:
        """What the page reported as an error: console errors, uncaught exceptions, log entries of
        level error (a resource that failed to load, a blocked request)."""
        found = []
        for e in self.events:
            params = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                found.append("exception: " + str(params["exceptionDetails"].get("text")))
            elif e["method"] == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append("log: " + str(params["entry"].get("text")))
        return found

    def requests(self) -> list[str]:
        """Every URL the page asked for while it loaded."""
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
