"""The escalation kind's figures, tested on the figure objects: policies whose curves
coincide drawn once, in black with each member's colour dashed on it, under one legend entry
naming them all; a colour fixed by each policy's name in every file and never meaning
another; the random score's line under the curves; the cost unit; and the competence
panels' axis labels."""

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import dyna.experiment.kinds.escalation.plots as ep
from dyna.experiment.registry import parse_experiment


def test_identical_groups_compare_every_array_exactly():
    x = np.array([1.0, 2.0, 3.0])
    nan = np.full(3, np.nan)
    curves = {"never": (x, np.array([1.0, 2.0, 3.0]), nan, nan),
              "mean": (x, np.array([0.5, 0.5, 0.5]), nan, nan),
              "chow": (x, np.array([0.5, 0.5, 0.5]), nan, nan),
              # equal estimate, another band: a different curve
              "preset": (x, np.array([0.5, 0.5, 0.5]), x, x),
              "always": (x, np.array([1.0, 2.0, 3.0]), nan, nan),
              # 1e-15 apart: not equal
              "thompson": (x, np.array([0.5, 0.5, 0.5 + 1e-15]), nan, nan)}
    assert ep.identical_groups(curves) == [["never", "always"], ["mean", "chow"], ["preset"],
                                           ["thompson"]]


def test_group_label_names_every_policy_and_keeps_the_note_whole():
    assert ep.group_label(["mean"]) == "mean"
    assert ep.group_label(["mean", "preset", "chow"]) == "mean, preset, chow (identical here)"
    assert ep.group_label(["always", "lower_bound", "mean_min10"]) == \
        "always, lower_bound, mean_min10\n(identical here)"
    assert ep.group_label(["never", "always", "mean", "lower_bound", "preset", "mean_min10",
                           "chow", "mean_eps05", "thompson"]) == (
        "never, always, mean, lower_bound,\npreset, mean_min10, chow,\n"
        "mean_eps05, thompson\n(identical here)")


def _config(names):
    return parse_experiment({
        "kind": "escalation", "name": "colours", "runs": 2, "feedback": ["censored", "full"],
        "costs": {"c_escalate": 1.0, "p_star": [0.5, 0.9]},
        "scenarios": [{"name": "flat", "rates": [0.3, 0.9], "steps": 50}],
        "variants": [{"name": n, "rule": "mean"} for n in names],
        "analysis": {"n_resamples": 200, "svg": False, "checkpoints": 5}})


SYNTHETIC = ["never", "always", "mean", "lower_bound", "preset", "mean_min10", "chow",
             "mean_eps05", "mean_optimistic", "thompson", "thompson_d0.99", "mean_eps05_d0.99"]
SWEBENCH = ["never", "always", "mean", "lower_bound", "preset", "mean_min10", "chow",
            "mean_eps05", "thompson", "thompson_d0.99"]


def test_a_policy_has_one_colour_in_every_file():
    synthetic = ep.variant_colors(SimpleNamespace(config=_config(SYNTHETIC)))
    swebench = ep.variant_colors(SimpleNamespace(config=_config(SWEBENCH)))
    # the shipped files' policies: the documented mapping, whatever the file and order
    assert synthetic == {n: ep.POLICY_COLORS[n] for n in SYNTHETIC}
    assert swebench == {n: ep.POLICY_COLORS[n] for n in SWEBENCH}
    assert synthetic["mean"] == swebench["mean"] == "#1f77b4"
    assert len(set(synthetic.values())) == 12
    # names outside the mapping: a colour of their own, the same in either order
    one = ep.variant_colors(SimpleNamespace(config=_config(["mean", "mine", "yours"])))
    two = ep.variant_colors(SimpleNamespace(config=_config(["yours", "mine", "never"])))
    assert one["mine"] == two["mine"] and one["yours"] == two["yours"]
    assert one["mine"] in ep.OTHER_COLORS and one["mine"] != one["yours"]
    # more unknown names than the fallback colours: the first 14 still distinct
    many = ep.variant_colors(SimpleNamespace(config=_config([f"p{i}" for i in range(14)])))
    assert len(set(many.values())) == 14


