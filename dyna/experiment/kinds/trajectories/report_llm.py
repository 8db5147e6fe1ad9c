"""Kind ``trajectories``: the report's section on an ``[llm]`` reviewer (from the
``llm_reviews``, ``llm_lessons`` and ``runs`` tables)."""

from __future__ import annotations

import polars as pl

from dyna.experiment.kinds.trajectories.lessons import JUNK_REASONS, QUOTE_CHARS
from dyna.experiment.reporting import fmt, md_table

__all__ = ["SIMULATED_MISATTRIBUTION", "llm_headline", "llm_section", "reasons",
           "variant_counts"]

#: The simulated reviewer's ``misattribution`` settings (agent tasks v0 and the v2 sweeps:
#: :class:`dyna.agents.loop_agents.PolicyParams`).
SIMULATED_MISATTRIBUTION = "1.0 (agent tasks v0), 0.5 (the v2 sweeps)"
_STATUSES = ("reviewed", "incomplete", "failed", "skipped")


def reasons(lessons: pl.DataFrame, action: str) -> str:
    """``"reason n, ..."`` of the decisions with ``action`` (most frequent first), "-"
    without any."""
    sub = lessons.filter(pl.col("action") == action)
    if sub.height == 0:
        return "-"
    counts = sub.group_by("why").len().sort(["len", "why"], descending=[True, False])
    return ", ".join(f"{r['why'] or '?'} {r['len']}" for r in counts.iter_rows(named=True))


def _share(k: int, n: int) -> str:
    return f"{k}/{n} = {fmt(k / n)}" if n else "0/0"


def variant_counts(reviews: pl.DataFrame, lessons: pl.DataFrame) -> dict:
    """The counts of one variant's reviews and lessons (summed over runs): reviews by
    status, proposals (decisions but ``refused``), refused tool calls, committed (reached
    MEMORY.md or the skills), staged, invalid, rejected, junk by reason and junk
    committed, lessons quoting the digest, lessons from failed runs and those
    misattributing the failure, lessons holding personal values, tokens and seconds."""
    props = lessons.filter(pl.col("action") != "refused")
    asked = reviews.filter(pl.col("turns") > 0)
    failed = props.filter(~pl.col("success"))
    out = {f"status_{s}": reviews.filter(pl.col("status") == s).height for s in _STATUSES}
    out.update(
        proposals=props.height, refused=lessons.height - props.height,
        **{a: props.filter(pl.col("action") == a).height
           for a in ("committed", "staged", "invalid", "rejected", "dropped")},
        **{f"junk_{j}": props.filter(pl.col("junk") == j).height for j in JUNK_REASONS},
        junk_committed=props.filter((pl.col("junk") != "")
                                    & (pl.col("action") == "committed")).height,
        quotes=props.filter(pl.col("quotes_digest")).height,
        from_failed=failed.height,
        misattributes=failed.filter(pl.col("misattributes")).height,
        personal=props.filter(pl.col("personal") > 0).height,
        requests=int(asked.get_column("turns").sum() or 0), asked=asked.height,
        prompt_tokens=int(asked.get_column("prompt_tokens").sum() or 0),
        completion_tokens=int(asked.get_column("completion_tokens").sum() or 0),
        seconds=float(asked.get_column("seconds").sum() or 0.0))
    return out


def llm_section(cfg, out) -> list[str]:
    """The section: the model reviewer's reviews, proposals and their fates, junk,
    copying and misattribution, personal data, tokens and seconds, per variant."""
    reviews, lessons = out.tables["llm_reviews"], out.tables["llm_lessons"]
    runs = out.tables["runs"]
    variants = [v for v in cfg.variants if reviews.filter(pl.col("variant") == v).height]
    llm = cfg.llm
    lines = ["## The model reviewer", "",
             f"Model `{llm['model']}` at `{llm['base_url']}`, temperature "
             f"{llm['temperature']}, at most {llm['max_new_tokens']} new tokens a request, "
             f"{llm['review_max_turns']} requests and {llm['review_max_tokens']} tokens a "
             f"review, {llm['max_lessons']} lesson(s) asked for a run. Counts summed over "
             "runs. Junk: the rule fixed before the run "
             "(`dyna/experiment/kinds/trajectories/lessons.py`).", ""]
    c = {v: variant_counts(reviews.filter(pl.col("variant") == v),
                           lessons.filter(pl.col("variant") == v)) for v in variants}
    lines += md_table(["variant"] + list(_STATUSES) + ["proposals", "refused by the parser",
                                                       "invalid", "rejected", "staged",
                                                       "committed"],
                      [[v] + [c[v][f"status_{s}"] for s in _STATUSES]
                       + [c[v][k] for k in ("proposals", "refused", "invalid", "rejected",
                                            "staged", "committed")]
                       for v in variants]) + [""]
    lines += ["Why: reasons of each refusal (the text before its first `:`).", ""]
    lines += md_table(["variant", "reviews incomplete or failed", "refused by the parser",
                       "invalid (validate)", "rejected (grade)"],
                      [[v, _status_reasons(reviews.filter(pl.col("variant") == v)),
                        *(reasons(lessons.filter(pl.col("variant") == v), a)
                          for a in ("refused", "invalid", "rejected"))]
                       for v in variants]) + [""]
    lines += _quality(cfg, runs, c, variants)
    return lines


