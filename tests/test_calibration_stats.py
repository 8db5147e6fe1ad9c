"""Calibration before confirmation, the generic parts: the file's hash and freeze record,
the [calibration] table, the pilot log, check summaries, the sizing formula and the
verdicts (dyna.experiment.calibration, dyna.experiment.calibration_stats)."""

import hashlib
import json
import math

import numpy as np
import pytest

from dyna.errors import ConfigError
from dyna.experiment.calibration import (Frozen, append_pilot_entry, file_digest,
                                         parse_calibration, read_pilot_log, strip_frozen,
                                         write_frozen)
from dyna.experiment.calibration_stats import (NO_EFFECT, NOT_TESTABLE, Contrast,
                                               calibrated_verdict, equivalence_interval,
                                               runs_needed, sd_upper_bound, size_runs,
                                               smallest_detectable, summarise_check)

TOML = b"""kind = "agent_tasks"
name = "x"

[calibration]
pilot_seed = 1000
pilot_runs = 6
confirmatory_seed = 0

[env]
n_families = 2
"""
COMMIT = "a" * 40
SHA = "b" * 64


# ============================================================================ file hash

def test_the_sha256_ignores_the_frozen_line(tmp_path):
    path = tmp_path / "e.toml"
    path.write_bytes(TOML)
    before = file_digest(path)
    assert before == hashlib.sha256(TOML).hexdigest()
    write_frozen(path, Frozen(COMMIT, SHA))
    text = path.read_bytes()
    # the record is the line after the header, and nothing else changed
    assert text == TOML.replace(b"[calibration]\n", b'[calibration]\nfrozen = { commit = "'
                                + COMMIT.encode() + b'", sha256 = "' + SHA.encode()
                                + b'" }\n')
    assert file_digest(path) == before
    assert strip_frozen(text) == TOML
    # any other edit changes it
    path.write_bytes(text.replace(b"pilot_runs = 6", b"pilot_runs = 7"))
    assert file_digest(path) != before


def test_only_the_calibration_tables_frozen_line_is_left_out():
    data = b"[env]\nfrozen = 1\n[calibration]\n  frozen = {commit = 'x'}\r\nx = 1\n"
    assert strip_frozen(data) == b"[env]\nfrozen = 1\n[calibration]\nx = 1\n"


def test_a_frozen_record_not_on_its_own_line_is_refused(tmp_path):
    path = tmp_path / "e.toml"
    path.write_bytes(TOML + b'\n[calibration.frozen]\ncommit = "' + COMMIT.encode()
                     + b'"\nsha256 = "' + SHA.encode() + b'"\n')
    with pytest.raises(ConfigError) as e:
        file_digest(path)
    assert e.value.field == "calibration.frozen"


def test_a_frozen_file_is_not_frozen_again_and_keeps_its_mode(tmp_path):
    path = tmp_path / "e.toml"
    path.write_bytes(TOML)
    path.chmod(0o640)
    write_frozen(path, Frozen(COMMIT, SHA))
    assert path.stat().st_mode & 0o777 == 0o640
    with pytest.raises(ConfigError, match="frozen already"):
        write_frozen(path, Frozen(COMMIT, SHA))
    assert list(tmp_path.iterdir()) == [path]      # no temporary file left


# ============================================================================ the table

def test_calibration_table_parses_with_defaults():
    cal = parse_calibration({"pilot_seed": 1000, "pilot_runs": 6, "confirmatory_seed": 0,
                             "replication_seed": 2000, "required": ["a"]})
    assert (cal.pilot_seed, cal.pilot_runs, cal.confirmatory_seed, cal.replication_seed,
            cal.required, cal.power, cal.frozen) == (1000, 6, 0, 2000, ("a",), 0.8, None)
    frozen = parse_calibration({**cal.to_dict(), "frozen": {"commit": COMMIT,
                                                            "sha256": SHA}}).frozen
    assert frozen == Frozen(COMMIT, SHA)


@pytest.mark.parametrize("change, field", [
    ({"confirmatory_seed": 1000}, "calibration.confirmatory_seed"),
    ({"replication_seed": 0}, "calibration.replication_seed"),
    ({"replication_seed": 1000}, "calibration.replication_seed"),
    ({"pilot_runs": 1}, "calibration.pilot_runs"),
    ({"power": 1.0}, "calibration.power"),
    ({"bogus": 1}, "calibration.bogus"),
    ({"frozen": {"commit": "abc", "sha256": SHA}}, "calibration.frozen.commit"),
    ({"frozen": {"commit": COMMIT}}, "calibration.frozen"),
    ({"required": "a"}, "calibration.required"),
])
def test_bad_calibration_tables(change, field):
    raw = {"pilot_seed": 1000, "pilot_runs": 6, "confirmatory_seed": 0, **change}
    with pytest.raises(ConfigError) as e:
        parse_calibration(raw)
    assert e.value.field == field


# ============================================================================ pilot log

def test_the_pilot_log_appends_whole_lines(tmp_path):
    log = tmp_path / "results" / "x" / "pilot_log.jsonl"
    append_pilot_entry(log, {"n": 1})
    append_pilot_entry(log, {"n": 2, "all_pass": True})
    assert log.read_text() == '{"n": 1}\n{"n": 2, "all_pass": true}\n'
    assert read_pilot_log(log) == [{"n": 1}, {"n": 2, "all_pass": True}]
    with pytest.raises(ValueError):
        append_pilot_entry(log, {"value": math.nan})
    assert len(read_pilot_log(log)) == 2            # nothing of the refused entry
    with log.open("a") as fh:
        fh.write("[1]\n")
    with pytest.raises(ConfigError, match="line 3"):
        read_pilot_log(log)
    assert read_pilot_log(tmp_path / "none.jsonl") == []


