"""A fake coding-agent CLI that keeps its state the way the real ones do.

`python fakecli.py KIND [options]`, KIND being:

- `claude`: state in `$CLAUDE_CONFIG_DIR` (default `~/.claude`); conversations in
  `projects/<cwd, '/' -> '-'>/<id>.jsonl`; credential `.credentials.json`; `--settings FILE`
  runs the file's UserPromptSubmit hooks with the prompt (`--say`).
- `cline`: state in `--data-dir DIR` (default `~/.cline/data`); conversations in
  `sessions/<hash of cwd>/<id>.json`; credential `secrets.json`.

Resuming (`--continue`) takes the newest conversation of the cwd's store; a refresh writes the
credential to a temp file and renames it over the old one. Prints one JSON object at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

WAIT = 60.0


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"fakecli: timed out waiting for {what}")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    kind, *rest = argv
    parser = argparse.ArgumentParser(prog=kind)
    parser.add_argument("--data-dir")
    parser.add_argument("--continue", dest="resume", action="store_true")
    parser.add_argument("--say", default="")
    parser.add_argument("--refresh", metavar="TOKEN")
    parser.add_argument("--wait-relink", action="store_true")
    parser.add_argument("--ready", metavar="FILE")
    parser.add_argument("--until", metavar="FILE")
    parser.add_argument("--settings", metavar="FILE")  # claude: more settings (hooks)
    parser.add_argument("--mcp-config", metavar="FILE")  # claude's: MCP servers to start
    args = parser.parse_args(rest)
    if args.settings:
        # as Claude Code: each UserPromptSubmit hook gets the prompt as JSON on stdin
        hooks = json.loads(Path(args.settings).read_text())["hooks"]["UserPromptSubmit"]
        for hook in (h for group in hooks for h in group["hooks"]):
            prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": args.say})
            subprocess.run(hook["command"], shell=True, input=prompt, text=True, check=True)
    cwd = os.getcwd()
    if kind == "claude":
        state = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
        store = state / "projects" / cwd.replace("/", "-")
        credential = state / ".credentials.json"
        suffix = ".jsonl"
    else:
        # as the real one: `--data-dir DIR` is what ~/.cline/data is by default
        state = Path(args.data_dir or Path.home() / ".cline" / "data")
        store = state / "sessions" / hashlib.sha1(cwd.encode()).hexdigest()[:16]
        credential = state / "secrets.json"
        suffix = ".json"
    store.mkdir(parents=True, exist_ok=True)
    existing = sorted(store.glob(f"*{suffix}"), key=lambda p: p.stat().st_mtime_ns)
    conversation = existing[-1] if args.resume and existing else store / f"{uuid.uuid4()}{suffix}"
    with conversation.open("a") as f:
        f.write(json.dumps({"say": args.say}) + "\n")
    if args.ready:
        Path(args.ready).write_text(str(os.getpid()))
    if args.until:
        until = Path(args.until)
        _wait_for(until.exists, str(until))
    if args.refresh:
        tmp = credential.with_name(f".{credential.name}.tmp{os.getpid()}")
        tmp.write_text(args.refresh)
        os.replace(tmp, credential)
        if args.wait_relink:
            _wait_for(credential.is_symlink, "gitsess to link the credential again")
    lines = conversation.read_text().splitlines()
    sys.stdout.write(
        json.dumps(
            {
                "conversation": conversation.name.removesuffix(suffix),
                "messages": [json.loads(line)["say"] for line in lines],
                "token": credential.read_text() if credential.exists() else None,
                "state": str(state),
                "mcp": json.loads(Path(args.mcp_config).read_text()) if args.mcp_config else None,
            }
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
