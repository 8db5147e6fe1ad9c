"""The agent-task figures show the effect, tested on the figure objects: every variant its
own colour in every panel (a loop without a safeguard and the naive loop with it apart),
recovery drawn only where there was something to recover from, a scenario equal to
another says so, the poisoned-entries row scaled per panel, the crossover map in words."""

import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.kinds.agent_tasks import figure_helper as FH
from dyna.experiment.kinds.agent_tasks import figure_worker as FW
from dyna.experiment import plotting
from dyna.experiment.kinds.agent_tasks import figure_style
from dyna.experiment.kinds.agent_tasks import plots as P
from dyna.experiment.kinds.agent_tasks import run_plots as RP
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import load_output, run_experiment

VARIANTS = ["no_learning", "naive_loop", "skill_loop", "skill_loop-no_outcome_gate",
            "naive_loop+outcome_gate"]
CFG = {"kind": "agent_tasks", "name": "figs", "runs": 2, "episodes": 60, "seed": 0,
       "store": "skill", "variants": VARIANTS, "env": {"n_families": 2, "max_steps": 12},
       "scenarios": [{"name": "base"}, {"name": "again", "env": {"n_families": 2}},
                     {"name": "drifty", "env": {"drift_at": [30]}}],
       "sweeps": [{"name": "learning_from_failure", "knob": "false_success_rate",
                   "values": [0.0, 0.5], "metric": "late_success", "better": "greater",
                   "safeguards": ["outcome_gate"]}],
       "analysis": {"final_window": 10, "n_resamples": 200, "window": 5, "late_from": 31}}


def _shot(fig) -> dict:
    """What the tests read of a figure before it is saved: its title, figure legends and
    per axes the lines (label, colour, marker, data), bars, labels, limits, tick labels."""
    fig.canvas.draw()
    axes = []
    for ax in fig.axes:
        lines = [{"label": ln.get_label(), "color": ln.get_color(), "marker": ln.get_marker(),
                  "x": np.asarray(ln.get_xdata(), float), "y": np.asarray(ln.get_ydata(), float)}
                 for ln in ax.get_lines()]
        bars = [p for p in ax.patches if p.get_width() > 0]
        axes.append({"lines": lines, "bars": len(bars), "ylim": ax.get_ylim(),
                     "ylabel": ax.get_ylabel(), "xlabel": ax.get_xlabel(),
                     "title": ax.get_title(), "texts": [t.get_text() for t in ax.texts],
                     "xlim": ax.get_xlim(), "yscale": ax.get_yscale(),
                     "yticks": [(t.get_text(), t.get_color()) for t in ax.get_yticklabels()],
                     "left_labels": any(t.get_visible() and t.get_text()
                                        for t in ax.get_yticklabels())})
    return {"title": fig.get_suptitle(), "axes": axes,
            "legends": [[t.get_text() for t in leg.get_texts()] for leg in fig.legends]}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The small experiment's output and a snapshot of every figure it saved, by stem."""
    shots = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DYNA_RENDER", "serial")
        for module in (P, RP):
            def save(fig, stem, *args, _real=module.save, **kw):
                shots[stem.name] = _shot(fig)
                return _real(fig, stem, *args, **kw)
            mp.setattr(module, "save", save)
        folder = run_experiment(parse_experiment(CFG), tmp_path_factory.mktemp("f") / "o",
                                backend=InProcessBackend(), progress=False)
    return load_output(folder), shots


def _data_lines(ax):
    return [ln for ln in ax["lines"] if not (ln["x"].size == 2 and ln["x"][0] == ln["x"][1])]


# --------------------------------------------------------------------------- colours

