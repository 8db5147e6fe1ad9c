"""The agent-task figures mark what a reader could miss, tested on the figure objects: a
crossover curve lying on another is dashed on top of it and named under its panel, a
scenario figure's curve lying on any other is dashed on top of it and named in its panel,
titles break only between phrases, and a variant has the colour of its name in every
figure (a scenario figure, the crossover map, an ablation's figure)."""

from types import SimpleNamespace

import polars as pl
import pytest

from dyna.experiment.backends import InProcessBackend
from dyna.experiment.kinds.agent_tasks import figure_style
from dyna.experiment.kinds.agent_tasks import plots as P
from dyna.experiment.kinds.agent_tasks import run_plots as RP
from dyna.experiment.plotting import phrase_lines
from dyna.experiment.registry import parse_experiment
from dyna.experiment.runner import run_experiment

SWEEP = {"name": "learning_from_failure", "knob": "false_success_rate",
         "values": [0.0, 0.25, 0.5], "metric": "late_success", "better": "greater",
         "safeguards": ["outcome_gate", "dating"]}


def _figures(monkeypatch, *modules) -> dict:
    """From now on, the Figure each of ``modules`` saves, by file stem, laid out as in
    its PNG."""
    figs = {}
    for module in modules:
        def save(fig, stem, *args, _real=module.save, **kw):
            fig.canvas.draw()
            figs[stem.name] = fig
            paths = _real(fig, stem, *args, **kw)
            fig.clear = lambda *a, **k: None      # keep the artists for the test
            return paths
        monkeypatch.setattr(module, "save", save)
    return figs


# ----------------------------------------------------------------- coinciding curves

def _sweep_output(values: dict) -> SimpleNamespace:
    """An output whose runs table holds ``values`` (variant -> late_success at each of
    :data:`SWEEP`'s three points, the same in both runs)."""
    cfg = parse_experiment({"kind": "agent_tasks", "name": "cross", "runs": 2, "episodes": 40,
                            "seed": 0, "store": "skill", "variants": list(values),
                            "sweeps": [SWEEP], "analysis": {"late_from": 21}})
    rows = [{"scenario": sc, "variant": v, "run": r, "late_success": ys[i] + 0.001 * r}
            for v, ys in values.items() for i, (sc, _) in enumerate(cfg.sweeps[0].points())
            for r in range(2)]
    return SimpleNamespace(config=cfg, tables={"runs": pl.DataFrame(rows)})


def test_a_crossover_curve_on_another_is_dashed_on_top_and_named(tmp_path, monkeypatch):
    figs = _figures(monkeypatch, RP)
    out = _sweep_output({"no_learning": [0.2, 0.2, 0.2], "naive_loop": [0.6, 0.5, 0.4],
                         "skill_loop": [0.9, 0.9, 0.85],
                         "naive_loop+outcome_gate": [0.6, 0.5, 0.4],
                         "naive_loop+dating": [0.9, 0.6, 0.3]})
    RP.crossover_figure(out, tmp_path)
    (ax,) = figs["crossover"].axes
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert {v: ln.get_linestyle() for v, ln in lines.items()} == {
        "no_learning": "--", "naive_loop": "-", "skill_loop": "-",
        "naive_loop+outcome_gate": "--", "naive_loop+dating": "-"}
    # on top of the curve it hides, in dashes 3 points long with gaps for the curve under
    gate, naive = lines["naive_loop+outcome_gate"], lines["naive_loop"]
    assert gate.get_zorder() == pytest.approx(naive.get_zorder() + 0.1)
    assert gate._unscaled_dash_pattern == (0.0, (3.0, 3.0))
    (note,) = ax.texts
    assert note.get_text() == ("dashed, on the curve under it:\n"
                               "naive_loop+outcome_gate, identical to naive_loop here")
    # under the x label, inside the figure, above the legend
    fig = figs["crossover"]
    fig.canvas.draw()                              # the PNG's layout, at the screen's dpi
    renderer = fig.canvas.get_renderer()
    box = note.get_window_extent(renderer)
    assert box.y1 < ax.xaxis.label.get_window_extent(renderer).y0
    assert box.y0 > fig.legends[0].get_window_extent(renderer).y1
    # the figure's legend keeps every variant solid but no_learning
    assert [h.get_linestyle() for h in fig.legends[0].legend_handles] == [
        "--", "-", "-", "-", "-"]


