"""Several failing jobs: every backend's ``map`` raises the failure of the earliest failing job
in submission order (lowest index), not the first to end, so the same config reports the same
error on every run and backend.

Job 1 fails after 0.3 s, job 3 at once: on 2 workers job 3 ends first (jobs 0 and 2 take
0.05 s), and the first-to-end rule reported job 3. The Ray tests reuse the module-scoped
local instance of ``test_experiment_ray`` (a second instance for this module, ~5 s; skipped
without Ray).
"""

import sys
import time

import pytest

from dyna.errors import ConfigError
from dyna.experiment.backends import InProcessBackend, Job, ProcessPoolBackend
from test_experiment_ray import ray_backend  # noqa: F401  (the module's Ray fixture)

FAIL_AFTER = {1: 0.3, 3: 0.0}   # job index -> seconds before it raises


def _jobs(n=6):
    return [Job(variant=i, point=0, run_indices=(0,)) for i in range(n)]


def fail_value(job):
    """Jobs 1 and 3 raise distinct ValueErrors, job 3 first; the others return their index."""
    i = job.variant
    time.sleep(FAIL_AFTER.get(i, 0.05))
    if i in FAIL_AFTER:
        raise ValueError(f"job {i} failed")
    return i


def fail_config(job):
    """As :func:`fail_value` with ConfigErrors (rebuilt in the parent; bad input on Ray)."""
    i = job.variant
    time.sleep(FAIL_AFTER.get(i, 0.05))
    if i in FAIL_AFTER:
        raise ConfigError(f"field{i}", i, f"job {i} is bad")
    return i


def _raised(backend, fn, exc_type):
    with pytest.raises(exc_type) as err:
        backend.map(fn, _jobs())
    return err.value


@pytest.mark.parametrize("make", [InProcessBackend, lambda: ProcessPoolBackend(2)],
                         ids=["inprocess", "process"])
def test_earliest_failing_job_is_reported(make):
    backend = make()
    for _ in range(2):
        exc = _raised(backend, fail_value, ValueError)
        assert type(exc) is ValueError and str(exc) == "job 1 failed"
        assert exc.__notes__ == ["in job: variant 1, runs 0"]
    exc = _raised(backend, fail_config, ConfigError)
    assert (exc.field, str(exc)) == ("field1", "field1=1: job 1 is bad")
    assert exc.__notes__ == ["in job: variant 1, runs 0"]


@pytest.fixture
def ray(ray_backend):  # noqa: F811
    """The module's Ray backend; this module's functions go to the workers by value (the
    workers cannot import it)."""
    from ray import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield ray_backend
    cloudpickle.unregister_pickle_by_value(module)


def test_ray_earliest_bad_input_is_reported(ray):
    for _ in range(3):
        exc = _raised(ray, fail_config, ConfigError)
        assert (exc.field, str(exc)) == ("field1", "field1=1: job 1 is bad")
        assert exc.__notes__ == ["in job: variant 1, runs 0"]
    assert ray.describe()["retried"] == 0


def test_ray_failed_jobs_listed_in_job_order_caused_by_the_earliest(ray):
    from dyna.experiment.ray_backend import JobsFailedError, RayBackend

    backend = RayBackend(max_retries=0)   # joins the running instance
    exc = _raised(backend, fail_value, JobsFailedError)
    assert sorted(exc.results) == [0, 2, 4, 5]
    assert [job.variant for job, _, _ in exc.failures] == [1, 3]
    assert type(exc.__cause__) is ValueError and str(exc.__cause__) == "job 1 failed"
    assert str(exc).startswith("2 of 6 jobs failed: variant 1, runs 0 (ValueError: job 1 "
                               "failed; 1 attempts); variant 3, runs 0 (ValueError: job 3")

