"""Kind ``trajectories``: recorded agent runs replayed through the learning loops.

Real runs of an LLM agent (``data/agent_trajectories/``: 200 GPT-4o tau-bench airline
runs, read by :mod:`dyna.loops.trajectories`) are replayed, trial by trial (every task of
trial 0 by task id, then trial 1, ...), through each variant: the loops with every
safeguard as a switch (variant names as in the agent tasks:
:func:`dyna.agents.loop_agents.make_variant`) and the literature baselines of
:mod:`dyna.agents.baselines`, with the rule-based reviewer
(:class:`dyna.loops.review.RuleBasedReviewer`). The runs are not re-acted: lessons injected
before a run do not change it, so what is measured is what each variant *would have
written* from these runs.

An experiment file (``experiments/taubench_airline_loops.toml``)::

    kind = "trajectories"
    name = "taubench_airline_loops"
    seed = 0
    runs = 3                   # reviewer seeds (the recorded runs are the same in each)
    data = "../data/agent_trajectories/taubench_airline_gpt4o_trajectories.json"
    variants = "all"           # or a list of names
    store = "skill"            # store of naive_loop

    [reviewer]                 # RuleBasedReviewer: propose_rate, specificity, copy_rate,
    copy_rate = 0.5            # kinds, tokens_per_review (also the baselines' per write)
    [loop]                     # LoopConfig settings of the full loop
    [digest]                   # extra_sensitive_keys, tools_trusted
    [analysis]                 # confidence, n_resamples, near_duplicate

Tables: ``runs`` (per variant and run: reviews, proposals and their fates, lessons from
failed runs, personal-data values reaching the reviewer -- digest and proposals -- and the
store files, the always-on safety net's catches, near-duplicates, entries at the end,
``acted_<switch>``), ``episodes`` (per episode: reviewed, committed, staged, from a failed
run, entries after it), ``induction`` (per task: leave-one-task-out workflow induction and
its baselines, :func:`dyna.loops.trajectories.leave_one_task_out`), ``induction_summary``
(means with bootstrap intervals over tasks) and ``store_episodes`` (the importer's
experience-store episodes checked for personal data).

Personal data is counted against the values harvested *by field* from the runs' structured
tool outputs (:func:`dyna.loops.trajectories.harvest_personal_values`), not by the
redactor. For a baseline, which has no redaction, ``pd_store`` counts the values in what it
keeps.

An optional ``[llm]`` table reviews with a chat-completions model instead (``base_url =
"local"``: the local model server, :mod:`dyna.llm_local`), every exchange recorded in the
``llm_exchanges`` table so that ``dyna run FILE --replay DIR`` reproduces the tables
offline; ``first_runs = N`` replays only the first N runs. Its tables ``llm_reviews`` and
``llm_lessons`` say what the model did, judged by the rules of :mod:`.lessons`
(``experiments/taubench_real_reviewer.toml``).

Modules: ``config``, ``job``, ``kind``, ``plots``, ``report``; for ``[llm]``: ``llm`` (the
table, the timed client), ``llm_session`` (the job), ``review_log``, ``lessons``,
``llm_tables``, ``report_llm``. The package imports the
experiment machinery, :mod:`dyna.loops`, :mod:`dyna.agents.loop_agents` (variant names) and
:mod:`dyna.agents.baselines`; never another kind, the registry or the runner.
"""

from dyna._lazy import lazy_getattr

_LAZY = {"KIND": "kind", "TrajectoriesKind": "kind"}

__all__ = ["KIND", "TrajectoriesKind"]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
