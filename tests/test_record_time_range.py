"""A recorded timestamp must be a time every export can write (years 1 to 9999,
:data:`dyna.store.columns.MICROS_RANGE`): it is refused when recorded, naming the field."""

import json

import numpy as np
import pytest

from dyna.errors import ConfigError
from dyna.experience import ExperienceStore
from dyna.store.columns import check_time_range, time_in_range

EP = dict(task_type="x", action_type="a", outcome="success", reward=1.0)
RANGE = "must be a time in the years 1 to 9999 (seconds since the Unix epoch)"


@pytest.mark.parametrize("ts", [1e12, -1e12, 2.6e11])
def test_record_refuses_a_time_no_export_can_write(tmp_path, ts):
    s = ExperienceStore(tmp_path / "s.db", dim=4)
    with pytest.raises(ConfigError) as err:
        s.record("t1", timestamp=ts, **EP)
    assert str(err.value) == f"timestamp[0]={ts!r}: {RANGE}"
    with pytest.raises(ConfigError) as err:
        s.record("t1", episodes=[dict(EP, timestamp=1.0), dict(EP, timestamp=ts)])
    assert str(err.value) == f"timestamp[1]={ts!r}: {RANGE}"
    s.record("t1", timestamp=253402300799.0, **EP)      # 9999-12-31T23:59:59 UTC
    assert len(s) == 1
    s.close()


def test_the_range_check_leaves_non_finite_values_to_the_buffer():
    assert check_time_range("t", [float("nan"), 0.0]).tolist()[1] == 0.0
    assert (time_in_range(253402300799.0), time_in_range(2.6e11)) == (True, False)


#: The first instant of the year 10000 and the largest float64 below it. 253402300799.999999
#: (the last microsecond of 9999) is that very float64: 253402300800.0, so it is refused too.
YEAR_10000 = 253402300800.0
LAST_BELOW = float(np.nextafter(YEAR_10000, 0.0))       # 253402300799.99997
YEAR_1 = -62135596800.0                                  # 0001-01-01T00:00:00 UTC


def test_the_top_edge_is_exclusive_at_the_first_second_of_the_year_10000(tmp_path):
    assert LAST_BELOW == 253402300799.99996948242 and 253402300799.999999 == YEAR_10000
    assert [time_in_range(t) for t in (LAST_BELOW, YEAR_10000, 253402300800)] == \
        [True, False, False]
    assert [time_in_range(t) for t in (np.nextafter(YEAR_1, -1e12), YEAR_1)] == [False, True]
    s = ExperienceStore(tmp_path / "s.db", dim=4)
    for ts in (YEAR_10000, 253402300800, np.nextafter(YEAR_1, -1e12)):
        with pytest.raises(ConfigError) as err:
            s.record("t1", timestamp=ts, **EP)
        assert str(err.value) == f"timestamp[0]={float(ts)!r}: {RANGE}"
    got = s.record("t1", episodes=[dict(EP, timestamp=LAST_BELOW),
                                   dict(EP, timestamp=YEAR_1)])
    assert len(got["ids"]) == 2 and len(s) == 2
    path = tmp_path / "e.jsonl"
    s.export_data("t1", path)
    times = sorted(json.loads(line)["timestamp"] for line in path.read_text().splitlines())
    assert times == ["0001-01-01T00:00:00.000000+00:00", "9999-12-31T23:59:59.999968+00:00"]
    s.close()