def test_a_scenario_curve_on_any_other_is_dashed_on_top_and_named(tmp_path, monkeypatch):
    figs = _figures(monkeypatch, P)
    # in 20 episodes the skill loop learns nothing the success row shows (on no_learning's
    # curve), and dating changes nothing for the naive loop
    out = small_run(tmp_path, ["no_learning", "naive_loop", "skill_loop",
                               "naive_loop+outcome_gate", "naive_loop+dating"], sweeps=False)
    job = P.scenario_job(out, "base", P._all_series(out), tmp_path / "plots")
    assert job[3] == set()                     # no variant's episodes equal the loop's
    P.scenario_figure(*job)
    fig = figs["scenario_base"]
    success, tokens, poisoned = fig.axes[0], fig.axes[1], fig.axes[-1]

    def styles(ax):
        return {ln.get_label(): (ln._unscaled_dash_pattern, ln.get_zorder())
                for ln in ax.get_lines() if not ln.get_label().startswith("_")}

    solid = (0, None)
    # each dashed on top of the curve it lies on, its dashes 3 points long
    assert styles(success) == {"skill_loop": (solid, 3.0),
                               "no_learning": ((0.0, (3.0, 3.0)), 3.1),
                               "naive_loop": (solid, 2.0),
                               "naive_loop+outcome_gate": (solid, 2.0),
                               "naive_loop+dating": ((0.0, (3.0, 3.0)), 2.1)}
    assert [t.get_text() for t in success.texts] == [
        "no_learning dashed, identical to skill_loop here\n"
        "naive_loop+dating dashed, identical to naive_loop here"]
    # tokens per success set no_learning apart from the loop: solid there, not named
    assert styles(tokens)["no_learning"] == (solid, 2.0)
    assert [t.get_text() for t in tokens.texts] == [
        "naive_loop+dating dashed, identical to naive_loop here"]
    # three curves at 0: the two on the first dashed side by side, named at 0 once
    assert {v: s[0] for v, s in styles(poisoned).items()} == {
        "skill_loop": solid, "no_learning": (0.0, (3.0, 6.0)), "naive_loop": solid,
        "naive_loop+outcome_gate": (6.0, (3.0, 6.0)), "naive_loop+dating": (0.0, (3.0, 3.0))}
    assert [t.get_text() for t in poisoned.texts] == [
        "at 0: skill_loop, no_learning, naive_loop+outcome_gate\n"
        "naive_loop+dating dashed, identical to naive_loop here"]
    # the legend keys stay solid: a curve is dashed only where it lies on another
    legend = poisoned.get_legend()
    assert [t.get_text() for t in legend.get_texts()][:5] == [
        "skill_loop", "no_learning", "naive_loop", "naive_loop+outcome_gate",
        "naive_loop+dating"]
    assert [h.get_linestyle() for h in legend.legend_handles][:5] == ["-"] * 5


def test_a_crossover_curve_crossing_another_is_left_solid(tmp_path, monkeypatch):
    figs = _figures(monkeypatch, RP)
    # on the naive loop at two of three settings, visible at the third
    out = _sweep_output({"naive_loop": [0.6, 0.5, 0.4],
                         "naive_loop+outcome_gate": [0.6, 0.5, 0.8]})
    RP.crossover_figure(out, tmp_path)
    (ax,) = figs["crossover"].axes
    assert [ln.get_linestyle() for ln in ax.get_lines()] == ["-", "-"]
    assert len(ax.texts) == 0


# ------------------------------------------------------------------------- titles

def test_phrase_lines_break_at_clauses_then_items_never_inside_brackets():
    text = "one fish, two fish (red, blue); three fish, four"
    assert phrase_lines(text, 60) == text
    assert phrase_lines(text, 40).split("\n") == ["one fish, two fish (red, blue)",
                                                  "three fish, four"]
    # "; " dropped at a break, ", " kept as a comma; never inside the brackets
    assert phrase_lines(text, 20).split("\n") == ["one fish,", "two fish (red, blue)",
                                                  "three fish, four"]
    assert phrase_lines('a "b, c", dd', 10).split("\n") == ['a "b, c",', "dd"]
    # a part without a separator wider than the line: wrapped at its spaces
    assert phrase_lines("one two three four; x", 9) == "one two\nthree\nfour; x"


