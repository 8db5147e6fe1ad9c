"""Kind ``tabular``: report.md, a readable summary of an output folder.

Sections: the headline (:mod:`.headline`), the setup (config hash, seed, runs,
environments as resolved, backend, timings), each variant's hyper-parameters, each
variant's final performance with a bootstrap confidence interval, the experiment-specific
checks named in ``analysis.checks``, and links to the plots.

Checks (Sutton & Barto, *Reinforcement Learning: An Introduction*, 2nd ed., 2018):

``figure_8_2``
    Section 8.2, Figure 8.2: mean steps in episode 2 per variant (several hundred for
    n = 0, under ~60 for n = 50 in the book) and the mean over the last ``final_episodes``
    episodes (about 14 optimal steps plus epsilon-exploration overhead).
``blocking`` / ``shortcut``
    Section 8.3, Figures 8.4/8.5: final cumulative reward of each variant, Dyna-Q+ minus
    Dyna-Q with a bootstrap interval; for ``shortcut`` also whether each run found the
    shortcut -- judged from the reward over the final window: more goal visits than any
    policy restricted to the old optimal path length could collect is proof of the shortcut.
``prioritized_sweeping``
    Section 8.4, Example 8.4: updates until an optimal path is found per maze size, and the
    ratio Dyna-Q / prioritized sweeping (the book reports a factor of about 5 to 10).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dyna.experiment.kinds.tabular.headline import headline
from dyna.experiment.kinds.tabular.reference import ALPHA, applies
from dyna.experiment.kinds.tabular.selection import groups as _groups
from dyna.experiment.kinds.tabular.selection import per_run as _per_run
from dyna.experiment.kinds.tabular.selection import point_label as _point_label
from dyna.experiment.kinds.tabular.selection import select as _select
from dyna.experiment.kinds.tabular.selection import stat_options as _opts
from dyna.experiment.reporting import (ci, fmt, label, md_table, plots_section, short_hash,
                                       write_report_file)
from dyna.experiment.stats import diff_ci, per_run_ci

if TYPE_CHECKING:  # pragma: no cover
    from dyna.experiment.protocol import ExperimentOutput

__all__ = ["build_report", "shortcut_bound", "write_report"]


def shortcut_bound(window: int, old_length: int) -> int:
    """Most goal visits possible in ``window`` steps when every episode takes >= ``old_length``.

    An episode in progress when the window opens may end at its first step; every later one
    needs at least ``old_length`` steps, so at most ``floor((window - 1) / old_length) + 1``
    goal visits fit. More than that proves a shorter path was used.
    """
    if window <= 0:
        return 0
    return (window - 1) // old_length + 1


# --------------------------------------------------------------------------- sections

# manifest timing keys -> words in the report (seconds)
_TIMING_NAMES = {"compile_time_s": "compile", "run_time_s": "run", "output_time_s": "output",
                 "wall_time_s": "total"}


def _setup_section(out: "ExperimentOutput") -> list[str]:
    c, m = out.config, out.manifest
    s = c.schedule
    sched = f"{s.episodes:,} episodes" if s.episodes else f"{s.total_steps:,} time steps"
    if s.eval_every:
        sched += f", greedy evaluation every {s.eval_every} episodes ({s.eval_episodes} " \
                 f"episodes each)"
    if s.stop_at_optimal:
        base = ("k x the unrefined maze's shortest path" if s.optimal_protocol == "reference"
                else "the shortest path")
        sched += (f", each run stops once its greedy path is optimal, i.e. within "
                  f"optimal_tolerance = {s.optimal_tolerance:g} of {base} "
                  f"(optimal_protocol = {s.optimal_protocol!r})")
    lines = [f"# {c.name}", ""]
    if c.description:
        lines += [c.description, ""]
    lines += [
        "## Setup", "",
        # the manifest's hash when it has one (c.hash imports dyna.agents and numba)
        f"- config sha256: `{short_hash(m['config_hash'] if 'config_hash' in m else c.hash)}`"
        " (in full in "
        "manifest.json)",
        f"- seed: {c.seed}; runs per variant: {c.runs}; schedule: {sched}",
    ]
    backend = m.get("backend", {})
    if backend:
        workers, block = backend.get("workers"), backend.get("block_size")
        lines.append(f"- backend: {backend.get('name')} ({workers} "
                     f"worker{'' if workers == 1 else 's'}, {backend.get('jobs')} jobs of at "
                     f"most {block} run{'' if block == 1 else 's'})")
    timing = m.get("timing", {})
    if timing:
        lines.append("- time: " + ", ".join(
            f"{_TIMING_NAMES.get(k, k.removesuffix('_time_s').replace('_', ' '))} {v:.2f} s"
            for k, v in timing.items()))
    lines += ["", "## Environment", ""]
    rows = []
    keys = list(c.sweep)
    for e in m.get("envs", []):
        meta = e.get("meta", {})
        limit = meta.get("max_episode_steps", 0) or "none"
        if meta.get("max_episode_steps_imposed_by_dyna"):
            limit = f"{limit} (imposed by dyna)"
        states = meta.get("n_states")
        if "free_states" in meta:   # a maze: its cells, walls included, and the free ones
            states = f"{states} ({meta['free_states']} free)"
        rows.append([_point_label(e.get("point", {})) or "-", meta.get("requested_id"),
                     meta.get("resolved_id"), states, meta.get("n_actions"),
                     limit, meta.get("optimal_path_length", "-")])
    lines += md_table(["sweep point" if keys else "point", "requested id", "resolved id",
                     "states", "actions", "max episode steps", "optimal path (steps)"], rows)
    lines += ["", "## Variants", ""]
    rows = [[v.name, v.agent, ", ".join(f"{k}={val}" for k, val in v.hparams.items())]
            for v in c.variants]
    lines += md_table(["variant", "agent", "hyper-parameters"], rows)
    return lines


def _final_section(out: "ExperimentOutput") -> list[str]:
    c = out.config
    a = c.analysis
    opts = _opts(out)
    keys = list(c.sweep)
    K = a.final_episodes
    stat = "IQM" if a.statistic == "iqm" else "mean"
    header = ["variant", *keys]
    # runs that stop once optimal play different numbers of episodes, and their last ones
    # precede the stop: no final steps per episode to report, updates until optimal instead
    by_episode = c.schedule.episodes is not None and not c.schedule.stop_at_optimal
    # a return that is the same in every episode of every run (the Dyna maze's 1 at the
    # goal) tells the variants apart in nothing: said once instead of a column of it
    returns = out.results.get_column("return") if by_episode else None
    same_return = (returns is not None and returns.len() > 0 and returns.null_count() == 0
                   and returns.n_unique() == 1)
    if by_episode:
        E = c.schedule.episodes
        window = f"episodes {max(1, E - K + 1):,}-{E:,}"
        header += [f"steps/episode, {window}"]
        if not same_return:
            header += [f"return/episode, {window}"]
    elif c.schedule.episodes is None:
        header += [f"cumulative reward at step {c.schedule.total_steps}"]
    if c.schedule.eval_every:
        header += ["final evaluation score"]
    if c.schedule.stop_at_optimal:
        tol = _tolerance_words(c.schedule)
        header += [f"runs that found an optimal path ({tol})", f"updates until optimal ({tol})"]
    rows = []
    for variant, _p, point in _groups(out):
        res = _select(out.results, variant.name, point)
        row = [variant.name, *[point[k] for k in keys]]
        if by_episode:
            row.append(ci(per_run_ci(_per_run(res, "steps", last=K), **opts)))
            if not same_return:
                row.append(ci(per_run_ci(_per_run(res, "return", last=K), **opts)))
        elif c.schedule.episodes is None:
            row.append(ci(per_run_ci(_per_run(res, "cumulative_reward", last=1), **opts)))
        if c.schedule.eval_every and out.evals is not None:
            ev = _select(out.evals, variant.name, point)
            row.append(ci(per_run_ci(_per_run(ev, "score", last=1), **opts)))
        if c.schedule.stop_at_optimal:
            runs = _select(out.runs, variant.name, point)
            found = runs.get_column("updates_to_optimal").drop_nulls().to_numpy()
            row.append(f"{found.size}/{runs.height}")
            row.append(ci(per_run_ci(found, **opts)))
        rows.append(row)
    per_run = (f"; per run, {window} are averaged first" if by_episode else "")
    same = (f" The return was {returns[0]:g} in every episode of every run (no column)."
            if same_return else "")
    return ["", "## Final performance", "",
            f"{stat[0].upper() + stat[1:]} over runs with its {a.confidence:.0%} bootstrap "
            f"confidence interval [low, high]{per_run}.{same}", "", *md_table(header, rows)]


def _n_of(variant) -> int | None:
    n = variant.hparams.get("n_planning")
    return int(n) if n is not None else None


def _check_figure_8_2(out: "ExperimentOutput") -> list[str]:
    opts = _opts(out)
    E = out.config.schedule.episodes
    # The late window is the final-performance table's (the last final_episodes episodes),
    # so the two tables report the same number.
    lo_ep = max(1, E - out.config.analysis.final_episodes + 1)
    rows, verdicts = [], []
    named = []          # does every variant's name already state its n?
    for variant, _p, point in _groups(out):
        res = _select(out.results, variant.name, point)
        ep2 = res.filter(pl.col("episode") == 2).sort("run").get_column("steps").to_numpy()
        late = _per_run(res.filter(pl.col("episode") >= lo_ep), "steps")
        ci2, cil = per_run_ci(ep2, **opts), per_run_ci(late, **opts)
        n = _n_of(variant)
        name = label(variant.name, f"n = {n}") if n is not None else variant.name
        named.append(name == variant.name)
        rows.append([variant.name, *point.values(), n if n is not None else "-", ci(ci2),
                     ci(cil)])
        if not applies("figure_8_2", out.config.env.id, out.config.env_kwargs(point)):
            continue        # the book's numbers are about the Dyna maze at resolution 1
        e2 = float(ci2.estimate)
        if n == 0 and math.isfinite(e2):
            verdicts.append(f"- {name}: episode 2 takes {fmt(e2)} steps (book: several "
                            f"hundred; consistent at 200 or more) -> "
                            f"{'consistent' if e2 >= 200 else 'NOT consistent'}")
        if n is not None and n >= 50 and math.isfinite(e2):
            verdicts.append(f"- {name}: episode 2 takes {fmt(e2)} steps (book: under ~60; "
                            f"consistent below 60) -> "
                            f"{'consistent' if e2 < 60 else 'NOT consistent'}")
        el = float(cil.estimate)
        if math.isfinite(el) and E >= 40:
            verdicts.append(f"- {name}: episodes {lo_ep}-{E} average {fmt(el)} steps "
                            f"(book: 14 optimal steps plus exploration, about 15-18; "
                            f"consistent within 14-20) -> "
                            f"{'consistent' if 14 <= el <= 20 else 'NOT consistent'}")
    keys = list(out.config.sweep)
    stat = "IQM" if out.config.analysis.statistic == "iqm" else "mean"
    header = ["variant", *keys, "planning steps n", f"{stat} steps in episode 2",
              f"{stat} steps per episode, episodes {lo_ep}-{E}"]
    if all(named):      # the names say n already: no column repeating them
        drop = 1 + len(keys)
        header.pop(drop)
        rows = [row[:drop] + row[drop + 1:] for row in rows]
    return ["", "### Figure 8.2 (Sutton & Barto Section 8.2)", "",
            f"Cells: {stat} over runs [{out.config.analysis.confidence:.0%} bootstrap "
            "confidence interval].", "", *md_table(header, rows), "",
            "Loose checks against the book's text (they can hardly fail; the comparison "
            "with the reference implementation below is the real test):", "", *verdicts,
            *_reference_section(out, "figure_8_2")]


def _ours(out: "ExperimentOutput", summary) -> np.ndarray | None:
    """Our per-run values of a declared reference summary (None: not in this output)."""
    c = out.config
    points = c.sweep_points()
    if summary.check == "figure_8_2":
        if len(points) != 1 or not applies("figure_8_2", c.env.id, c.env_kwargs(points[0])):
            return None
        v = next((v for v in c.variants if _n_of(v) == summary.who), None)
        E = c.schedule.episodes or 0
        if v is None or E < max(summary.at, summary.until):
            return None
        res = _select(out.results, v.name, points[0])
        if summary.kind == "episode":
            return res.filter(pl.col("episode") == summary.at).sort("run")["steps"].to_numpy()
        return _per_run(res.filter((pl.col("episode") >= summary.at)
                                   & (pl.col("episode") <= summary.until)), "steps")
    v = next((v for v in c.variants if v.agent == summary.who), None)
    if v is None:
        return None
    if summary.kind == "cumulative_reward":
        if len(points) != 1 or (c.schedule.total_steps or 0) < summary.at:
            return None
        res = _select(out.results, v.name, points[0]).filter(pl.col("step") == summary.at)
        return res.sort("run")["cumulative_reward"].to_numpy() if res.height else None
    point = next((pt for pt in points if pt.get("resolution") == summary.at), None)
    if point is None:
        return None
    runs = _select(out.runs, v.name, point)
    # NaN for a run that never passed the check: compare() leaves it out, the table says so
    return (runs.get_column("updates_to_optimal").cast(pl.Float64)
            .fill_null(float("nan")).to_numpy())


def _p(p: float) -> str:
    """A p-value to 3 significant digits; "-" when there was no test (fewer than 2 runs)."""
    return f"{p:.3g}" if math.isfinite(p) else "-"


def _reference_section(out: "ExperimentOutput", check: str) -> list[str]:
    """Our declared summaries against the reference implementation's per-run values
    (:mod:`dyna.experiment.kinds.tabular.reference`)."""
    import dyna.experiment.kinds.tabular.reference as ref
    from dyna.errors import MissingFileError

    declared = [s for s in ref.DECLARED if s.check == check]
    ours = {}
    for s in declared:
        values = _ours(out, s)
        if values is not None and values.size:
            ours[s] = values
    lines = ["", "#### Against the reference implementation", "",
             "Declared in advance (dyna/experiment/kinds/tabular/reference.py, before our "
             "numbers were set against them): "
             + "; ".join(s.label for s in declared) + ". Reference values: per-run results "
             "of the widely used reference implementation (ShangtongZhang/reinforcement-"
             "learning-an-introduction, chapter08/maze.py; data/sutton_barto_reference/), "
             "not the book's. Test: Welch's two-sided t-test per summary, Holm-corrected "
             f"over this table at {ALPHA:g} (\"differs\" when the adjusted p < {ALPHA:g}; no "
             "detected difference is not proof of sameness)"
             + ("; the plateau also gets a TOST equivalence test with a margin of "
                f"{max(s.margin for s in declared):g} step(s) per episode, Holm-corrected over "
                "its own family (\"equivalent\" when the adjusted p < "
                f"{ALPHA:g})" if any(s.margin for s in declared) else "") + "."]
    if not ours:
        return lines + ["", "None of the declared summaries is in this output (variants, "
                        "sweep points or schedule differ)."]
    try:
        results = ref.compare(ours)
    except MissingFileError as exc:
        return lines + ["", f"Reference data not found ({exc}); no comparison."]
    tost = any(r.summary.margin for r in results)
    rows = []
    for r in results:
        w = r.welch
        verdict = ("-" if r.differs is None else "**differs**" if r.differs
                   else "no difference detected")
        total = np.asarray(ours[r.summary]).size
        runs = f"{r.ours_n}" if r.ours_n == total else f"{r.ours_n} of {total}"
        row = [r.summary.label, f"{fmt(r.ours_mean)} ± {fmt(r.ours_sem)} ({runs})",
               f"{fmt(r.ref_mean)} ± {fmt(r.ref_sem)} ({r.ref_n})",
               f"{fmt(w['diff'])} [{fmt(w['low'])}, {fmt(w['high'])}]",
               _p(w["p"]), _p(r.p_holm), verdict]
        if tost:
            row += (["-", "-"] if not r.summary.margin else
                    [_p(r.tost_p_holm),
                     "equivalent" if r.equivalent else "equivalence not shown"])
        rows.append(row)
    header = ["summary", "ours: mean ± SEM (runs)", "reference: mean ± SEM (runs)",
              "difference [95% Welch CI]", "Welch p", "Holm p", "verdict"]
    if tost:
        header += ["TOST p (Holm)", "equivalence"]
    lines += ["", *md_table(header, rows)]
    left = sum(np.asarray(ours[r.summary]).size - r.ours_n for r in results)
    if left:
        lines += ["", f"{left} of our runs never passed the optimality check within the "
                  "episode cap and are left out of our values ('n of N' runs), which favours "
                  "the variant with more such runs; the reference's runs all passed."]
    return lines


def _pair(out: "ExperimentOutput", first: str, second: str):
    a = next((v for v in out.config.variants if v.agent == first), None)
    b = next((v for v in out.config.variants if v.agent == second), None)
    return a, b


def _check_changing_maze(out: "ExperimentOutput", kind: str) -> list[str]:
    opts = _opts(out)
    T = out.config.schedule.total_steps
    meta = out.env_metas[0] if out.env_metas else {}
    changes = [int(x) for x in meta.get("change_at", [])]
    lengths = [int(x) for x in meta.get("optimal_path_lengths", [])]
    title = "Blocking maze (Figure 8.4)" if kind == "blocking" else "Shortcut maze (Figure 8.5)"
    lines = ["", f"### {title}, Sutton & Barto Section 8.3", ""]
    if changes:
        lines += [f"The maze changes after {changes[0]} time steps; optimal path "
                  f"{' -> '.join(map(str, lengths))} steps.", ""]
    window = min(1000, T - changes[0]) if changes else min(1000, T)
    # The window opens at a logged step (log_every may be > 1).
    logged = out.results.filter(pl.col("step") <= T - window).get_column("step")
    window_start = int(logged.max()) if logged.len() else 0
    window = T - window_start
    finals, rows = {}, []
    bound = None
    if kind == "shortcut" and len(lengths) >= 2 and lengths[-1] < lengths[0]:
        bound = shortcut_bound(window, lengths[0])
    for variant, _p, point in _groups(out):
        res = _select(out.results, variant.name, point)
        final = _per_run(res, "cumulative_reward", last=1)
        finals[variant.name] = final
        row = [variant.name, variant.agent, ci(per_run_ci(final, **opts))]
        if changes:
            before = _per_run(res.filter(pl.col("step") <= changes[0]), "cumulative_reward",
                              last=1)
            row.append(ci(per_run_ci(final - before, **opts)))
        if bound is not None:
            at = _per_run(res.filter(pl.col("step") == window_start), "cumulative_reward") \
                if window_start else np.zeros_like(final)
            visits = final - at
            found = visits > bound
            row += [ci(per_run_ci(visits, **opts)),
                    f"{int(found.sum())}/{found.size} ({found.mean():.0%})"]
            greedy = _select(out.runs, variant.name, point).get_column("final_greedy_steps")
            short = greedy.drop_nulls().to_numpy()
            row.append(f"{int((short < lengths[0]).sum())}/{greedy.len()}")
        rows.append(row)
    header = ["variant", "agent", f"cumulative reward at step {T}"]
    if changes:
        header.append(f"reward after the change (steps {changes[0] + 1}-{T})")
    if bound is not None:
        header += [f"reward in the last {window} steps", "runs that found the shortcut",
                   f"greedy path after training shorter than {lengths[0]} steps"]
    lines += md_table(header, rows)
    plus, base = _pair(out, "dyna_q_plus", "dyna_q")
    if plus is not None and base is not None:
        d = diff_ci(finals[plus.name], finals[base.name], **opts)
        verdict = "more" if float(d.low) > 0 else ("more (interval includes 0)"
                                                   if float(d.estimate) > 0 else "NOT more")
        lines += ["", f"{label(plus.name, 'Dyna-Q+')} minus {label(base.name, 'Dyna-Q')}, "
                  "final cumulative "
                  f"reward: {ci(d)} -> Dyna-Q+ ends with {verdict} reward "
                  f"(book: Dyna-Q+ ahead)."]
    if bound is not None:
        lines += ["", f"A run found the shortcut when it reached the goal more than {bound} "
                  f"times in the last {window} steps: the most possible with episodes of at "
                  f"least {lengths[0]} steps (the old optimal path)."]
    lines += _reference_section(out, kind)
    lines += ["", "The reference switches the maze at the end of the first episode that ends "
              "after the switch step (measured: mean step 1030 in the blocking maze, about "
              "3008-3011 in the shortcut maze), this env at the step itself."]
    return lines


def _check_prioritized_sweeping(out: "ExperimentOutput") -> list[str]:
    opts = _opts(out)
    dq, ps = _pair(out, "dyna_q", "prioritized_sweeping")
    lines = ["", "### Prioritized sweeping (Example 8.4, Sutton & Barto Section 8.4)", ""]
    if dq is None or ps is None:
        return lines + ["Needs one dyna_q and one prioritized_sweeping variant."]
    keys = list(out.config.sweep)
    has_steps = "total_steps" in out.runs.columns
    rows, ratios, split = _ps_rows(out, dq, ps, keys, has_steps, opts)
    sc = out.config.schedule
    tol = _tolerance_words(sc)
    proto = _ps_protocol(sc)
    lines += [f"Updates until optimal: Q updates until the greedy path is accepted as optimal "
              f"(optimal_tolerance = {sc.optimal_tolerance:g}: a greedy path of at most "
              f"floor({sc.optimal_tolerance:g} x shortest) steps counts as optimal). " + proto
              + " States: free (non-wall) cells.", ""]
    lines += md_table([*keys, "free states", f"{dq.name} updates until optimal ({tol})",
                       "found", f"{ps.name} updates until optimal ({tol})", "found", "ratio"],
                      rows)
    finite = [r for r in ratios if math.isfinite(r)]
    fewer = all(r > 1 for r in ratios) and len(finite) == len(ratios)
    in_range = [5 <= r <= 10 for r in finite]
    growing = len(finite) >= 2 and all(b >= a for a, b in zip(finite, finite[1:]))
    verdict = ("consistent" if finite and all(in_range) else
               "partly consistent" if any(in_range) else "inconsistent")
    lines += ["", f"Prioritized sweeping needs fewer updates at every size: "
              f"{'yes' if fewer else 'NO'}.", "",
              f"- ratio Dyna-Q / prioritized sweeping per size: "
              f"{', '.join(fmt(r) for r in ratios)} (book: 'often by a factor of 5 to 10', "
              f"with a 'decisive advantage' kept as the maze grows) -> {verdict} with the "
              f"book's range; the ratio {'grows' if growing else 'does not grow'} with size "
              f"here.",
              "", "Means are over the runs that found a path within the episode budget (the "
              "'found' columns); runs that never found one are left out, which favours the "
              "variant with more failures."]
    lines += _reference_section(out, "prioritized_sweeping")
    if sc.optimal_protocol != "reference":
        lines += ["", "This run's protocol is not the reference implementation's (above), so "
                  "differences are expected: compare the `optimal_protocol = 'reference'` "
                  "run (experiments/prioritized_sweeping_reference.toml)."]
    if split:
        lines += _ps_where_updates_go(dq, ps, keys, split)
    return lines


def _ps_rows(out: "ExperimentOutput", dq, ps, keys: list, has_steps: bool,
             opts: dict) -> tuple[list, list, list]:
    """Per sweep point: the table row (updates until optimal with their intervals, runs that
    found the path, the ratio), the ratio Dyna-Q / prioritized sweeping, and (with
    ``has_steps``) the row of where the updates go."""
    rows, ratios, split = [], [], []
    for p, point in enumerate(out.config.sweep_points()):
        meta = out.env_metas[p] if p < len(out.env_metas) else {}
        cells = []
        means, steps = [], []
        for v in (dq, ps):
            runs = _select(out.runs, v.name, point)
            found = runs.get_column("updates_to_optimal").drop_nulls().to_numpy()
            iv = per_run_ci(found, **opts)
            means.append(float(iv.estimate))
            cells += [ci(iv), f"{found.size}/{runs.height}"]
            if has_steps:  # a run that found the path stopped there: its steps are the steps to it
                done = runs.filter(pl.col("updates_to_optimal").is_not_null())
                steps.append(float(done.get_column("total_steps").mean()) if done.height
                             else float("nan"))
        ratio = means[0] / means[1] if all(math.isfinite(x) and x > 0 for x in means) \
            else float("nan")
        ratios.append(ratio)
        rows.append([*[point[k] for k in keys], meta.get("free_states", meta.get("n_states", "-")),
                     *cells, fmt(ratio)])
        if has_steps:
            split.append([*[point[k] for k in keys],
                          *(f"{s:.0f}" if math.isfinite(s) else "-" for s in steps),
                          *(fmt(m / s) if s > 0 else "-" for m, s in zip(means, steps)),
                          fmt(steps[0] / steps[1]) if steps[1] > 0 else "-"])
    return rows, ratios, split


def _ps_protocol(sc) -> str:
    """What the schedule's optimal-path protocol counts, in words."""
    if sc.optimal_protocol == "reference":
        return ("Protocol `reference` (schedule.optimal_protocol; the reference "
                "implementation's example_8_4): the goal is the k x k block, after each "
                "episode one greedy rollout (ties random) must reach it within "
                f"floor({sc.optimal_tolerance:g} x k x L1) steps, L1 the unrefined maze's "
                "shortest path (the code's 14 x k x 1.2), and prioritized sweeping counts "
                "one update more per real step (the code's + 1).")
    return ("Protocol `dyna` (schedule.optimal_protocol, the default): the env's goal "
            "as configured (a single goal cell in the refined Dyna maze), after each "
            "episode 5 greedy rollouts (ties random) must all reach it within "
            f"floor({sc.optimal_tolerance:g} x L) steps, L the shortest path, and "
            "updates are counted as done (prioritized sweeping: its popped backups). "
            "optimal_protocol = 'reference' gives the reference implementation's.")