# ============================================================================ checks

def test_a_binary_check_has_a_wilson_interval():
    r = summarise_check("c", [1, 1, 0, 1, np.nan], binary=True, minimum=0.8)
    # 3 of 4 runs (the NaN run has no value): Wilson 95% (0.3006, 0.9544)
    assert (r.value, r.n) == (0.75, 4)
    assert (r.low, r.high) == pytest.approx((0.30064184, 0.95441274))
    assert not r.passed and r.threshold() == ">= 0.8"
    assert summarise_check("c", [1, 1, 0, 1], binary=True, minimum=0.75).passed
    with pytest.raises(ValueError):
        summarise_check("c", [0.5], binary=True, minimum=0.1)


def test_a_numeric_check_has_a_bootstrap_interval_and_both_bounds():
    r = summarise_check("c", [0.2, 0.2, 0.2], binary=False, minimum=0.15, maximum=0.35)
    assert (r.value, r.low, r.high) == pytest.approx((0.2, 0.2, 0.2))   # no spread
    assert r.passed and r.threshold() == "0.15 <= x <= 0.35"
    r = summarise_check("c", [0.1, 0.3, 0.5, 0.7], binary=False, maximum=0.35, seed=3)
    assert r.value == pytest.approx(0.4) and not r.passed
    assert 0.1 <= r.low < 0.4 < r.high <= 0.7
    empty = summarise_check("c", [np.nan, np.nan], binary=False, minimum=0.0)
    assert empty.n == 0 and not empty.passed and math.isnan(empty.value)


# ============================================================================ sizing

def test_the_sizing_formula_on_a_hand_computed_case():
    # d = 0, 1, 2, 3, 4: sd = sqrt(2.5) = 1.58114; chi2_{0.2, 4} = 1.648777, so the 80%
    # upper bound is 1.58114 * sqrt(4 / 1.648777) = 2.462743
    d = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    upper = sd_upper_bound(float(np.std(d, ddof=1)), 5)
    assert upper == pytest.approx(2.4627430, rel=1e-7)
    # (t_{0.975, n-1} + t_{0.8, n-1}) * 2.462743 / sqrt(n) falls below 1 first at n = 50
    # (1.00614 at 49, 0.99560 at 50)
    assert smallest_detectable(upper, 49, alpha=0.05, power=0.8) == pytest.approx(1.006139,
                                                                                  rel=1e-5)
    assert smallest_detectable(upper, 50, alpha=0.05, power=0.8) == pytest.approx(0.995604,
                                                                                  rel=1e-5)
    assert runs_needed(upper, 1.0, alpha=0.05, power=0.8) == 50
    assert runs_needed(upper, 2.0, alpha=0.05, power=0.8) == 14
    assert runs_needed(0.0, 1.0, alpha=0.05, power=0.8) == 2
    # two hypotheses: each at 0.05 / 2 (61 runs), and the recommendation is the largest
    rows, recommended, floor = size_runs(
        [Contrast("h1", "a - b", d, 1.0), Contrast("h2", "a - c", np.zeros(5), 1.0)],
        alpha=0.05, power=0.8)
    assert [r.runs for r in rows] == [61, 2]
    assert rows[0].sd == pytest.approx(math.sqrt(2.5))
    # 2 * 2^-n <= 0.05 first at n = 6
    assert (recommended, floor) == (61, 6)
    # a comparison with one pilot pair cannot be sized
    rows, recommended, _ = size_runs([Contrast("h", "a - b", np.array([1.0]), 1.0)],
                                     alpha=0.05, power=0.8)
    assert rows[0].runs is None and recommended is None


# ============================================================================ verdicts

def test_the_equivalence_interval_by_hand():
    # mean 0, sd 0.11547, n 4: t_{0.95, 3} = 2.353363, half-width 0.135872
    lo, hi = equivalence_interval([0.1, -0.1, 0.1, -0.1], 0.05)
    assert (lo, hi) == pytest.approx((-0.1358715, 0.1358715), rel=1e-6)
    assert all(math.isnan(x) for x in equivalence_interval([1.0], 0.05))


@pytest.mark.parametrize("verdict, checks_pass, delta, expected", [
    ("holds", False, 0.2, NOT_TESTABLE),             # a failing check: never a verdict
    ("does not hold", False, 0.2, NOT_TESTABLE),
    ("holds", True, 0.2, "holds"),
    ("does not hold", True, 0.2, NO_EFFECT),         # (-0.136, 0.136) inside (-0.2, 0.2)
    ("does not hold", True, 0.1, "does not hold"),   # but not inside (-0.1, 0.1)
    ("not tested", True, 0.2, "not tested"),
])
def test_the_four_verdicts(verdict, checks_pass, delta, expected):
    d = np.array([0.1, -0.1, 0.1, -0.1])
    assert calibrated_verdict(verdict, checks_pass=checks_pass, differences=[d],
                              smallest_effect=delta, alpha=0.05) == expected


def test_equivalence_needs_every_comparison_inside():
    inside, outside = np.array([0.1, -0.1, 0.1, -0.1]), np.array([0.5, 0.6, 0.7, 0.8])
    assert calibrated_verdict("does not hold", checks_pass=True,
                              differences=[inside, outside], smallest_effect=0.2,
                              alpha=0.05) == "does not hold"


def test_the_pilot_log_entry_is_json(tmp_path):
    # the check record a pilot logs: numbers or null, never NaN
    r = summarise_check("c", [np.nan], binary=False, minimum=0.0)
    log = tmp_path / "log.jsonl"
    append_pilot_entry(log, {"checks": [r.to_dict()]})
    assert json.loads(log.read_text())["checks"][0] == {
        "check": "c", "value": None, "low": None, "high": None, "n": 0,
        "threshold": ">= 0", "pass": False}