def test_a_loop_without_a_safeguard_and_the_naive_loop_with_it_differ_in_colour():
    skill_v2 = ["no_learning", "oracle", "naive_loop", "skill_loop"] + \
        [f"skill_loop-no_{s}" for s in ("outcome_gate", "retire_on_contradiction",
                                         "novelty_check", "cap_eviction",
                                         "approval_for_untrusted")] + \
        [f"naive_loop+{s}" for s in ("outcome_gate", "retire_on_contradiction",
                                      "novelty_check", "cap_eviction",
                                      "approval_for_untrusted")]
    colors = figure_style.variant_colors(skill_v2, "skill")
    assert len(set(colors.values())) == 14
    # the ablations take their safeguard's colour, the naive loop + one its own
    assert [colors[v] for v in skill_v2[4:9]] == ["#2ca02c", "#00798c", "#e7298a", "#a6761d",
                                                  "#6a3d9a"]
    assert [colors[v] for v in skill_v2[9:]] == ["#1fb57a", "#6699ff", "#0000ff", "#734066",
                                                 "#ff08e8"]
    # a variant's colour is its name's: listed first, last or alone, the same
    assert figure_style.variant_colors(["naive_loop+dating", "skill_loop-no_dating"], "skill") == {
        "naive_loop+dating": "#ff4000", "skill_loop-no_dating": "#f781bf"}
    assert figure_style.variant_colors(["naive_loop+dating"], "skill") == {
        "naive_loop+dating": "#ff4000"}


def _known_names(store: str) -> list[str]:
    """Every variant name with a fixed colour in ``store``'s experiments."""
    from dyna.agents.baselines import BASELINES
    from dyna.agents.loop_agents import variant_names
    from dyna.loops import LoopConfig

    return list(dict.fromkeys(
        variant_names(store) + [f"naive_loop+{s}" for s in LoopConfig.SWITCHES]
        + list(BASELINES) + [f"{store}_loop-self_gate"]
        + (["memory_loop-whole_memory"] if store == "memory" else [])))


@pytest.mark.parametrize("store", ["skill", "memory"])
def test_every_two_named_variants_are_far_apart_whatever_figure_holds_them(store):
    names = _known_names(store)
    assert len(names) == (37 if store == "skill" else 38)
    fixed = {v: figure_style.fixed_color(v, store) for v in names}
    assert [v for v, c in fixed.items() if c is None] == []
    closest = min((plotting.delta_e(fixed[a], fixed[b]), a, b)
                  for i, a in enumerate(names) for b in names[i + 1:])
    assert figure_style.MIN_DELTA_E == 25.0
    assert (round(closest[0], 1), *closest[1:]) == (
        (26.3, "no_learning", "skill_loop-no_grading") if store == "skill" else
        (26.2, "memory_loop-no_cap_eviction", "memory_loop-whole_memory"))
    # a figure of them all, or of any few, draws each in its fixed colour
    assert figure_style.variant_colors(names, store) == fixed
    assert figure_style.variant_colors(names[::-3], store) == {v: fixed[v] for v in names[::-3]}


def test_a_name_without_a_fixed_colour_moves_off_the_colours_of_its_figure():
    # "x_new" hashes to tab20's pink, 9.7 from the ablation of dating's
    assert figure_style.fixed_color("x_new", "skill") is None
    assert figure_style.variant_colors(["x_new"], "skill") == {"x_new": "#e377c2"}
    got = figure_style.variant_colors(["x_new", "skill_loop-no_dating"], "skill")
    assert got == {"x_new": "#08519c", "skill_loop-no_dating": "#f781bf"}


SKILL_V2 = ["no_learning", "oracle", "naive_loop", "skill_loop"] + \
    [f"{head}{s}" for head in ("skill_loop-no_", "naive_loop+")
     for s in ("outcome_gate", "retire_on_contradiction", "novelty_check", "cap_eviction",
               "approval_for_untrusted")]
ABLATION = ["no_learning", "oracle", "naive_loop", "self_reflection", "skill_loop"] + \
    [f"skill_loop-no_{s}" for s in ("outcome_gate", "redaction", "secret_scan",
                                    "novelty_check", "grading", "cap_eviction", "dating",
                                    "retire_on_contradiction", "approval_for_untrusted",
                                    "consolidation_every")] + ["episodic", "dyna_q",
                                                               "dyna_q_plus"]


def test_cie_lab_and_delta_e_by_hand():
    assert plotting.cie_lab("#ffffff") == pytest.approx([100.0, 0.0, 0.0], abs=0.02)
    assert plotting.cie_lab("#000000") == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    # sRGB red: L* 53.24, a* 80.09, b* 67.20 (CIE 15:2004 with the D65 white)
    assert plotting.cie_lab("#ff0000") == pytest.approx([53.24, 80.09, 67.20], abs=0.05)
    assert plotting.delta_e("#ffffff", "#000000") == pytest.approx(100.0, abs=0.02)


