"""A whetstone client in its own process, for the reliability tests: it runs the library directly
(no CLI start-up per call) and can be told to die at an exact point of a write.

    python tests/worker.py            read one JSON operation per line on stdin, answer one JSON
                                      line per operation on stdout ("ready" first)

An operation is {"op": "capture"|"revise"|"recall"|"compact"|"sleep"|"batch", "args": {...}} (a batch
runs {"ops": [operation, …]} in turn); the answer is
{"ok": true, "result": {...}} or {"ok": false, "error": "..."}. {"op": "fork", "args": {"call": op,
"args": {...}, "env": {...}, "die_at": point, "session": bool, "out": path}} runs one in a forked child
(which writes its answer to `out`) and answers the child's pid; {"op": "reap", "args": {"pid": n}} waits for that child. Nothing is mocked: with
WORKER_DIE_AT=<point>[:<n>] (or a fork's die_at) the process sends itself SIGKILL at the n-th time (default 1) it
reaches <point> — `replace-<file name>` (before the atomic rename that puts that file in place;
`replace-*.md` for any scope file), `replaced-<file name>` (after it), `git-<verb>` (before running
`git <verb>`), `git-<verb>-done` (after it returned) — so a crash lands exactly there.
"""
from __future__ import annotations

import json
import os
import signal
import sys


def _arm(spec: str) -> None:
    point, _, nth = spec.partition(":")
    wanted = int(nth or 1)
    seen = {"n": 0}

    def reached(name: str) -> None:
        if name == point:
            seen["n"] += 1
            if seen["n"] == wanted:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        name = os.path.basename(dst)
        names = (name, "*.md") if name.endswith(".md") else (name,)
        for n in names:
            reached(f"replace-{n}")
        real_replace(src, dst, *args, **kwargs)
        for n in names:
            reached(f"replaced-{n}")

    os.replace = replace

    from git_whetstone.git import runner as gitbin
    real_run = gitbin.run

    def run(repo, *args, **kwargs):
        verb = next((a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] != "-c")),
                    "")
        reached(f"git-{verb}")
        proc = real_run(repo, *args, **kwargs)
        reached(f"git-{verb}-done")
        return proc

    gitbin.run = run


def _fork(request: dict) -> int:
    """Run one operation in a forked child (the library already loaded, so it starts in a few ms):
    with the caller's environment, armed to die at `die_at`, in a session of its own when `session`
    (so killing its process group kills the git it runs too). The child exits 0 when the call
    returned, 1 when it raised WhetstoneError."""
    pid = os.fork()
    if pid:
        return pid
    try:
        if request.get("session"):
            os.setsid()
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        if request.get("die_at"):
            _arm(request["die_at"])
        answer = _call(request["call"], request["args"])
        if request.get("out"):
            with open(request["out"], "w", encoding="utf-8") as handle:
                json.dump(answer, handle, ensure_ascii=False)
        code = 0 if answer["ok"] else 1
    except BaseException:
        code = 2
    os._exit(code)


def _call(op: str, args: dict) -> dict:
    from git_whetstone import api
    from git_whetstone.base.errors import WhetstoneError

    if op == "sleep":
        import time
        time.sleep(args["seconds"])
        return {"ok": True, "result": {}}
    if op == "batch":  # several operations, one after the other
        return {"ok": True, "result": [_call(item["op"], item["args"]) for item in args["ops"]]}
    try:
        return {"ok": True, "result": getattr(api, op)(**args)}
    except WhetstoneError as exc:
        return {"ok": False, "error": exc.message}


def main() -> int:
    from git_whetstone import api
    for op in ("capture", "revise", "recall", "compact"):  # loaded before any fork
        getattr(api, op)

    if os.environ.get("WORKER_DIE_AT"):
        _arm(os.environ["WORKER_DIE_AT"])
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request["op"]
        if op == "fork":
            answer = {"ok": True, "pid": _fork(request["args"])}
        elif op == "reap":  # wait for a forked child: its exit code, or minus the signal that killed it
            _, status = os.waitpid(request["args"]["pid"], 0)
            answer = {"ok": True, "status": os.waitstatus_to_exitcode(status)}
        else:
            answer = _call(op, request["args"])
        print(json.dumps(answer, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