def _grid_output():
    """An output of :func:`_config` (never, mean, chow, thompson at p* 0.5 and 0.9) whose
    runs and risk-coverage tables are hand-made: under censored feedback mean and chow cost
    the same in every run, under full feedback mean, chow and thompson do."""
    cfg = _config(["never", "mean", "chow", "thompson"])
    rows, cover = [], []
    for fb in ("censored", "full"):
        for st in cfg.settings():
            for name in ("never", "mean", "chow", "thompson"):
                for run in range(2):
                    r = {"never": 5.0, "mean": 1.0, "chow": 1.0, "thompson": 2.0}[name]
                    if fb == "full" and name == "thompson":
                        r = 1.0
                    r += 0.1 * run + st.p_star
                    rows.append({"variant": name, "cost_setting": st.name, "scenario": "flat",
                                 "system": "", "feedback": fb, "p_star": st.p_star,
                                 "run": run, "steps": 10, "regret_type": 10 * r,
                                 "escalation_rate": 1.0 if name == "thompson" else 0.5,
                                 "agent_failure_rate": 0.3, "aurc_type_oracle": 0.2})
                    for k, c in enumerate((0.5, 1.0)):
                        risk = 0.3 if name in ("never", "thompson") and fb == "censored" \
                            else 0.1 * (k + 1)
                        cover.append({"variant": name, "cost_setting": st.name,
                                      "scenario": "flat", "system": "", "feedback": fb,
                                      "run": run,
                                      "coverage": c, "risk": risk})
    return SimpleNamespace(config=cfg, tables={"runs": pl.DataFrame(rows),
                                               "risk_coverage": pl.DataFrame(cover)})


@pytest.fixture
def figures(monkeypatch):
    """Per saved figure stem, per visible axes: its lines (label, colour), legend texts and
    axis labels, and whether its x tick labels show."""
    shots = {}

    def save(fig, stem, svg=True):
        fig.canvas.draw()
        shots[stem.name] = [
            {"lines": [(ln.get_label(), ln.get_color()) for ln in ax.get_lines()],
             "zorders": {ln.get_label(): ln.get_zorder() for ln in ax.get_lines()},
             "random": next(((ln.get_zorder(), ln.get_linewidth()) for ln in ax.get_lines()
                             if ln.get_label().startswith("random score")), None),
             "styles": {ln.get_label(): (ln.get_zorder(), ln._unscaled_dash_pattern)
                        for ln in ax.get_lines()},
             "suptitle": fig._suptitle.get_text() if fig._suptitle else None,
             "legend": [t.get_text() for t in ax.get_legend().get_texts()]
             if ax.get_legend() else None,
             "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
             "xticklabels": any(t.get_visible() and t.get_text()
                                for t in ax.get_xticklabels())}
            for ax in fig.axes if ax.get_visible()]
        return []

    monkeypatch.setattr(ep, "save", save)
    return shots


def _policy_lines(ax) -> list:
    """The lines of a recorded axes drawn in a policy's colour (not a group's black):
    (label, colour)."""
    return [(label, c) for label, c in ax["lines"] if c != ep.GROUP_COLOR]