@pytest.mark.parametrize("variants", [SKILL_V2, ABLATION], ids=["v2_skill", "ablation"])
def test_every_two_variants_of_a_figure_are_far_apart_in_colour(variants):
    colors = figure_style.variant_colors(variants, "skill")
    pairs = [(plotting.delta_e(colors[a], colors[b]), a, b)
             for i, a in enumerate(variants) for b in variants[i + 1:]]
    assert len(pairs) == len(variants) * (len(variants) - 1) // 2
    assert min(pairs)[0] >= figure_style.MIN_DELTA_E == 25.0
    # the pairs a reader took for one another are other colours now
    for a, b in (("skill_loop-no_outcome_gate", "skill_loop-no_retire_on_contradiction"),
                 ("oracle", "naive_loop+cap_eviction"), ("naive_loop", "episodic")):
        if a in colors and b in colors:
            assert plotting.delta_e(colors[a], colors[b]) >= 40.0, (a, b)


def test_every_figure_draws_a_variant_in_one_colour_no_other_variant_has(run):
    _, shots = run
    want = figure_style.variant_colors(VARIANTS, "skill")
    short = {figure_style.short_name(v, "skill"): v for v in VARIANTS}
    seen = {}
    for ax in shots["scenario_drifty"]["axes"]:
        for ln in _data_lines(ax):
            if ln["label"] in short:
                seen.setdefault(short[ln["label"]], set()).add(ln["color"])
    assert seen == {v: {c} for v, c in want.items()}
    assert want["skill_loop-no_outcome_gate"] == "#2ca02c"
    assert want["naive_loop+outcome_gate"] == "#1fb57a"
    (rec,) = shots["recovery"]["axes"]
    assert [c for _, c in rec["yticks"]] == [
        want[v] if want[v] != "#000000" else "k" for v in VARIANTS]
    (cross,) = shots["crossover"]["axes"]
    assert {ln["label"]: ln["color"] for ln in cross["lines"]} == {
        v: want[v] for v in ("no_learning", "naive_loop", "skill_loop",
                             "naive_loop+outcome_gate")}


# -------------------------------------------------------------------------- recovery

def test_drift_outcomes_by_hand():
    family = np.arange(20) % 2                    # families 0, 1, 0, 1, ...
    drift = np.full(20, -1)
    drift[6] = 0                                  # family 0 drifts at episode index 6
    ones = np.ones(20, dtype=bool)

    def fam0(before, after):
        s = np.ones(20, dtype=bool)
        s[[2, 4]] = before
        s[[6, 8, 10, 12, 14, 16, 18]] = after
        return s

    # window 2, 5 points: family 0's episodes 2, 4 set the level, 6, 8, ... follow
    assert RP.drift_outcomes(ones, family, drift, 2, 0.05) == [("held", pytest.approx(
        np.nan, nan_ok=True))]
    got = RP.drift_outcomes(~ones, family, drift, 2, 0.05)     # never a success: no level
    assert [k for k, _ in got] == ["none before"]
    # one success in the two before: a level of 0.5; indices 8 and 10 average 0.5 again
    assert RP.drift_outcomes(fam0([0, 1], [0, 0, 1, 0, 0, 0, 0]), family, drift, 2,
                             0.05) == [("recovered", 2.0)]
    assert RP.drift_outcomes(fam0([1, 1], [0, 0, 1, 1, 1, 1, 1]), family, drift, 2,
                             0.05) == [("recovered", 4.0)]  # back from index 10: 10 - 6
    assert RP.drift_outcomes(fam0([1, 1], [0] * 7), family, drift, 2, 0.05) == [
        ("never", 14.0)]                                     # the run ends at 20: 20 - 6
    # 3 of family 0's episodes before the drift are too few for a window of 4
    assert RP.drift_outcomes(ones, family, drift, 4, 0.05) == []


