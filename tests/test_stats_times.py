"""The store's time span is a timezone-aware time: ``get_stats`` gives ``oldest`` and
``newest`` as UTC datetimes in the library (memory, SQLite and PostgreSQL alike) and as
ISO 8601 text in its JSON answers (``dispatch``, the MCP tool, ``dyna store stats``)."""

import datetime as dt
import json

import pytest

from dyna.cli import main
from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.experience.operations import json_ready
from dyna.experience.times import utc_time

UTC = dt.timezone.utc
# 2026-01-01 12:00:00 UTC and a quarter second past a minute later
NOON = 1767268800.0
LATER = NOON + 60.25


def _fill(store, tenant="t1"):
    store.record(tenant, episodes=[dict(task_type="k", action_type="a", outcome="success",
                                        reward=1.0, timestamp=t, state_features=[1, 0])
                                   for t in (LATER, NOON)])


def test_utc_time_and_json_ready():
    assert utc_time(NOON) == dt.datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert utc_time(LATER) == dt.datetime(2026, 1, 1, 12, 1, 0, 250000, tzinfo=UTC)
    assert utc_time(None) is None
    assert utc_time(0.0000005) == utc_time(0.0) and utc_time(0.0000015) == \
        dt.datetime(1970, 1, 1, 0, 0, 0, 2, tzinfo=UTC)       # half to even, as exports
    assert json_ready({"a": utc_time(LATER), "b": utc_time(NOON), "n": 2, "x": None}) == \
        {"a": "2026-01-01T12:01:00.250000+00:00", "b": "2026-01-01T12:00:00.000000+00:00",
         "n": 2, "x": None}
    with pytest.raises(ConfigError) as e:
        utc_time(253402300800.0)                                # the year 10000
    assert e.value.field == "timestamp[0]"


def test_get_stats_gives_aware_utc_times_in_every_backend(store_target):
    with ExperienceStore(store_target, dim=2) as store:
        empty = store.get_stats("t1")
        assert (empty["oldest"], empty["newest"]) == (None, None)
        _fill(store)
        for stats in (store.get_stats("t1"), store.get_stats()):
            assert stats["oldest"] == dt.datetime(2026, 1, 1, 12, tzinfo=UTC)
            assert stats["newest"] == dt.datetime(2026, 1, 1, 12, 1, 0, 250000, tzinfo=UTC)
            assert stats["oldest"].utcoffset() == stats["newest"].utcoffset() == \
                dt.timedelta(0)
        assert store.get_stats("other")["oldest"] is None
        answer = store.dispatch("get_stats", tenant_id="t1")
        assert (answer["oldest"], answer["newest"]) == \
            ("2026-01-01T12:00:00.000000+00:00", "2026-01-01T12:01:00.250000+00:00")


def test_the_mcp_tool_answers_iso_8601():
    from dyna.mcp_server.tools import ExperienceTools

    with ExperienceStore("", dim=2) as store:
        tools = ExperienceTools(store, "t1")
        out, err = tools.call("get_stats", {})
        assert err is False or err is None
        assert (out["oldest"], out["newest"]) == (None, None)
        _fill(store)
        out, _ = tools.call("get_stats", {})
        assert (out["oldest"], out["newest"]) == \
            ("2026-01-01T12:00:00.000000+00:00", "2026-01-01T12:01:00.250000+00:00")
        assert json.loads(json.dumps(out)) == out
        schema = tools.list_tools()
        props = next(t for t in schema if t["name"] == "get_stats")["output_schema"]
        for key in ("oldest", "newest"):
            assert props["properties"][key]["anyOf"] == \
                [{"type": "string", "format": "date-time"}, {"type": "null"}]


def test_dyna_store_stats_prints_iso_8601(tmp_path, capsys):
    path = tmp_path / "s.db"
    with ExperienceStore(path, dim=2) as store:
        _fill(store)
    assert main(["store", "stats", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["oldest"], out["newest"]) == \
        ("2026-01-01T12:00:00.000000+00:00", "2026-01-01T12:01:00.250000+00:00")


@pytest.mark.parametrize("age,asks", [(0.0, True), (1e12, False), (1e15, False)])
def test_prune_asks_by_the_newest_time(tmp_path, capsys, monkeypatch, age, asks):
    path = tmp_path / "s.db"
    with ExperienceStore(path, dim=2) as store:
        _fill(store)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    rc = main(["store", "prune", str(path), "--max-age", f"{age:g}"])
    out, err = capsys.readouterr()
    if asks:
        assert rc == 2 and "would delete all 2 episodes" in err
    else:
        assert rc == 0 and json.loads(out)["deleted"] == 0