def _ps_where_updates_go(dq, ps, keys: list, split: list) -> list[str]:
    """The "where the updates go" part: real steps, updates per real step, their ratio."""
    n = dq.hparams.get("n_planning", "n")
    lines = ["", "#### Where the updates go", "",
             "Same runs: real steps until the path was found, "
             "updates per real step, and the real-step ratio. The update ratio is the "
             "real-step ratio times the ratio of updates per real step. Dyna-Q makes "
             f"1 + n = {n + 1 if isinstance(n, int) else '1 + n'} updates on every real step, "
             "useful or not (all of its first episode's updates back up zeros); "
             "prioritized sweeping makes only as many as its queue holds (at most n), "
             "so when both need about as many real steps -- finding the shortest path "
             "is then a matter of epsilon-greedy exploration, not of planning -- the "
             "ratio is set by prioritized sweeping's updates per real step."]
    if ps.hparams.get("alpha", 1.0) < 1:
        lines[-1] += (" With alpha < 1 a backup leaves part of its error behind and the "
                      "book's algorithm does not queue the pair again, so real revisits "
                      "keep re-starting sweeps whose size grows with the maze.")
    lines.append("")
    lines += md_table([*keys, f"{dq.name} real steps", f"{ps.name} real steps",
                       f"{dq.name} updates/step", f"{ps.name} updates/step",
                       "real-step ratio"], split)
    return lines


