"""The child that times git commands from inside one long-lived process (`python -m
bench.git_timer`, natively or inside `gitsess run`), so that neither the process's nor (inside
`gitsess run`) the mount's start is counted.

One JSON request a line on stdin: `edit` appends `line` to those files and `prep` runs commands,
untimed; then `cmd` runs, timed. One JSON answer a line on stdout, the first `{"ready": true}`.
It imports only the standard library (the package's `__init__` is empty) so that it starts as
the string it replaced did.
"""

import json
import subprocess
import sys
import time


def main() -> None:
    print(json.dumps({"ready": True}), flush=True)  # noqa: T201 (the answers)
    for text in sys.stdin:
        req = json.loads(text)
        for rel in req.get("edit", []):
            with open(rel, "ab") as f:
                f.write(req["line"].encode())
        for cmd in req.get("prep", []):
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        t0 = time.perf_counter()
        if req.get("cmd"):
            subprocess.run(req["cmd"], check=True, stdout=subprocess.DEVNULL)
        print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