def test_kaplan_meier_median_of_drift_outcomes_by_hand():
    """Recovered at 2, 4, 6, censored at 3 and 10: S = 4/5 after 2, 4/5 x 2/3 = 0.533
    after 4 (3 left the risk set), 0.533 x 1/2 = 0.267 after 6, so the median is 6; the
    drifts with nothing to recover from are not counted."""
    got = [("recovered", 2.0), ("never", 3.0), ("recovered", 4.0), ("recovered", 6.0),
           ("never", 10.0), ("held", np.nan), ("none before", np.nan)]
    assert RP.km_median(got) == 6.0
    # one in four recovered: the curve stays at 0.75, no median
    assert np.isnan(RP.km_median([("recovered", 2.0), ("never", 5.0), ("never", 7.0),
                                  ("never", 9.0)]))
    # exactly half at 2: the curve falls below one half at 4
    assert RP.km_median([("recovered", 2.0), ("recovered", 4.0)]) == 4.0
    assert np.isnan(RP.km_median([("never", 2.0)])) and np.isnan(RP.km_median([]))


def test_recovery_draws_no_bar_where_there_was_nothing_to_recover_from(run):
    out, shots = run
    runs = out.tables["runs"].filter(pl.col("scenario") == "drifty").sort("variant", "run")
    # the metric counts 1 episode for every learning variant: the wait for the drifted
    # family's next arrival, the same for all (its success never fell)
    assert runs.filter(pl.col("variant") != "no_learning")["recovery"].to_list() == [
        pytest.approx(np.nan, nan_ok=True), 1.0] * 4
    (ax,) = shots["recovery"]["axes"]
    assert [t for t, _ in ax["yticks"]] == [
        "no_learning (1 never)", "naive_loop (1 held)", "skill_loop (1 held)",
        "no_outcome_gate (1 held)", "naive_loop+outcome_gate (1 held)"]
    assert ax["bars"] == 0
    (never,) = [ln for ln in ax["lines"] if ln["marker"] == ">"]
    assert never["x"].tolist() == [30.0] and never["color"] == "#7f7f7f"
    assert ax["xlabel"] == "episodes from the drift to recovery"
    assert shots["recovery"]["title"].split("\n") == [
        "figs: recovery after a drift",
        ("recovered: the drifted family's success over 10 of its episodes back within 5 "
         "points of its level before the drift"),
        "dot: a recovered drift; hollow >: a drift never recovered, at least this many "
        "episodes",
        ("black |: the Kaplan-Meier median over both (the never recovered censored), the "
         "first time the curve falls below one half"),
        "none where it never does",
        ('nothing to recover from, so no time: "none before", the family\'s success before '
         "the drift at most 5 points"),
        '"held", within 5 points of it in its first 10 episodes after']


def test_phrase_lines_break_between_phrases():
    assert RP.phrase_lines("aaa bbb; cc dd; e", 12) == "aaa bbb\ncc dd; e"
    assert RP.phrase_lines("one two three four; x", 9) == "one two\nthree\nfour; x"