def llm_headline(cfg, out) -> list[str]:
    """The headline's two lines on the model reviewer, summed over variants and runs: the
    reviews that sent a request and those cut off or failed (by reason); the lessons
    committed (by variant), how many of them are junk, and the personal values in the
    store files."""
    reviews, lessons = out.tables["llm_reviews"], out.tables["llm_lessons"]
    c = variant_counts(reviews, lessons)
    cut = c["status_incomplete"] + c["status_failed"]
    by_variant = (lessons.filter(pl.col("action") == "committed").group_by("variant").len()
                  .sort(["len", "variant"], descending=[True, False]))
    where = ", ".join(f"{r['variant']} {r['len']}" for r in by_variant.iter_rows(named=True))
    in_files = int(out.tables["runs"].get_column("pd_store").sum() or 0)
    return [f"- The model reviewer `{cfg.llm['model']}`: {c['asked']} reviews sent a request, "
            f"{cut} of them cut off or failed ({_status_reasons(reviews)}).",
            f"- Its lessons: {c['committed']} committed{f' ({where})' if where else ''}, "
            f"{c['junk_committed']} of them junk; {in_files} personal values in the store "
            "files."]


def _status_reasons(reviews: pl.DataFrame) -> str:
    sub = reviews.filter(pl.col("status").is_in(["incomplete", "failed"]))
    if sub.height == 0:
        return "-"
    key = pl.col("reason").str.split(":").list.first().alias("why")
    counts = sub.select(key).group_by("why").len().sort(["len", "why"],
                                                        descending=[True, False])
    return ", ".join(f"{r['why']} {r['len']}" for r in counts.iter_rows(named=True))


def _quality(cfg, runs: pl.DataFrame, c: dict, variants: list) -> list[str]:
    """Junk, copying, misattribution, personal data, tokens and seconds."""
    pd = {r["variant"]: r for r in runs.group_by("variant").agg(
        pl.col("pd_reviewer").sum(), pl.col("pd_store").sum()).iter_rows(named=True)}
    rows = []
    for v in variants:
        x = c[v]
        junk = sum(x[f"junk_{j}"] for j in JUNK_REASONS)
        by = ", ".join(f"{j} {x['junk_' + j]}" for j in JUNK_REASONS)
        rows.append([v, f"{junk} ({by})",
                     x["junk_committed"], _share(x["quotes"], x["proposals"]),
                     _share(x["misattributes"], x["from_failed"]), x["personal"],
                     pd.get(v, {}).get("pd_reviewer", 0), pd.get(v, {}).get("pd_store", 0),
                     fmt(x["prompt_tokens"] / x["asked"]) if x["asked"] else "-",
                     fmt(x["completion_tokens"] / x["asked"]) if x["asked"] else "-",
                     fmt(x["seconds"] / x["asked"]) if x["asked"] else "-"])
    lines = md_table(["variant", "junk proposals (by reason)", "junk committed",
                      "quote the digest", "misattribute (of lessons from failed runs)",
                      "proposals with personal values", "personal values reaching the "
                      "reviewer", "personal values in the files", "prompt tokens / review",
                      "completion tokens / review", "seconds / review"], rows) + [""]
    lines += [f"- Quoting the digest: the whole lesson, or {QUOTE_CHARS} characters of it, "
              "verbatim in the digest; the rule-based reviewer's `copy_rate` in the "
              "simulation: 0.5 (`experiments/taubench_airline_loops.toml` and the agent "
              "tasks' default).",
              "- Misattribution: a lesson from a failed run naming a tool the run called, "
              "with no word of failure or avoidance; the simulated reviewer's "
              f"`misattribution`: {SIMULATED_MISATTRIBUTION}.",
              "- Tokens and seconds per review are over the reviews that sent a request "
              "(the outcome gate's skipped reviews send none); seconds are the requests' "
              "wall-clock time as recorded.", ""]
    return lines
