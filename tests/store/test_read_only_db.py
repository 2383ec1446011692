"""Reading a WAL database from a read-only directory, as gitsess commands inside a run read
the sealed state dir."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gitsess.store import db

READER = """
import sys
from gitsess.store import db
conn = db.open_read_only(sys.argv[1])
print(conn.execute("SELECT v FROM t").fetchall()[0][0])
"""


def test_a_wal_left_for_a_moment_by_a_closing_writer_is_waited_for(tmp_path: Path) -> None:
    real, sealed = tmp_path / "real", tmp_path / "sealed"
    real.mkdir()
    sealed.mkdir()
    conn = db.connect(real / "x.db")
    conn.execute("CREATE TABLE t(v); INSERT INTO t VALUES ('kept')")
    conn.close()
    assert not (real / "x.db-wal").exists()
    # What a writer's last close leaves for a moment: its -shm deleted, its -wal not yet.
    (real / "x.db-wal").write_bytes(b"\0" * 32)
    script = (
        f"mount --bind {real} {sealed} && mount -o remount,ro,bind {sealed}"
        f' && exec {sys.executable} -c "$0" {sealed}/x.db'
    )
    reader = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, READER],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(0.5)
    (real / "x.db-wal").unlink()
    out, err = reader.communicate(timeout=30)
    assert reader.returncode == 0, err
    assert out == "kept\n"