def test_a_drift_scenario_without_a_fall_is_named_instead_of_drawn(tmp_path, monkeypatch):
    """Two drift scenarios, one variant each way: where no variant's drifted family fell
    the figure has no panel but names the scenario with its counts."""
    shots = {}
    real = RP.save
    monkeypatch.setattr(RP, "save", lambda fig, stem, **kw: (
        shots.__setitem__(stem.name, _shot(fig)), real(fig, stem, **kw))[1])
    n = 40
    family = np.arange(n) % 2
    drift = np.where(np.arange(n) == 20, 0, -1)
    dips = np.ones(n, dtype=bool)
    dips[[20, 22]] = False                          # family 0 fails twice after the drift
    rows = []
    for scenario, success in (("flat", {"skill_loop": np.zeros(n, dtype=bool),
                                        "naive_loop+dating": np.ones(n, dtype=bool)}),
                              ("dips", {"skill_loop": dips,
                                        "naive_loop+dating": np.ones(n, dtype=bool)})):
        for v, s in success.items():
            for run in (0, 1):
                rows.append(pl.DataFrame({"scenario": scenario, "variant": v, "run": run,
                                          "episode": np.arange(1, n + 1), "success": s,
                                          "family": family, "drift_family": drift}))
    ep = pl.concat(rows)
    runs = ep.group_by("scenario", "variant", "run", maintain_order=True).agg(
        pl.lit(1).alias("drifts_measured"))
    cfg = SimpleNamespace(name="syn", store="skill", seed=0, runs=2,
                          variants=("skill_loop", "naive_loop+dating"),
                          analysis={"recovery_window": 2, "recovery_points": 0.05})
    out = SimpleNamespace(config=cfg, tables={"runs": runs, "episodes": ep})
    RP.recovery_figure(out, tmp_path)
    shot = shots["recovery"]
    (ax,) = shot["axes"]
    assert ax["title"] == "dips"
    assert [t for t, _ in ax["yticks"]] == ["skill_loop (2 recovered)",
                                            "naive_loop+dating (2 held)"]
    # skill_loop: a dot per recovered drift (one per run, both 4 episodes: back from the
    # drift's second arrival after it) and the Kaplan-Meier median at the same 4
    assert ax["bars"] == 0
    (dots,) = [ln for ln in ax["lines"] if ln["marker"] == "o"]
    assert dots["x"].tolist() == [4.0, 4.0]
    assert dots["color"] == figure_style.variant_colors(cfg.variants, "skill")["skill_loop"]
    (median,) = [ln for ln in ax["lines"] if ln["marker"] == "|"]
    assert median["x"].tolist() == [4.0] and median["color"] == "k"
    assert not [ln for ln in ax["lines"] if ln["marker"] == ">"]
    assert ("no panel, nothing to recover from for any variant: flat (2 none before, 2 "
            "held)") in " ".join(shot["title"].split())


# ------------------------------------------------------------------ identical scenarios

def test_a_scenario_equal_to_others_names_them_in_its_title(run):
    out, shots = run
    order = [s for s, _ in out.config.scenarios]
    # without decoy steps the false success rate changes what the agent believes of its
    # runs (self_assessed) and nothing drawn
    lff0, lff5, flip = "learning_from_failure-0.0", "learning_from_failure-0.5", \
        ("self_assessed",)
    assert P._identical_scenarios(out.tables["episodes"], order) == {
        "base": (("again", (), (), 5), (lff0, (), (), 5), (lff5, flip, (), 5)),
        "again": (("base", (), (), 5), (lff0, (), (), 5), (lff5, flip, (), 5)),
        lff0: (("base", (), (), 5), ("again", (), (), 5), (lff5, flip, (), 5)),
        lff5: (("base", flip, (), 5), ("again", flip, (), 5), (lff0, flip, (), 5))}
    # broken between its phrases only: at "; " (dropped) and between the items of a list
    assert shots["scenario_again"]["title"].split("\n") == [
        "figs, scenario again",
        "every curve identical, for every variant and run, to base,",
        "learning_from_failure-0.0 (equal episodes)",
        "learning_from_failure-0.5 (episodes differing only in self_assessed)",
        "mean of 2 runs, 95% bootstrap CI across runs (500 resamples)",
        "success and tokens rolling over 5 episodes",
        "competence: solid, posterior mean (empirical-Bayes prior), band 95% credible interval,",
        "means over 2 runs",
        "dashed, true success over the last 5 episodes (family 0: 5 arrivals)"]
    assert "identical" not in shots["scenario_drifty"]["title"]


def test_a_field_no_figure_draws_does_not_make_two_scenarios_differ(run):
    out, _ = run
    ep = out.tables["episodes"]
    keys = ["scenario", "variant", "run", "episode"]
    # the figure reads the drawn fields alone
    assert set(P._series(ep.select(*keys, *P.DRAWN_FIELDS), 5, 1, chosen_family=0)) == {
        key for key, _, _ in P.ROWS}
    base = ep.filter(pl.col("scenario") == "base")
    shadow = base.with_columns(pl.lit("shadow").alias("scenario"), ~pl.col("self_assessed"))
    twins = P._identical_scenarios(pl.concat([ep, shadow]), ["base", "drifty", "shadow"])
    assert twins == {"base": (("shadow", ("self_assessed",), (), 5),),
                     "shadow": (("base", ("self_assessed",), (), 5),)}
    assert P._twin_note((("a", (), (), 5), ("b", ("self_assessed",), (), 5),
                         ("c", ("self_assessed",), (), 5))) == (
        "every curve identical, for every variant and run, to a (equal episodes); b, c "
        "(episodes differing only in self_assessed)")
    # two variants of five differ: still "most"; three do not make a twin
    for flipped, want in ((("naive_loop", "no_learning"), {
            "base": (("shadow", (), ("naive_loop", "no_learning"), 5),),
            "shadow": (("base", (), ("naive_loop", "no_learning"), 5),)}),
                          (("naive_loop", "no_learning", "skill_loop"), {})):
        shadow = base.with_columns(
            pl.lit("shadow").alias("scenario"),
            pl.when(pl.col("variant").is_in(flipped)).then(~pl.col("success"))
            .otherwise(pl.col("success")).alias("success"))
        got = P._identical_scenarios(pl.concat([ep, shadow]), ["base", "drifty", "shadow"])
        assert got == want
    assert P._twin_note((("clean", (), ("self_reflection",), 18),)) == (
        "curves identical for 17 of 18 variants (all but self_reflection) to clean's")