def _tolerance_words(schedule) -> str:
    """A column header's words for the optimal-path rule: ``"greedy path at most 1.2 x
    shortest"`` (``"shortest greedy path"`` at tolerance 1)."""
    if schedule.optimal_tolerance == 1.0:
        return "shortest greedy path"
    return f"greedy path at most {schedule.optimal_tolerance:g} x shortest"


def build_report(out: "ExperimentOutput", folder: str | Path | None = None) -> str:
    """The Markdown text of report.md.

    Parameters
    ----------
    out : ExperimentOutput
    folder : str or Path, optional
        Output folder, to link the plots found in ``folder/plots``.

    Returns
    -------
    str
    """
    checks = out.config.analysis.checks
    check_lines = ["", "## Checks"] if checks else []
    for check in checks:
        if check == "figure_8_2":
            check_lines += _check_figure_8_2(out)
        elif check in ("blocking", "shortcut"):
            check_lines += _check_changing_maze(out, check)
        elif check == "prioritized_sweeping":
            check_lines += _check_prioritized_sweeping(out)
    setup = _setup_section(out)
    at = 4 if out.config.description else 2   # after the title and the description
    lines = setup[:at] + headline(out, check_lines) + setup[at:] + _final_section(out)
    lines += check_lines
    if folder is not None:
        lines += plots_section(Path(folder))
    return "\n".join(lines) + "\n"


def write_report(out: "ExperimentOutput", folder: str | Path) -> Path:
    """Write ``folder/report.md`` (see :func:`build_report`) and return its path."""
    return write_report_file(folder, build_report(out, folder))
