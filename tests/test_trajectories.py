"""The tau-bench importer, personal-data harvest, workflow induction and the
``trajectories`` experiment kind."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from dyna.cli import main
from dyna.errors import ConfigError, DynaError
from dyna.loops.trajectories import (TrajectoryError, TrajectoryRun, find_personal_values,
                                     harvest_by_field, harvest_personal_values, import_runs,
                                     induce_workflow, leave_one_task_out, load_trajectories,
                                     parse_run, sequence_scores, task_type)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "tau_bench_sample" / "runs.json"
FULL = ROOT / "data" / "agent_trajectories" / "taubench_airline_gpt4o_trajectories.json"


def _digest_text(d) -> str:
    return "\n".join([d.task] + [json.dumps(dict(c.args), default=str) + "\n" + c.output
                                 for c in d.tool_calls])


# ============================================================================ importer

def test_sample_runs_task_types_and_outcomes_by_hand():
    runs = {(r.task_id, r.trial): r for r in load_trajectories(SAMPLE)}
    assert sorted(runs) == [(3, 0), (32, 2), (37, 0)]
    # task 3: the ground truth changes the flights, then the bags
    r = runs[(3, 0)]
    assert [n for n, _ in r.ground_truth] == ["update_reservation_flights",
                                              "update_reservation_baggages"]
    assert r.task_type == "update_reservation_flights"
    assert (r.reward, r.success, len(r.tool_calls)) == (0.0, False, 20)
    assert sum(c["error"] for c in r.tool_calls) == 5
    # task 37: the ground truth only reads the user; the agent sent a certificate anyway
    r = runs[(37, 0)]
    assert [n for n, _ in r.ground_truth] == ["get_user_details"]
    assert r.task_type == "no_change" and r.success is False
    ep = r.episode()
    assert (ep["task_type"], ep["action_type"], ep["outcome"], ep["reward"]) == \
        ("no_change", "send_certificate", "failure", 0.0)
    assert [c["tool"] for c in ep["action_taken"]["tool_calls"]][-2:] == \
        ["send_certificate", "transfer_to_human_agents"]
    # task 32: reads, a search, then the booking
    r = runs[(32, 2)]
    assert r.task_type == "book_reservation" and r.actions == (
        "get_user_details", "search_direct_flight", "book_reservation")
    assert r.first_message == "Hi there! I'd like to book a flight from ORD to PHL."
    assert r.run_id == "task32-trial2" and r.tokens == 0


def test_task_type_rule():
    assert task_type(["get_user_details", "update_reservation_baggages",
                      "cancel_reservation"]) == "update_reservation_baggages"
    assert task_type(["send_certificate"]) == "send_certificate"
    assert task_type(["get_user_details", "transfer_to_human_agents"]) == "no_change"
    assert task_type([]) == "no_change"
    assert task_type(["update_reservation"]) == "no_change"   # not update_reservation_*


def test_full_file_task_types():
    runs = load_trajectories(FULL)
    assert len(runs) == 200 and sum(r.success for r in runs) == 84
    types = {}
    for r in runs:
        if r.trial == 0:
            types[r.task_type] = types.get(r.task_type, 0) + 1
    assert types == {"no_change": 20, "update_reservation_flights": 11,
                     "cancel_reservation": 10, "book_reservation": 4, "send_certificate": 3,
                     "update_reservation_baggages": 1, "update_reservation_passengers": 1}


def test_import_runs_into_the_experience_store_keeps_no_personal_data():
    from dyna.experience import ExperienceStore
    runs = load_trajectories(SAMPLE)
    with ExperienceStore("", dim=32) as store:
        assert import_runs(store, runs)["n"] == 3
        rows = store.export_data("taubench-airline")["records"]
        (comp,) = store.get_competence("taubench-airline", "no_change")["competence"]
    assert sorted(r["run_id"] for r in rows) == ["task3-trial0", "task32-trial2",
                                                 "task37-trial0"]
    assert (comp["a"], comp["b"]) == (1.0, 2.0)        # uniform prior + one failure
    text = json.dumps(rows, default=str)
    values = set().union(*(harvest_personal_values(r) for r in runs))
    assert find_personal_values(text, values) == set()
    assert "get_reservation_details" in text and "HAT" in text


# ============================================================================ personal data

def test_harvest_by_field_of_a_sample_run():
    raw = [r for r in json.loads(SAMPLE.read_text()) if (r["task_id"], r["trial"]) == (3, 0)]
    got = harvest_by_field(raw[0])
    assert got == {
        "email": {"sofia.kim1937@example.com"},
        "address": {"825 Laurel Lane", "Suite 595", "77243"},
        "dob": {"1950-06-24", "1962-04-02", "1968-11-03", "1982-12-20", "1986-05-05"},
        "payment_id": {"certificate_8544743", "certificate_9932251", "credit_card_9879898",
                       "gift_card_6276644", "gift_card_7091239", "gift_card_7480005"},
        "user_id": {"sofia_kim_7287"}}
    # the parsed run gives the same values as the raw object
    assert harvest_personal_values(parse_run(raw[0])) == set().union(*got.values())
    assert [len(harvest_personal_values(r)) for r in load_trajectories(SAMPLE)] == [16, 16, 13]


def test_harvest_ignores_what_is_not_structured():
    run = {"info": {"task": {"user_id": "ann_lee_1234"}},
           "traj": [{"role": "tool", "content": "Error: user ann_lee_1234 not found"},
                    {"role": "tool", "content": '{"email": "a@b.example", "address": '
                     '{"address1": "1 Main St", "city": "Austin", "zip": "10001"}}'},
                    {"role": "user", "content": '{"dob": "1990-01-01"}'}]}
    assert harvest_by_field(run) == {"email": {"a@b.example"}, "address": {"1 Main St", "10001"},
                                     "dob": set(), "payment_id": set(),
                                     "user_id": {"ann_lee_1234"}}


def test_find_personal_values_whole_tokens():
    vals = {"credit_card_4421486", "77243", "mia_li_3668"}
    assert find_personal_values("pay with credit_card_4421486.", vals) == {"credit_card_4421486"}
    assert find_personal_values("credit_card_44214860 and 772431", vals) == set()
    assert find_personal_values("id=mia_li_3668,zip 77243", vals) == {"mia_li_3668", "77243"}
    assert find_personal_values("", vals) == set()


def test_digest_redaction_on_and_off_on_the_sample_runs():
    runs = load_trajectories(SAMPLE)
    on = off = 0
    for r in runs:
        values = harvest_personal_values(r)
        on += len(find_personal_values(_digest_text(r.digest(redaction=True)), values))
        off += len(find_personal_values(_digest_text(r.digest(redaction=False)), values))
    assert on == 0
    assert off == 20      # the measurement is not vacuous: without redaction they are there
    # task 37 without redaction: the user id in the arguments, and the address, which the
    # first 200 characters of get_user_details' output hold (its e-mail comes later)
    r = [r for r in runs if r.task_id == 37][0]
    text = _digest_text(r.digest(redaction=False))
    assert {k: find_personal_values(text, v) for k, v in harvest_by_field(r).items()} == {
        "email": set(), "address": {"853 Chestnut Street", "Suite 497", "20195"},
        "dob": set(), "payment_id": set(), "user_id": {"mei_brown_7075"}}
    assert r.digest(redaction=False).tool_calls[0].output.startswith(
        '{"name": {"first_name": "Mei", "last_name": "Brown"}, "address": {"address1": '
        '"853 Chestnut Street", "address2": "Suite 497"')
    d = runs[0].digest()
    assert d.success is False and d.verified is True and d.steps == 20
    assert d.tool_calls[0].args == {"user_id": "[REDACTED]"}
    assert d.redactions > 0 and d.taint() == ()          # the airline tools are trusted
    assert runs[0].digest(trusted=False).taint() == ("tool_output", "tool_argument")


def test_digest_forgets_ids_of_sensitive_fields_elsewhere_in_the_run():
    # a payment id named by a payment_id argument is also gone from the error message
    raw = {"task_id": 1, "trial": 0, "reward": 0.0,
           "info": {"task": {"user_id": "ann_lee_1234", "actions": []}},
           "traj": [{"role": "user", "content": "My user id is ann_lee_1234."},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "c1", "function": {"name": "book_reservation", "arguments":
                                                  '{"payment_id": "gift_card_5094406"}'}},
                        {"id": "c2", "function": {"name": "think", "arguments":
                                                  '{"thought": "The user, ann_lee_1234, '
                                                  'pays."}'}}]},
                    {"role": "tool", "tool_call_id": "c1", "name": "book_reservation",
                     "content": "Error: not enough balance in payment method gift_card_5094406"},
                    {"role": "tool", "tool_call_id": "c2", "name": "think", "content": ""}]}
    run = parse_run(raw)
    d = run.digest()
    assert d.tool_calls[0].args == {"payment_id": "[REDACTED]"}
    assert d.tool_calls[0].output == "Error: not enough balance in payment method [REDACTED]"
    assert d.tool_calls[0].error is True
    assert d.tool_calls[1].args == {"thought": "The user, [REDACTED], pays."}
    plain = run.digest(redaction=False)
    assert "gift_card_5094406" in plain.tool_calls[0].output


# ============================================================================ bad input

def _run(**over):
    run = {"task_id": 3, "trial": 0, "reward": 1.0,
           "info": {"task": {"user_id": "u", "instruction": "", "actions": []}},
           "traj": [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "c1", "function": {"name": "get_user_details",
                                                  "arguments": '{"user_id": "u"}'}}]}]}
    run.update(over)
    return run


def test_bad_input_messages(tmp_path):
    p = tmp_path / "runs.json"
    p.write_text("{not json")
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(p)
    assert str(e.value) == (f"{p}: file: not JSON (Expecting property name enclosed in "
                            "double quotes: line 1 column 2 (char 1))")
    assert isinstance(e.value, DynaError) and isinstance(e.value, ConfigError)

    run = _run()
    del run["traj"]
    p.write_text(json.dumps([run]))
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(p)
    assert str(e.value) == f"{p}: run 0 (task 3, trial 0): traj: missing"
    assert (e.value.run, e.value.field) == ("run 0 (task 3, trial 0)", "traj")

    run = _run()
    run["traj"][1]["tool_calls"][0]["function"]["arguments"] = '{"user_id": '
    p.write_text(json.dumps([_run(task_id=4), run]))
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(p)
    assert str(e.value) == (f"{p}: run 1 (task 3, trial 0): "
                            "traj[1].tool_calls[0].function.arguments: not JSON (Expecting "
                            "value: line 1 column 13 (char 12))")

    run = _run()
    run["traj"][1]["tool_calls"][0]["function"]["arguments"] = '["u"]'
    with pytest.raises(TrajectoryError, match=r"arguments: must be a JSON object"):
        parse_run(run, 0, "x.json")
    with pytest.raises(TrajectoryError, match=r"^x.json: run 0: task_id: must be a "
                                              r"non-negative integer below 2\*\*31$"):
        parse_run(_run(task_id="3"), 0, "x.json")
    with pytest.raises(TrajectoryError, match=r"^x.json: run 0 \(task 3, trial 0\): reward: "
                                              r"must be a finite number$"):
        parse_run(_run(reward=float("nan")), 0, "x.json")
    p.write_text(json.dumps([_run(), _run()]))
    with pytest.raises(TrajectoryError, match=r"run 1 \(task 3, trial 0\): task_id: task 3 "
                                              r"trial 0 is also run 0$"):
        load_trajectories(p)
    p.write_text(json.dumps({"runs": []}))
    with pytest.raises(TrajectoryError, match=r"file: must be a JSON list of runs$"):
        load_trajectories(p)


def _with_output(content, cid="c1"):
    run = _run()
    run["traj"].append({"role": "tool", "tool_call_id": cid, "content": content})
    return run


def _with_args(text):
    run = _run()
    run["traj"][1]["tool_calls"][0]["function"]["arguments"] = text
    return run


def _nest(n):
    return "[" * n + "]" * n


@pytest.mark.parametrize("run, message", [
    # review R18: each of these raised a RecursionError, a TypeError or an OverflowError
    (_with_args(f'{{"user_id": {_nest(99_000)}}}'),
     "traj[1].tool_calls[0].function.arguments: not JSON (nested too deeply)"),
    (_with_args(f'{{"user_id": {_nest(900)}}}'),       # parses, then overflowed the redactor
     "traj[1].tool_calls[0].function.arguments: not JSON (nested too deeply)"),
    (_with_args('{"user_id": NaN}'),                 # reached the store as a bad float
     "traj[1].tool_calls[0].function.arguments: not JSON (NaN is not a JSON value)"),
    (_with_args('{"amount": -Infinity}'),
     "traj[1].tool_calls[0].function.arguments: not JSON (-Infinity is not a JSON value)"),
    # which of two amounts counts differs between JSON readers: refused, not read one way
    (_with_args('{"amount": 1, "amount": 1000}'),
     "traj[1].tool_calls[0].function.arguments: not JSON (duplicate key 'amount')"),
    (_with_output("ok", cid=["c1"]), "traj[2].tool_call_id: must be a string"),
    (_with_output("ok", cid={"id": "c1"}), "traj[2].tool_call_id: must be a string"),
    (_with_output(_nest(99_000)), "traj[2].content: JSON nested too deeply"),
    (_run(task_id=10**30), "task_id: must be a non-negative integer below 2**31"),
    # a 100 MB argument took 450 s and 10 GB of memory to replay
    (_with_args(json.dumps({"user_id": "a1" * 100_001})),
     "traj[1].tool_calls[0].function.arguments: longer than 200000 characters"),
    (_with_output("x" * 200_001), "traj[2].content: longer than 200000 characters"),
    (_run(trial=2**31), "trial: must be a non-negative integer below 2**31"),
])
def test_hostile_shapes_name_the_run_and_the_field(run, message):
    with pytest.raises(TrajectoryError) as e:
        parse_run(run, 0, "x.json")
    assert str(e.value).startswith("x.json: run 0") and str(e.value).endswith(message)


def test_a_file_nested_past_the_parser_is_not_json(tmp_path):
    p = tmp_path / "runs.json"
    p.write_text(_nest(100_000))
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(p)
    assert str(e.value) == f"{p}: file: not JSON (nested too deeply)"
    p.write_text('[{"task_id": 3, "trial": 0, "task_id": 4}]')
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(p)
    assert str(e.value) == f"{p}: file: not JSON (duplicate key 'task_id')"
    p.write_text(json.dumps([{"task_id": 3, "trial": 0, "pad": json.loads(_nest(40))}]))
    with pytest.raises(TrajectoryError) as e:
        load_trajectories(p)
    assert str(e.value) == f"{p}: run 0 (task 3, trial 0): run: nested more than 32 levels"


def test_cli_on_a_bad_trajectories_file_one_line_exit_2_nothing_written(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    run = _run()
    del run["traj"]
    bad.write_text(json.dumps([run]))
    toml = tmp_path / "t.toml"
    toml.write_text('kind = "trajectories"\nname = "t"\ndata = "bad.json"\n'
                    'variants = ["memory_loop"]\n')
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"dyna: error: {bad}: run 0 (task 3, trial 0): traj: missing\n"
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "t.toml"]


# ============================================================================ induction

def _mk(task_id, trial, reward, truth, calls):
    return TrajectoryRun(0, task_id, trial, reward, "u", "", "", tuple((n, {}) for n in truth),
                         tuple({"name": n, "args": {}, "output": "", "error": err}
                               for n, err in calls))


def test_induce_workflow_by_hand():
    # a in 3/3, b in 2/3, c in 3/3, d in 1/3 (dropped); mean relative positions
    # a 0, b (1/3 + 1/4) / 2 = 0.29, c (2/3 + 1/2 + 2/4) / 3 = 0.56
    assert induce_workflow([("a", "b", "c"), ("a", "c"), ("a", "b", "c", "d")]) == \
        ("a", "b", "c")
    # a twice in the median example is kept twice, in order of position
    assert induce_workflow([("a", "x", "a"), ("a", "a"), ("a",)]) == ("a", "a")
    assert induce_workflow([]) == ()
    assert sequence_scores(("a", "b", "c"), ("a", "c", "c")) == (2 / 3, 2 / 3, False)
    assert sequence_scores((), ("a",)) == (0.0, 0.0, False)
    assert sequence_scores(("a", "b"), ("a", "b")) == (1.0, 1.0, True)
    with pytest.raises(ConfigError, match="truth"):
        sequence_scores(("a",), ())


def test_leave_one_task_out_by_hand():
    g = "get_reservation_details"
    c = "cancel_reservation"
    runs = [
        # three cancel tasks
        _mk(0, 0, 1.0, [g, c], [(g, False), (c, False)]),
        _mk(1, 0, 1.0, [c], [(g, False), ("think", False), (c, False)]),
        _mk(2, 0, 0.0, [g, c], [(g, False), (c, True)]),
        _mk(2, 1, 1.0, [g, c], [(c, False)]),
        # a no_change task with an empty ground truth, and a lone booking type
        _mk(3, 0, 1.0, [], [(g, False)]),
        _mk(4, 0, 0.0, ["book_reservation"], [("book_reservation", True)]),
    ]
    rows = {r["task_id"]: r for r in leave_one_task_out(runs)}
    assert [rows[t]["status"] for t in range(5)] == ["scored", "scored", "scored",
                                                     "empty_ground_truth", "nothing_to_induce"]
    # task 0 induced from task 1 (g, c: think dropped) and task 2 trial 1 (c): c in 2/2,
    # g in 1/2 (not a majority) -> (c); truth (g, c): precision 1, recall 1/2
    r = rows[0]
    assert r["n_examples"] == 2 and r["induced_workflow"] == "cancel_reservation()"
    assert (r["induced_precision"], r["induced_recall"], r["induced_exact"]) == (1.0, 0.5, False)
    # the type's most frequent ground truth among tasks 1 and 2: (c) and (g, c) tie at one
    # each, the first seen (task 1: c) wins
    assert r["mode_ground_truth_workflow"] == "cancel_reservation()"
    # task 1 induced from task 0 (g, c) and task 2 trial 1 (c) -> (c): exact
    r = rows[1]
    assert (r["induced_precision"], r["induced_recall"], r["induced_exact"]) == (1.0, 1.0, True)
    # task 2 (its failed trial 0 is never an example) from tasks 0 and 1: (g, c) twice
    r = rows[2]
    assert r["induced_workflow"] == "get_reservation_details() cancel_reservation()"
    assert r["induced_exact"] is True and r["mode_success_exact"] is True
    assert rows[3]["n_truth"] == 0 and rows[4]["n_examples"] == 0


# ============================================================================ the kind

def test_shipped_experiment_file_parses():
    from dyna.experiment.registry import load_experiment
    cfg = load_experiment(ROOT / "experiments" / "taubench_airline_loops.toml")
    assert cfg.kind == "trajectories" and len(cfg.variants) == 31
    assert cfg.variants[:2] == ("naive_loop", "skill_loop") and "awm" in cfg.variants
    assert cfg.to_dict()["variants"] == list(cfg.variants)


@pytest.mark.parametrize("bad, field", [
    ({"variants": ["oracle"]}, "variants[0]"),
    ({"variants": ["skill_loop-self_gate"]}, "variants[0]"),
    ({"variants": ["skil_loop"]}, "variants[0]"),
    ({"reviewer": {"copy_rate": 2.0}}, "reviewer.copy_rate"),
    ({"reviewer": {"copyrate": 0.5}}, "reviewer.copyrate"),
    ({"loop": {"skill_cap": 0}}, "loop.skill_cap"),
    ({"digest": {"tools_trusted": "yes"}}, "digest.tools_trusted"),
    ({"data": 3}, "data"),
])
def test_config_errors_name_the_field(bad, field):
    from dyna.experiment.kinds.trajectories.config import parse_trajectories
    data = {"name": "t", "data": "x.json", **bad}
    with pytest.raises(ConfigError) as e:
        parse_trajectories(data)
    assert e.value.field == field


def test_run_end_to_end_on_a_cut_down_file(tmp_path):
    raw = [r for r in json.loads(FULL.read_text()) if r["task_id"] < 8]
    data = tmp_path / "runs.json"
    data.write_text(json.dumps(raw))
    successes = sum(r["reward"] == 1.0 for r in raw)
    toml = tmp_path / "t.toml"
    toml.write_text('kind = "trajectories"\nname = "small"\nruns = 1\ndata = "runs.json"\n'
                    'variants = ["memory_loop", "memory_loop-no_redaction", '
                    '"memory_loop-no_outcome_gate", "awm", "naive_loop"]\n'
                    "[analysis]\nn_resamples = 200\n")
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out), "--no-progress"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["episodes.parquet", "induction.parquet", "induction_summary.parquet",
                     "manifest.json", "plots", "report.md", "runs.parquet",
                     "store_episodes.parquet"]
    assert sorted(p.name for p in (out / "plots").glob("*.png")) == [
        "entries.png", "induction.png", "lessons_from_failed.png", "personal_data.png"]
    runs = pl.read_parquet(out / "runs.parquet")
    row = {r["variant"]: r for r in runs.iter_rows(named=True)}
    assert len(raw) == 32 and row["memory_loop"]["reviews"] == successes
    assert row["memory_loop-no_outcome_gate"]["reviews"] == 32
    assert row["memory_loop"]["acted_outcome_gate"] == 32 - successes
    assert row["memory_loop"]["lessons_from_failed"] == 0
    assert row["memory_loop-no_outcome_gate"]["lessons_from_failed"] > 0
    assert row["memory_loop"]["pd_reviewer"] == 0 and row["memory_loop"]["pd_store"] == 0
    assert row["memory_loop-no_redaction"]["pd_reviewer"] > 0
    # nothing harvested reaches the store files with the digest's redaction off
    # either. Before the payment_method_id detector and the user-id cues of redact.py,
    # memory_loop-no_redaction stored 1 value here and naive_loop (no redaction, no secret
    # scan: only the stores' safety net) 8 payment ids, with 22 catches of the net.
    assert row["memory_loop-no_redaction"]["pd_store"] == 0
    assert row["naive_loop"]["pd_reviewer"] == 156 and row["naive_loop"]["pd_store"] == 0
    assert row["naive_loop"]["safety_net_catches"] == 40
    assert row["awm"]["learner"] == "baseline" and row["awm"]["pd_store"] > 0
    eps = pl.read_parquet(out / "episodes.parquet")
    first = eps.filter(pl.col("variant") == "awm").head(9)
    assert first.get_column("trial").to_list() == [0] * 8 + [1]   # trial by trial
    assert first.get_column("task_id").to_list() == list(range(8)) + [0]
    man = json.loads((out / "manifest.json").read_text())
    assert man["kind"] == "trajectories" and man["data"]["runs"] == 32
    report = (out / "report.md").read_text()
    head = report.split("## Headline\n\n")[1].split("\n\n")[0].splitlines()
    assert 1 <= len(head) <= 5 and all(line.startswith("- ") for line in head)
    assert head[1] == ("- Personal values to the reviewer, redaction on vs off: memory_loop 0 vs "
                       "28; 0 in the 2 stores.")
    assert ("payment_id, payment_methods; the tool calls are declared trusted "
            "(`[digest] tools_trusted = true`)") in report
    se = pl.read_parquet(out / "store_episodes.parquet")
    assert se.get_column("in_store").sum() == 0 and se.get_column("episodes")[0] == 32


def test_headline_short_lines_with_intervals_over_two_seeds(tmp_path):
    """Five headline lines of at most 160 characters, the personal data and outcome-gate
    lines with intervals over the two reviewer seeds."""
    raw = [r for r in json.loads(FULL.read_text()) if r["task_id"] < 8]
    (tmp_path / "runs.json").write_text(json.dumps(raw))
    toml = tmp_path / "t.toml"
    toml.write_text('kind = "trajectories"\nname = "two"\nruns = 2\ndata = "runs.json"\n'
                    'variants = ["skill_loop", "skill_loop-no_redaction", '
                    '"skill_loop-no_outcome_gate", "memory_loop", "memory_loop-no_redaction", '
                    '"memory_loop-no_outcome_gate", "awm"]\n'
                    "[analysis]\nn_resamples = 200\n")
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out), "--no-progress"]) == 0
    report = (out / "report.md").read_text()
    head = report.split("## Headline\n\n")[1].split("\n\n")[0].splitlines()
    assert head == [
        "- Replayed 32 recorded runs (8 tasks x 4 trials, 5 rewarded 1) through 6 loop variants "
        "and 1 baseline; mean per replay [95% CI over 2 reviewer seeds].",
        "- Personal values to the reviewer, redaction on vs off: skill_loop 0 [0, 0] vs 28 "
        "[28, 28], memory_loop 0 [0, 0] vs 28 [28, 28]; 0 in the 4 stores.",
        "- Lessons from failed runs, outcome gate on vs off: skill_loop 0 [0, 0] vs 27 [26, 28], "
        "memory_loop 0 [0, 0] vs 19.5 [18, 21].",
        "- Workflow induction on 6 held-out tasks: recall 0.561 [0.338, 0.806], precision 0.217 "
        "[0.2, 0.242] (95% CI over tasks).",
        "- The type's most frequent ground-truth sequence: recall 0.644 [0.4, 0.889], precision "
        "0.611 [0.389, 0.889]."]
    assert max(len(line) for line in head) <= 160


def test_readme_trajectories_snippet_runs_as_written(monkeypatch):
    import re
    text = (ROOT / "docs" / "trajectories.md").read_text(encoding="utf-8")
    section = text.split("## Real agent runs from Python", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(ROOT)
    ns: dict = {}
    exec(compile(code, "docs/trajectories.md", "exec"), ns)
    r = ns["r"]
    assert (r.task_type, r.success, r.actions[:2]) == (
        "update_reservation_flights", False, ("get_user_details", "get_reservation_details"))
    assert r.run_id == "task3-trial0" and ns["d"].tool_calls[0].args == {"user_id": "[REDACTED]"}


def test_all_200_redacted_digests_hold_no_harvested_value():
    runs = load_trajectories(FULL)
    on = off = 0
    for r in runs:
        values = harvest_personal_values(r)
        on += len(find_personal_values(_digest_text(r.digest()), values))
        off += len(find_personal_values(_digest_text(r.digest(redaction=False)), values))
    assert (on, off) == (0, 692)


def test_report_counts_are_whole_numbers_when_whole():
    """Review R18: a mean of counts over one run printed "692.0" beside "74"."""
    from dyna.experiment.kinds.trajectories.report import _n
    assert [_n(692.0), _n(74), _n(60000.0), _n(2.5), _n(116.25), _n(None)] == \
        ["692", "74", "60000", "2.5", "116.2", "n/a"]
