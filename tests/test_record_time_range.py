"""A recorded timestamp must be a time every export can write (years 1 to 9999,
:data:`dyna.store.columns.MICROS_RANGE`): it is refused when recorded, naming the field."""

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
