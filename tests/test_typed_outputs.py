"""Typed outputs: times as a time type in every export, pandas reads every Parquet file dyna
writes, and one redaction marker in the store, its exports and digests."""

import json

import numpy as np
import pandas as pd
import polars as pl
import pytest

from conftest import tables_only
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.experiment.backends import InProcessBackend
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment
from dyna.loops import Digest
from dyna.loops.review import REDACTED_MARK
from dyna.redact import REDACTED
from dyna.store.columns import iso_times, micros_from_seconds, seconds_from_times

DIM = 4
T0 = 1_700_000_000.0
# a whole second, a sub-microsecond tail (rounded), half a microsecond (rounded to even)
TIMES = [T0, T0 + 0.1234567, 0.0000005, 0.0000015]


def _store(times=TIMES):
    s = ExperienceStore("", dim=DIM)
    s.record("t1", episodes=[dict(task_type="k", action_type="a", outcome="success",
                                  reward=float(i), timestamp=t, state_features=[1, 0, 0, i],
                                  metadata={"api_key": "hunter2", "note": f"n{i}"})
                             for i, t in enumerate(times)])
    return s


def test_jsonl_export_writes_iso_8601_utc_with_microseconds(tmp_path):
    with _store() as s:
        assert s.export_data("t1", path=str(tmp_path / "e.jsonl"))["n"] == 4
        inline = s.export_data("t1")["records"]
    rows = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [
        "2023-11-14T22:13:20.000000+00:00", "2023-11-14T22:13:20.123457+00:00",
        "1970-01-01T00:00:00.000000+00:00", "1970-01-01T00:00:00.000002+00:00"]
    assert [r["timestamp"] for r in inline] == TIMES   # inline: seconds, as record takes
    assert rows[0]["metadata"] == {"api_key": REDACTED, "note": "n0"}


def test_parquet_export_has_a_utc_timestamp_type_pandas_reads(tmp_path):
    with _store() as s:
        s.export_data("t1", path=str(tmp_path / "e.parquet"), format="parquet")
        frame = s.to_dataset("t1")
    assert pl.read_parquet_schema(tmp_path / "e.parquet")["timestamp"] == \
        pl.Datetime("us", "UTC")
    assert frame.schema["timestamp"] == pl.Datetime("us", "UTC")
    df = pd.read_parquet(tmp_path / "e.parquet")
    assert str(df["timestamp"].dtype) == "datetime64[us, UTC]"
    assert df["timestamp"].tolist() == [
        pd.Timestamp("2023-11-14T22:13:20Z"), pd.Timestamp("2023-11-14T22:13:20.123457Z"),
        pd.Timestamp("1970-01-01T00:00:00Z"), pd.Timestamp("1970-01-01T00:00:00.000002Z")]
    assert df["metadata"][0] == '{"api_key":"[REDACTED]","note":"n0"}'
    assert df.shape == (4, 18) and df["features"][3].tolist() == [1.0, 0.0, 0.0, 3.0]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_import_export_is_byte_identical(tmp_path, fmt):
    first, second = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
    with _store() as s:
        s.export_data("t1", path=str(first), format=fmt)
    with ExperienceStore("", dim=DIM) as other:
        assert other.import_data(str(first), keep_ids=True)["n"] == 4
        assert [r["timestamp"] for r in other.export_data("t1")["records"]] == \
            [T0, T0 + 0.123457, 0.0, 0.000002]
        other.export_data("t1", path=str(second), format=fmt)
    assert second.read_bytes() == first.read_bytes()


