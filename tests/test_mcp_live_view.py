"""The MCP tools see episodes another process commits to the same SQLite file, without a
restart (docs/mcp.md)."""

import subprocess
import sys

from dyna.experience import ExperienceStore
from dyna.mcp_server import ExperienceTools

WRITER = """
import sys
from dyna.experience import ExperienceStore
with ExperienceStore(sys.argv[1], dim=8) as t:
    t.record("acme", task_type="refund", reward=0.0, action_type="x", outcome="failure")
"""


def test_tools_see_another_process_write_without_restart(tmp_path):
    db = str(tmp_path / "e.db")
    with ExperienceStore(db, dim=8) as store:
        for _ in range(3):
            store.record("acme", task_type="refund", reward=1.0, action_type="x",
                         outcome="success")
        tools = ExperienceTools(store, "acme")
        before, err = tools.call("get_competence", {"task_type": "refund"})
        assert not err and before["competence"][0]["a"] == 4.0   # Beta(1 + 3, 1 + 0)
        subprocess.run([sys.executable, "-c", WRITER, db], check=True)
        stats, err = tools.call("get_stats", {})
        assert not err and stats["n_records"] == 4
        after, _ = tools.call("get_competence", {"task_type": "refund"})
        assert (after["competence"][0]["a"], after["competence"][0]["b"]) == (4.0, 2.0)