def test_cost_grid_draws_identical_policies_once_under_one_entry(figures, tmp_path):
    out = _grid_output()
    ep.plot_cost_grid(out, tmp_path)
    censored, full = figures["cost_grid_flat"]
    red, blue, brown, cyan = (ep.POLICY_COLORS[n] for n in ("never", "mean", "chow",
                                                             "thompson"))
    # a group: a black line named after every member, a dash of each member's colour on
    # it (unlabelled), black markers on top
    assert censored["lines"] == [("never", red), ("mean, chow (identical here)", "#000000"),
                                 ("_mean", blue), ("_chow", brown), ("_markers", "#000000"),
                                 ("thompson", cyan)]
    assert full["lines"] == [("never", red),
                             ("mean, chow, thompson\n(identical here)", "#000000"),
                             ("_mean", blue), ("_chow", brown), ("_thompson", cyan),
                             ("_markers", "#000000")]
    # a colour always means one policy: in both panels every coloured line is that
    # policy's, alone or as its dashes on a group's line
    for ax in (censored, full):
        assert len(_policy_lines(ax)) == 4
        for label, colour in _policy_lines(ax):
            assert ep.POLICY_COLORS[label.lstrip("_")] == colour
    # as many lines as legend entries, and every policy named once in each legend
    for ax in (censored, full):
        assert ax["legend"] == [label for label, _ in ax["lines"]
                                if not label.startswith("_")]
        named = ", ".join(ax["legend"]).replace("\n", " ").replace(" (identical here)", "")
        assert sorted(named.split(", ")) == ["chow", "mean", "never", "thompson"]
    assert censored["ylabel"] == "regret per task vs the type oracle (cost units, symlog)"


def test_a_group_line_dashes_each_members_colour_in_turn():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    x = np.array([0.0, 1.0, 2.0])
    colours = {"mean": "#1f77b4", "chow": "#8c564b", "thompson": "#17becf"}
    line = ep.draw_group(ax, x, x, ["mean", "chow", "thompson"], colours)
    outline, *stripes = ax.get_lines()
    assert outline is line and isinstance(line, ep.GroupLine)
    assert (line.get_color(), line.get_linewidth()) == ("#000000", 3.1)
    assert line.member_colors == ("#1f77b4", "#8c564b", "#17becf")
    # 4-point dashes every 12 points, at offsets 0, 8 and 4: mean on [0, 4), chow on
    # [4, 8), thompson on [8, 12) of each period
    assert [ln.get_color() for ln in stripes] == ["#1f77b4", "#8c564b", "#17becf"]
    assert [ln._unscaled_dash_pattern for ln in stripes] == [
        (0.0, (4.0, 8.0)), (8.0, (4.0, 8.0)), (4.0, (4.0, 8.0))]
    assert all(ln.get_zorder() == line.get_zorder() for ln in stripes)
    assert all(ln.get_linewidth() == 1.5 for ln in stripes)


def test_a_group_legend_entry_shows_its_members_colours():
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend
    from matplotlib.transforms import IdentityTransform

    ax = Figure().subplots()
    colours = {"never": "#d62728", "always": "#7f7f7f"}
    line = ep.draw_group(ax, [0, 1], [0, 1], ["never", "always"], colours)
    leg = ax.legend()
    assert [t.get_text() for t in leg.get_texts()] == ["never, always (identical here)"]
    handler = Legend.get_legend_handler(leg.get_legend_handler_map(), line)
    assert isinstance(handler, ep.GroupHandler)
    artists = handler.create_artists(leg, line, 0.0, 0.0, 20.0, 7.0, 7.0,
                                     IdentityTransform())
    # the black outline, then one segment per member, side by side along it
    assert [a.get_color() for a in artists] == ["#000000", "#d62728", "#7f7f7f"]
    (x0, x1), (x2, x3) = (tuple(a.get_xdata()) for a in artists[1:])
    assert x0 < x1 == x2 < x3 and x3 - x2 == x1 - x0


def test_risk_coverage_groups_per_feedback_mode(figures, tmp_path):
    ep.plot_risk_coverage(_grid_output(), tmp_path)
    censored, full = figures["risk_coverage_flat"]
    assert censored["legend"] == ["never, thompson (identical here)",
                                  "mean, chow (identical here)",
                                  "random score (failure rate)\nthompson escalates every "
                                  "task: its score\nnever moves, so it ranks at random"]
    assert full["legend"] == ["never, mean, chow, thompson\n(identical here)",
                              "random score (failure rate)"]
    assert full["lines"][0] == ("never, mean, chow, thompson\n(identical here)", "#000000")
    # the random score's line lies under the curves, thinner than them
    assert censored["random"] == (1.5, 1.0)
    assert censored["zorders"]["never, thompson (identical here)"] == 2.0