def test_import_reads_seconds_and_other_offsets_and_refuses_naive_times(tmp_path):
    with _store() as s:
        s.export_data("t1", path=str(tmp_path / "e.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    rows[0]["timestamp"] = T0 + 5.0                              # seconds, as a number
    rows[1]["timestamp"] = "2023-11-14T23:13:21.5+01:00"         # another offset
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with ExperienceStore("", dim=DIM) as other:
        other.import_data(str(tmp_path / "f.jsonl"))
        got = [r["timestamp"] for r in other.export_data("t1")["records"]]
    assert got[:2] == [T0 + 5.0, T0 + 1.5]
    rows[2]["timestamp"] = "2023-11-14T22:13:20"
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with ExperienceStore("", dim=DIM) as other, pytest.raises(ConfigError) as e:
        other.import_data(str(tmp_path / "g.jsonl"))
    assert e.value.field == "timestamp[2]" and "timezone" in str(e.value)


def test_record_takes_a_jsonl_exported_record_as_is(tmp_path):
    with _store() as s:
        s.export_data("t1", path=str(tmp_path / "e.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    with ExperienceStore("", dim=DIM) as other:
        assert other.record("t1", episodes=rows)["n"] == 4
        assert other.record("t1", **{k: v for k, v in rows[1].items()
                                     if k not in ("id", "tenant_id")})["n"] == 1
        got = [r["timestamp"] for r in other.export_data("t1")["records"]]
        rows[2]["timestamp"] = "1970-01-01T00:00:00"
        with pytest.raises(ConfigError) as e:
            other.record("t1", episodes=rows)
    assert got == [T0, T0 + 0.123457, 0.0, 0.000002, T0 + 0.123457]
    assert e.value.field == "timestamp[2]"


def test_parquet_import_reads_float_seconds_and_refuses_a_naive_datetime(tmp_path):
    with _store() as s:
        s.export_data("t1", path=str(tmp_path / "e.parquet"), format="parquet")
    df = pl.read_parquet(tmp_path / "e.parquet")
    df.with_columns(pl.Series("timestamp", [T0, T0 + 1.0, 2.0, 3.0])).write_parquet(
        tmp_path / "seconds.parquet")
    df.with_columns(pl.col("timestamp").dt.convert_time_zone("Asia/Kolkata")).write_parquet(
        tmp_path / "kolkata.parquet")
    df.with_columns(pl.col("timestamp").dt.replace_time_zone(None)).write_parquet(
        tmp_path / "naive.parquet")
    with ExperienceStore("", dim=DIM) as other:
        other.import_data(str(tmp_path / "seconds.parquet"))
        other.import_data(str(tmp_path / "kolkata.parquet"))
        got = [r["timestamp"] for r in other.export_data("t1")["records"]]
        with pytest.raises(ConfigError) as e:
            other.import_data(str(tmp_path / "naive.parquet"))
    assert got == [T0, T0 + 1.0, 2.0, 3.0, T0, T0 + 0.123457, 0.0, 0.000002]
    assert e.value.field == "timestamp" and "timezone-aware" in str(e.value)


def test_time_conversions_round_trip_and_refuse_out_of_range():
    secs = np.random.default_rng(0).uniform(-6e10, 7e9, 20_000)
    micros = micros_from_seconds("t", secs)
    assert np.array_equal(micros_from_seconds("t", micros / 1e6), micros)
    text = iso_times("t", secs[:500])
    assert iso_times("t", seconds_from_times("t", text)) == text
    assert iso_times("t", [-0.5]) == ["1969-12-31T23:59:59.500000+00:00"]
    for bad in (1e12, float("nan"), -7e10):
        with pytest.raises(ConfigError) as e:
            micros_from_seconds("timestamp", [0.0, bad])
        assert e.value.field == "timestamp[1]"
    for bad in (True, None, "yesterday"):
        with pytest.raises(ConfigError) as e:
            seconds_from_times("timestamp", [1.0, bad])
        assert e.value.field == "timestamp[1]"


def test_one_redaction_marker_in_store_exports_and_digests():
    assert REDACTED_MARK == REDACTED == "[REDACTED]"
    d = Digest.from_run("r1", "deploy with api_key=sk-live-123456789abcdef",
                        tool_calls=[{"name": "t", "args": {"password": "hunter22x"},
                                     "output": "ok"}])
    assert d.tool_calls[0].args == {"password": "[REDACTED]"}
    assert d.task == "deploy with api_key=[REDACTED]" and d.redactions == 2
    with _store([T0]) as s:
        assert s.export_data("t1")["records"][0]["metadata"]["api_key"] == "[REDACTED]"


def test_pandas_reads_an_experiments_parquet_tables(tmp_path):
    data = {"kind": "agent_tasks", "name": "typed", "seed": 4, "runs": 1, "episodes": 20,
            "store": "skill", "variants": ["skill_loop"],
            "env": {"n_families": 2, "max_steps": 8}, "scenarios": [{"name": "clean"}]}
    with tables_only():
        out = run_experiment(parse_experiment(data), tmp_path / "o",
                             backend=InProcessBackend(), progress=False)
    for name, rows in (("runs", 1), ("episodes", 20)):
        theirs = pd.read_parquet(out / f"{name}.parquet")
        ours = pl.read_parquet(out / f"{name}.parquet")
        assert theirs.shape == (rows, ours.width) and list(theirs.columns) == ours.columns
        assert theirs["run"].tolist() == ours["run"].to_list()