def test_a_scenario_title_breaks_between_phrases(tmp_path, monkeypatch):
    figs = _figures(monkeypatch, P)
    twins = P._twin_note(tuple((f"learning_from_failure-0.{k}", (), ("memory_loop-self_gate",),
                                15) for k in (0, 1, 5)))
    assert twins == ("curves identical for 14 of 15 variants (all but memory_loop-self_gate) "
                     "to learning_from_failure-0.0's, learning_from_failure-0.1's and "
                     "learning_from_failure-0.5's")
    out = small_run(tmp_path, ["no_learning", "skill_loop", "skill_loop-no_outcome_gate"],
                    sweeps=False)
    job = P.scenario_job(out, "base", P._all_series(out), tmp_path / "plots")
    P.scenario_figure(*job[:5], twins)
    title = figs["scenario_base"].get_suptitle().split("\n")
    # two columns, 6.6 inches: lines of 85 characters at most, broken at "; ", at ", ",
    # and a clause longer than a line before the list it ends with
    assert title == [
        "marks, scenario base",
        "curves identical for 14 of 15 variants (all but memory_loop-self_gate) to",
        "learning_from_failure-0.0's,",
        "learning_from_failure-0.1's and learning_from_failure-0.5's",
        "1 run (no interval); success and tokens rolling over 5 episodes",
        "competence: solid, posterior mean (empirical-Bayes prior), band 95% credible interval",
        "dashed, true success over the last 5 episodes (family 0: 5 arrivals)"]


# -------------------------------------------------------------------------- colours

def small_run(tmp_path, variants, sweeps=True):
    """A one-run experiment of ``variants`` (20 episodes, one scenario ``base``; with
    ``sweeps`` also :data:`SWEEP`'s three scenarios), its output loaded."""
    from dyna.experiment.runner import load_output

    data = {"kind": "agent_tasks", "name": "marks", "runs": 1, "episodes": 20, "seed": 3,
            "store": "skill", "variants": variants,
            "env": {"n_families": 2, "max_steps": 12}, "scenarios": [{"name": "base"}],
            "analysis": {"final_window": 5, "n_resamples": 50, "window": 5,
                         "late_from": 11}}
    if sweeps:
        data["sweeps"] = [SWEEP]
    folder = run_experiment(parse_experiment(data), tmp_path / "_".join(variants[:2]),
                            backend=InProcessBackend(), progress=False)
    return load_output(folder)


def _line_colours(fig, store="skill") -> dict:
    """Variant -> the set of colours its lines are drawn in, over the figure's axes (a
    label is a variant's short name, perhaps followed by a note in brackets)."""
    seen = {}
    for ax in fig.axes:
        for ln in ax.get_lines():
            name = ln.get_label().split(" (")[0]
            if not name.startswith("_"):
                seen.setdefault(name, set()).add(ln.get_color())
    return seen


def test_a_variant_has_its_name_s_colour_in_every_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNA_RENDER", "serial")
    figs = _figures(monkeypatch, P, RP)
    grid = small_run(tmp_path, ["no_learning", "naive_loop", "skill_loop",
                                "skill_loop-no_outcome_gate", "naive_loop+outcome_gate",
                                "naive_loop+dating"])
    P.draw_plots(grid, tmp_path / "grid", processes=1)
    scenario, crossover = _line_colours(figs["scenario_base"]), _line_colours(
        figs["crossover"])
    ablation = small_run(tmp_path, ["skill_loop", "skill_loop-no_dating",
                                    "skill_loop-no_outcome_gate", "dyna_q"], sweeps=False)
    P.draw_plots(ablation, tmp_path / "ablation", processes=1)
    abl = _line_colours(figs["scenario_base"])
    assert scenario == {"skill_loop": {"#000000"}, "no_learning": {"#7f7f7f"},
                        "naive_loop": {"#d62728"}, "naive_loop+outcome_gate": {"#1fb57a"},
                        "naive_loop+dating": {"#ff4000"}, "no_outcome_gate": {"#2ca02c"}}
    assert crossover == {v: scenario[v] for v in ("no_learning", "naive_loop", "skill_loop",
                                                  "naive_loop+outcome_gate",
                                                  "naive_loop+dating")}
    assert abl == {"skill_loop": {"#000000"}, "no_dating": {"#f781bf"},
                   "no_outcome_gate": {"#2ca02c"}, "dyna_q": {"#1f77b4"}}
    # each is the name's fixed colour, whatever else the figure holds
    for got in (scenario, crossover, abl):
        assert got == {short: {figure_style.fixed_color(v, "skill")} for short, v in (
            (figure_style.short_name(v, "skill"), v) for v in (
                *grid.config.variants, *ablation.config.variants)) if short in got}