def test_costs_in_usd_only_where_the_logged_usd_cost_is_added_unscaled(figures, tmp_path):
    import dataclasses

    out = _grid_output()
    assert ep.cost_unit(out.config) == "cost units"                 # synthetic stream
    usd = dataclasses.replace(out.config, costs={**out.config.costs, "act_cost": "cost_usd"})
    assert ep.cost_unit(usd) == "USD"
    scaled = dataclasses.replace(usd, costs={**usd.costs, "act_cost_scale": 0.5})
    assert ep.cost_unit(scaled) == "cost units"
    ep.plot_cost_grid(SimpleNamespace(config=usd, tables=out.tables), tmp_path)
    assert [ax["ylabel"] for ax in figures["cost_grid_flat"]] == [
        "regret per task vs the type oracle (USD, symlog)"] * 2


def test_the_swebench_files_are_in_usd():
    from pathlib import Path

    from dyna.experiment.registry import load_experiment

    root = Path(__file__).resolve().parents[1] / "experiments"
    units = {name: ep.cost_unit(load_experiment(root / f"{name}.toml"))
             for name in ("escalation_swebench", "escalation_swebench_costs",
                          "escalation_policies")}
    assert units == {"escalation_swebench": "USD", "escalation_swebench_costs": "USD",
                     "escalation_policies": "cost units"}


def test_competence_panels_have_words_and_units_on_both_axes(figures, tmp_path):
    from dyna.experiment.runner import run_experiment

    data = {"kind": "escalation", "name": "comp", "runs": 1, "feedback": ["full"],
            "scenarios": [{"name": "five", "rates": [0.1, 0.3, 0.5, 0.7, 0.9],
                           "steps": 60}],
            "variants": [{"name": "thompson", "rule": "thompson"}],
            "analysis": {"n_resamples": 200, "svg": False, "checkpoints": 5,
                         "competence_variant": "thompson"}}
    out = run_experiment(parse_experiment(data), tmp_path / "o", progress=False)
    assert out.name == "o"
    axes = figures["competence_five_full"]
    # 5 types in a 2 x 4 grid, 3 panels hidden: panels 0-3 on the first row, 4 below
    assert [ax["ylabel"] for ax in axes] == [ep.COMPETENCE_Y, "", "", "", ep.COMPETENCE_Y]
    assert ep.COMPETENCE_Y == "success probability (0-1)"
    # each column's lowest panel: its x label and tick labels (the shared axis hides those
    # of the first row, and the row below is empty in columns 2-4)
    assert [ax["xlabel"] for ax in axes] == ["", *[ep.COMPETENCE_X] * 4]
    assert [ax["xticklabels"] for ax in axes] == [False, True, True, True, True]
    assert ep.COMPETENCE_X == "tasks seen (count)"


def test_no_two_policies_of_a_shipped_file_look_alike():
    assert ep.delta_e("#000000", "#ffffff") == pytest.approx(100.0, abs=0.01)
    # the dark purples a reader could not tell apart where they crossed
    assert ep.delta_e("#393b79", "#7b4173") == pytest.approx(24.8, abs=0.05)
    for names in (SYNTHETIC, SWEBENCH):
        colours = ep.variant_colors(SimpleNamespace(config=_config(names)))
        gaps = {(a, b): ep.delta_e(colours[a], colours[b])
                for i, a in enumerate(names) for b in names[i + 1:]}
        closest = min(gaps, key=gaps.get)
        assert gaps[closest] >= 25.0, (closest, gaps[closest])
    assert (ep.POLICY_COLORS["thompson_d0.99"], ep.POLICY_COLORS["mean_eps05_d0.99"]) == (
        "#0b5345", "#e6ab02")


