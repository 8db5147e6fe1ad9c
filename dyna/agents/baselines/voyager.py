"""Voyager (Wang et al. 2023): a skill library written after self-verified successes."""

from __future__ import annotations

from dyna.agents.baselines.common import Knowledge, RunRecord, TaskBaseline, cosine


class Voyager(TaskBaseline):
    """Voyager (Wang et al. 2023, arXiv 2305.16291): a skill library written only after
    self-verified successes.

    When it writes
        Only after a task the critic judges successful (self-verification: here
        ``self_assessed_success`` True); one LLM call per write (the skill's description,
        ``generate_skill_description`` in the released code), nothing otherwise.
    What it keeps
        The skill: the run's ok calls in order, named by the task key, described by its key
        words. A skill of the same name overwrites the library's entry; the old version is
        kept aside (``SkillManager.add_new_skill`` replaces the name's entry in the vector
        DB and ``skills.json`` and writes the new code to ``<name>V2.js``, ``V3`` ...,
        leaving the old file on disk): counted in :attr:`n_aside`, never retrieved, not in
        :meth:`size`. The code rewrites on every success of a known name, identical or
        not, and so does this class.
    Retrieval
        The top 5 skills by similarity of their description to the task text (the code's
        ``similarity_search_with_score(query, k=min(count, 5))``: always the 5 best,
        however low their score), here a bag-of-words cosine of the description's key
        words and the task's content words; ties broken by the older skill first.
        No cap on the library.
    """

    name = "voyager"
    TOP_K = 5

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: key -> named calls, in the order the names were first written.
        self.skills: dict[tuple, tuple] = {}
        #: Old versions ``(key, calls)`` set aside by an overwrite.
        self.aside: list = []

    @property
    def n_aside(self) -> int:
        """Old versions kept aside."""
        return len(self.aside)

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        calls = self._lesson(run)
        if not run.self_assessed_success or not key or not calls:
            return 0
        if key in self.skills:
            self.aside.append((key, self.skills[key]))
        self.skills[key] = calls
        return self.tokens_per_review

    def retrieve(self, task: str) -> list[tuple]:
        """The keys of the top-5 skills for ``task``, best first."""
        words = self._words(task)
        ranked = sorted(enumerate(self.skills),
                        key=lambda x: (-cosine(frozenset(x[1]), words), x[0]))
        return [k for _, k in ranked[:self.TOP_K]]

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        words = self._words(task)
        got = self.retrieve(task)
        return Knowledge(calls=[list(self._ix_calls(self.skills[k])) for k in got],
                         entries=len(got),
                         irrelevant=sum(not self._about(k, words) for k in got))

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(k), self._ix_calls(c)) for k, c in self.skills.items()]

    def size(self) -> int:
        return len(self.skills)
