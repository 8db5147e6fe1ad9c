"""A recording of the local model reviewing tau-bench runs (tests/data/real_reviewer/),
replayed without the model: the same tables, byte for byte, and their exact values."""

import json
from pathlib import Path

import polars as pl
import pytest

from dyna.cli import main
from dyna.redact import has_secret, scan

DATA = Path(__file__).resolve().parent / "data"
FILE = DATA / "real_reviewer.toml"
REC = DATA / "real_reviewer"
TABLES = ("llm_exchanges", "llm_reviews", "llm_lessons", "runs")
COPIED = ("The fact, one line of at most 500 characters, naming the concrete tool, value or "
          "step it is about. (Note: The action can be used to add a new item to the list of "
          "items in the storage).")
LENGTH = ("length: the reply used all 64 new tokens asked for (finish_reason 'tool_calls'); "
          "a tool call in it is a fragment and is not used")


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "out"
    assert main(["run", str(FILE), "--out", str(out), "--replay", str(REC),
                 "--no-progress"]) == 0
    return out


def test_replay_gives_the_recorded_tables(replayed):
    for name in TABLES:
        assert (replayed / f"{name}.parquet").read_bytes() == \
            (REC / f"{name}.parquet").read_bytes(), name


def test_reviews(replayed):
    t = pl.read_parquet(replayed / "llm_reviews.parquet")
    gate = "outcome gate: no verified success"
    assert t.select("variant", "run_id", "status", "reason", "turns", "prompt_tokens",
                    "completion_tokens", "seconds").rows() == [
        ("memory_loop", "task0-trial0", "skipped", gate, 0, 0, 0, 0.0),
        ("memory_loop", "task1-trial0", "skipped", gate, 0, 0, 0, 0.0),
        ("memory_loop", "task2-trial0", "skipped", gate, 0, 0, 0, 0.0),
        ("naive_loop", "task0-trial0", "incomplete", LENGTH, 1, 3191, 64, 69.135),
        ("naive_loop", "task1-trial0", "incomplete",
         "turn budget: still proposing after max_turns=1", 1, 644, 42, 12.047),
        ("naive_loop", "task2-trial0", "reviewed", "1 proposals", 1, 2996, 59, 66.14)]


def test_lessons_and_their_verdicts(replayed):
    t = pl.read_parquet(replayed / "llm_lessons.parquet")
    assert t.select("variant", "episode", "action", "why", "junk", "quotes_digest",
                    "misattributes", "personal").rows() == [
        ("naive_loop", 2, "refused", "malformed_arguments", "copied", True, False, 0),
        ("naive_loop", 3, "committed", "", "copied", True, False, 0)]
    assert t["lesson"][1] == COPIED
    assert t["detail"][0] == "malformed_arguments: Invalid control character at at character 136"


def test_runs_and_exchanges(replayed):
    runs = pl.read_parquet(replayed / "runs.parquet")
    assert runs.select("variant", "reviews", "proposals", "committed", "pd_digest",
                       "pd_reviewer", "pd_store", "facts_end", "learning_tokens").rows() == [
        ("memory_loop", 0, 0, 0, 0, 0, 0, 0, 0),
        ("naive_loop", 1, 1, 1, 13, 13, 0, 1, 6996)]
    ex = pl.read_parquet(replayed / "llm_exchanges.parquet")
    assert ex.select("variant", "run", "seq", "status", "attempts", "seconds").rows() == [
        ("naive_loop", 0, 0, "incomplete", "200", 69.135),
        ("naive_loop", 0, 1, "ok", "200", 12.047),
        ("naive_loop", 0, 2, "ok", "200", 66.14)]
    report = (replayed / "report.md").read_text()
    assert "| naive_loop | 1 | 2 | 0 | 0 | 1 | 1 | 0 | 0 | 0 | 1 |" in report
    assert "| naive_loop | length 1, turn budget 1 | malformed_arguments 1 | - | - |" in report
    head = report.split("## Headline\n\n")[1].split("\n\n")[0].splitlines()
    assert [len(line) for line in head] == [126, 124, 96, 86]
    # one seed gives no interval over seeds
    assert head[0].endswith("through 2 loop variants; 1 reviewer seed: no interval over seeds.")
    # the model's lines: 3 reviews asked the model (memory_loop's 3 were skipped by the
    # outcome gate), 2 cut off; the one committed lesson copies the prompt (junk)
    assert head[1] == ("- The model reviewer `gemma-3-270m-q4_k_m`: 3 reviews sent a request, "
                       "2 of them cut off or failed (length 1, turn budget 1).")
    assert head[2] == ("- Its lessons: 1 committed (naive_loop 1), 1 of them junk; 0 personal "
                       "values in the store files.")
    # the 3 runs are of 3 task types: nothing to induce
    assert head[3] == ("- Workflow induction: no held-out task scored (section \"Workflow "
                       "induction\" says why).")


def test_the_recording_passes_the_secret_scanner():
    ex = pl.read_parquet(REC / "llm_exchanges.parquet")
    for row in ex.iter_rows(named=True):
        for col in ("request", "response"):
            assert not scan(json.loads(row[col])), (row["seq"], col)
        assert not has_secret(row["reason"])