def test_captions_say_how_many_runs_and_systems():
    def out(runs):
        return SimpleNamespace(config=SimpleNamespace(
            runs=runs, analysis=SimpleNamespace(confidence=0.95)))

    assert ep.band_caption(out(2), 1) == "mean over 2 runs, 95% bootstrap band over runs"
    assert ep.band_caption(out(10), 24) == (
        "mean over 10 runs and 24 systems, 95% bootstrap band over runs (of each run's "
        "mean over systems)")
    assert ep.band_caption(out(1), 1) == "1 run (no interval)"
    one = pl.DataFrame({"system": ["a", "a"]})
    many = pl.DataFrame({"system": ["a", "b", "c"]})
    assert ep.pooled_caption(out(2), one) == "mean over 2 runs"
    assert ep.pooled_caption(out(10), many) == "mean over 10 runs and 3 systems (pooled)"


def test_risk_coverage_says_what_its_curves_are_and_why_some_lie_on_random(figures,
                                                                         tmp_path):
    ep.plot_risk_coverage(_grid_output(), tmp_path)
    censored, full = figures["risk_coverage_flat"]
    assert censored["suptitle"] == ("risk-coverage: flat, p*=0.5; score: posterior mean of "
                                    "the task's type at arrival\nmean over 2 runs")
    # full feedback: escalating still reveals the outcome, the score moves
    assert full["legend"][-1] == "random score (failure rate)"
    assert ep.random_label(["always", "lower_bound"]) == (
        "random score (failure rate)\nalways, lower_bound escalate every task:\n"
        "their score never moves, so they rank at\nrandom")
    runs = pl.DataFrame({"variant": ["always", "always", "mean"], "escalation_rate":
                         [1.0, 1.0, 0.4]})
    assert ep.escalate_all(runs, "censored") == ["always"]
    assert ep.escalate_all(runs, "full") == []


def test_cost_grid_names_p_star_as_a_threshold_and_counts_runs(figures, tmp_path):
    ep.plot_cost_grid(_grid_output(), tmp_path)
    censored, _ = figures["cost_grid_flat"]
    assert censored["xlabel"] == ("risk threshold p* (each sets the failure cost "
                                  "c_escalate / (1 - p*))")
    assert censored["suptitle"] == ("regret by cost setting: flat; mean over 2 runs, 95% "
                                    "bootstrap band over runs\ny: symmetric log, linear "
                                    "within +-0.01")


def test_a_regret_curve_near_another_is_dashed_on_top_and_named(figures, tmp_path):
    out = _grid_output()
    steps = np.arange(1, 21)
    ys = {"never": 100.0 * steps, "mean": 1.0 * steps,
          # a hundredth above mean: within a line width everywhere
          "chow": steps + 0.01,
          # on mean for the first 12 tasks, then far above it
          "thompson": np.where(steps <= 12, steps, 30.0 * steps)}
    rows = [{"variant": n, "cost_setting": st.name, "scenario": "flat", "system": "",
             "feedback": "full", "run": run, "step": int(t), "cum_pseudo_regret": float(y)}
            for st in out.config.settings() for n, ys_n in ys.items() for run in range(2)
            for t, y in zip(steps, ys_n)]
    out.tables["curves"] = pl.DataFrame(rows)
    ep.plot_regret(out, tmp_path)
    linear, log, *_ = figures["regret_flat_full"]
    chow = "chow\n(within a line width of mean; dashed)"
    thompson = "thompson\n(on mean at 12 of 20 points; dashed)"
    assert log["legend"] == ["never", "mean", chow, thompson]
    assert linear["legend"] is None
    # side by side on mean: 3-point dashes every 9 points, one above mean's zorder
    for ax in (linear, log):
        assert ax["styles"][chow] == (2.1, (0.0, (3.0, 6.0)))
        assert ax["styles"][thompson] == (2.1, (6.0, (3.0, 6.0)))
        assert ax["styles"]["mean"] == (2, (0, None))
    assert log["suptitle"].startswith("regret vs the type oracle (cost units): flat, full "
                                      "feedback\nmean over 2 runs, 95% bootstrap band")