def test_the_note_travels_to_a_helper_and_draws_the_same_figure(run, tmp_path, capsys):
    out, _ = run
    series = P._all_series(out)
    job = P.scenario_job(out, "again", series, tmp_path / "helper",
                         twins=(("base", (), (), 5),))
    assert job[5] == "every curve identical, for every variant and run, to base"
    msg = FW._encode(4, job, [key for key, _, _ in P.ROWS])
    assert json.loads(msg.split(b"\n", 1)[0])["note"] == job[5]
    (tmp_path / "helper").mkdir()
    FH._serve(io.BytesIO(msg))
    (answer,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    here = P.scenario_figure(*job[:4], tmp_path / "here", job[5])
    assert [Path(p).read_bytes() for p in answer["paths"]] == [p.read_bytes() for p in here]


# ------------------------------------------------------------------- poisoned entries

def test_the_poisoned_row_has_a_y_scale_per_panel_and_says_so(run):
    _, shots = run
    axes = shots["scenario_base"]["axes"]
    n_cols = 2                                    # baselines, one safeguard off
    rows = [axes[i:i + n_cols] for i in range(0, len(axes), n_cols)]
    assert len(rows) == len(P.ROWS)
    poisoned = rows[-1]
    assert poisoned[0]["ylabel"] == "poisoned entries\n(own y scale per panel)"
    for ax in poisoned:
        assert ax["ylim"] == pytest.approx(P._limits([ln["y"] for ln in _data_lines(ax)],
                                                     "linear"))
        assert ax["left_labels"]
    tops = [max(float(np.nanmax(ln["y"])) for ln in _data_lines(ax)) for ax in poisoned]
    assert tops[0] != tops[1] and poisoned[0]["ylim"] != poisoned[1]["ylim"]
    # the other rows keep one scale, labelled on the left only
    for row in rows[:-1]:
        assert row[0]["ylim"] == row[1]["ylim"]
        assert row[0]["left_labels"] and not row[1]["left_labels"]


def test_a_count_panel_spanning_orders_of_magnitude_is_log_above_one(run, tmp_path,
                                                                      monkeypatch):
    out, _ = run
    assert P._spread([np.zeros(5), np.array([0.0, 300.0]), np.array([2.0, 20.0])])
    assert not P._spread([np.zeros(5), np.array([0.0, 300.0])])     # zeros stay apart
    assert not P._spread([np.array([0.0, 300.0]), np.array([0.0, 31.0])])
    job = list(P.scenario_job(out, "base", P._all_series(out), tmp_path))
    # the naive loop's poisoned entries x 100 beside one entry of the naive loop with
    # the outcome gate: the baselines panel spans 0, 1 and hundreds
    job[2] = {**job[2], "poisoned": job[2]["poisoned"].with_columns(
        pl.when(pl.col("variant") == "naive_loop").then(pl.col("y") * 100)
        .when(pl.col("variant") == "naive_loop+outcome_gate").then(1.0)
        .otherwise(pl.col("y")).alias("y"))}
    shots = {}
    real = P.save
    monkeypatch.setattr(P, "save", lambda fig, stem, **kw: (
        shots.__setitem__(stem.name, fig.axes[-2:] and [
            (ax.get_yscale(), [t.get_text() for t in ax.texts]) for ax in fig.axes[-2:]]),
        real(fig, stem, **kw))[1])
    P.scenario_figure(*job)
    assert shots["scenario_base"] == [("symlog", ["log scale above 1",
                                                  "at 0: skill_loop, no_learning"]),
                                      ("linear", ["at 0: skill_loop"])]


def _panel(key, ys: dict, skip=frozenset(), same=frozenset()):
    """One panel drawn by ``P._draw_row`` and marked by ``P._mark_panel`` from constant
    curves (variant -> y per episode): its legend labels and the text on it."""
    import matplotlib.pyplot as plt

    frame = pl.concat([pl.DataFrame({"variant": v, "episode": np.arange(1, len(y) + 1),
                                     "estimate": np.asarray(y, float),
                                     "low": np.asarray(y, float),
                                     "high": np.asarray(y, float)}) for v, y in ys.items()])
    cfg = SimpleNamespace(store="skill")
    fig, ax = plt.subplots()
    try:
        lines, notes = P._draw_row(ax, key, frame, list(ys), cfg, set(same),
                                   dict.fromkeys(ys, "k"), set(skip))
        P._mark_panel(ax, key, lines, cfg.store, set(same), notes)
        return ax.get_legend_handles_labels()[1], [t.get_text() for t in ax.texts]
    finally:
        plt.close(fig)


def test_a_panel_names_the_variants_its_lines_hide():
    loop, gate, dating = "skill_loop", "skill_loop-no_outcome_gate", "naive_loop+dating"
    # poisoned entries: the loop and the naive loop + dating on 0, the loop without the
    # gate equal to the loop though its episodes differ elsewhere: dashed on it, named
    assert _panel("poisoned", {loop: [0, 0, 0], gate: [0, 0, 0], dating: [0, 0, 0]}) == (
        [loop, "no_outcome_gate", dating], ["none stored: every curve at 0"])
    assert _panel("poisoned", {loop: [0, 1, 2], gate: [0, 1, 2], dating: [0, 0, 0],
                               "no_learning": [0, 0, 0]}) == (
        [loop, "no_outcome_gate", dating, "no_learning"],
        ["at 0: naive_loop+dating, no_learning\n"
         "no_outcome_gate dashed, identical to skill_loop here"])
    # equal episodes are marked already, and a rate row names no zero
    assert _panel("success", {loop: [0, 1, 2], gate: [0, 1, 2], dating: [0, 0, 0]},
                  same={gate}) == ([loop, "no_outcome_gate (= loop)", dating], [])
    # a variant without a success has no tokens per success: named, not drawn
    assert _panel("tokens_per_success", {loop: [5, 6, 7], "no_learning": [9, 9, 9]},
                  skip={"no_learning"}) == (
        [loop], ["no_learning: no successes, no tokens per success"])


def test_never_succeeded_reads_the_success_curves(run):
    out, _ = run
    series = P._all_series(out)
    success = series["success"].filter(pl.col("scenario") == "base")
    tops = success.group_by("variant").agg(pl.col("y").max())
    assert P._never_succeeded(success) == set(
        tops.filter(pl.col("y") == 0)["variant"].to_list())
    assert P._never_succeeded(pl.DataFrame({"variant": ["a", "a", "b"],
                                            "y": [0.0, 0.0, 0.5]})) == {"a"}
    assert P._never_succeeded(None) == set()


def test_profiles_zoom_to_the_taus_where_a_curve_moves():
    taus = np.asarray(P.PROFILE_TAUS)
    steep = SimpleNamespace(estimate=np.where(taus < 0.9, 1.0, 0.0),
                            low=np.where(taus < 0.85, 1.0, 0.0),
                            high=np.where(taus < 0.95, 1.0, 0.0))
    # the curves are 1 up to 0.84 and 0 from 0.95: that span with 0.02 of margin (a
    # tenth of it, 0.011, is less)
    lo, hi = P._profile_span([steep])
    assert (round(lo, 3), round(hi, 3)) == (0.82, 0.97)
    wide = SimpleNamespace(estimate=np.clip(1 - taus, 0, 1), low=np.clip(1 - taus, 0, 1),
                           high=np.clip(1 - taus, 0, 1))
    assert P._profile_span([steep, wide]) is None


# ------------------------------------------------------------------------- crossover

def test_a_crossover_panel_spanning_an_order_of_magnitude_is_log():
    assert RP._log_worthy([[20_000.0, 30_000.0], [650_000.0, 800_000.0]])
    assert not RP._log_worthy([[200_000.0, 300_000.0], [650_000.0, 800_000.0]])
    assert not RP._log_worthy([[0.0, 30_000.0], [650_000.0, 800_000.0]])   # 0: no log
    assert not RP._log_worthy([[0.02, 0.03], [0.4, 0.5]])                 # a rate

def test_the_crossover_map_speaks_words_with_units(run):
    _, shots = run
    (ax,) = shots["crossover"]["axes"]
    assert ax["ylabel"] == "success rate, episodes 31-60"
    assert ax["xlabel"] == "false success rate (probability),\nleast to most severe"
    # without decoy steps the false success rate changes nothing a run does
    assert ax["title"] == ("learning from failure\n"
                           "flat: at both settings, each variant's runs identical")
    assert ax["yscale"] == "linear"
    texts = [t for t, _ in ax["yticks"]]     # plain digits, no offset text
    assert "1" in texts and all(RP.thousands(float(t)) == t for t in texts)
    assert shots["crossover"]["legends"] == [["no_learning", "naive_loop", "skill_loop",
                                              "naive_loop+outcome_gate"]]


def test_crossover_ticks_are_plain_numbers():
    assert [RP.thousands(x) for x in (800000.0, 1250.0, 0.25, 0.0, 40.0)] == [
        "800,000", "1,250", "0.25", "0", "40"]


def test_metric_words_name_the_window_in_episodes():
    cfg = SimpleNamespace(episodes=1000, analysis={"late_from": 501, "tokens_window": 200,
                                                   "drift_episodes": 50,
                                                   "final_window": 100})
    assert [RP.metric_words(m, cfg) for m in (
        "late_success", "late_tokens_per_success", "incidents_per_1000",
        "drift_calls_per_success", "drift_success_next100", "some_new_metric")] == [
        "success rate, episodes 501-1,000", "tokens per success, last 200 episodes",
        "incidents per 1,000 episodes",
        "tool calls per success, drifted family, 50 episodes from the drift",
        "drifted family's success rate, next 100 arrivals", "some new metric"]


def test_the_crossover_map_draws_the_literature_baselines(tmp_path, monkeypatch):
    """A baseline run beside the naive loop is a curve of its own on every panel, in its
    own colour, at its mean over runs."""
    from dyna.experiment.kinds.agent_tasks.config import Sweep

    shots = {}
    real = RP.save
    monkeypatch.setattr(RP, "save", lambda fig, stem, **kw: (
        shots.__setitem__(stem.name, _shot(fig)), real(fig, stem, **kw))[1])
    sweeps = (Sweep("volume", "n_paraphrases", (1, 8), {}, "late_success", "greater"),)
    variants = ("no_learning", "naive_loop", "skill_loop", "reflexion", "expel")
    level = {"no_learning": 0.2, "naive_loop": 0.5, "skill_loop": 0.9, "reflexion": 0.3,
             "expel": 0.7}
    runs = pl.DataFrame([{"scenario": f"volume-{k}", "variant": v, "run": r,
                          "late_success": level[v] - 0.01 * k + 0.01 * r}
                         for k in (1, 8) for v in variants for r in range(3)])
    cfg = SimpleNamespace(name="map", store="skill", seed=0, runs=3, episodes=100,
                          variants=variants, sweeps=sweeps, analysis={"late_from": 51})
    RP.crossover_figure(SimpleNamespace(config=cfg, tables={"runs": runs}), tmp_path)
    (ax,) = shots["crossover"]["axes"]
    curves = {ln["label"]: ln for ln in ax["lines"] if ln["label"] in variants}
    assert list(curves) == list(variants)
    colors = figure_style.variant_colors(variants, "skill")
    for v in ("reflexion", "expel"):
        assert curves[v]["color"] == colors[v]
        assert curves[v]["y"] == pytest.approx([level[v] - 0.01 + 0.01, level[v] - 0.08 + 0.01])
