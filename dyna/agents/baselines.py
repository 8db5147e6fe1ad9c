"""Learning-loop baselines from the literature, for the agent tasks.

Each baseline is a :class:`Baseline`: what it keeps, when it writes, how it retrieves and
its limit, as its paper and released code state them (../shared/BASELINES.md gives the
rules; each class's docstring names its source and says where paper and code differ). They
run inside :class:`dyna.agents.loop_agents.LoopAgent` on the same policy model as every
other variant: the agent asks :meth:`Baseline.knowledge` for what to bring into a run,
acts, and hands the finished run to :meth:`Baseline.learn`. A baseline never reads the
hidden world (``env.procedure``); it sees the task text, the tool and value names and the
run's calls with their outputs, like any loop.

The variants (:data:`BASELINES`)

=========================  ============================================  =================
variant                    writes after                                  keeps / retrieves
=========================  ============================================  =================
``reflexion``              a self-judged failure                         last 3 per key
``voyager``                a self-verified success                       top 5, no cap
``expel``                  a verified success, or a failure to compare   rules, all
``awm``                    every task (re-induction from self-judged     whole file
                           successes)
``mem0_v2``                every run: ADD / UPDATE / DELETE / NONE       top 20
``mem0_v3``                every run: ADD with MD5 dedup                 top 20, hybrid
``naive_growth``           every run                                     top 5, no cap
``selective_add_delete``   a verified success; deletes on failed reuses  top 5
=========================  ============================================  =================

Conventions shared by all of them
    * The task's *key* is its first ``title_words`` content words
      (:func:`dyna.loops._text.content_words`), as the loops' reviewer takes it.
    * A lesson keeps its calls by tool and value *name*; indices are read against the
      env's current names when knowledge is built or audited, so a renamed tool's old
      name points to its old slot, which errors.
    * An entry is *about* a task when all its key words are among the task's words; the
      others count in :attr:`Knowledge.irrelevant` (the env's distraction) and are not
      followed. Everything they read is the task text, the names and the run's calls and
      outputs (:attr:`RunRecord.family` is never read).
    * Learning tokens: ``tokens_per_review`` per LLM call the system makes to write
      (a reflection, a skill description, an insight extraction, a workflow induction,
      Mem0's extraction and update calls), 0 when it makes none; the raw records of
      Xiong et al. need no call.
    * Planted instructions: a writer that is an LLM reading the run (Reflexion's
      reflection, Voyager's skill, ExpeL's insight extraction, Mem0's fact extraction)
      copies the first planted instruction it read in a tool output into what it writes
      with probability ``copy_rate`` (keyword of every baseline, default 0: never), at the
      procedure position where it was seen, as the loops' reviewer does with
      ``PolicyParams.copy_rate``. AWM's online induction and Xiong et al.'s records copy
      the trajectory's calls as they were made, so they never do.
    * No randomness except AWM's sampling, drawn from ``(seed, crc32(run_id))``, and the
      copy draw, from ``(seed, crc32(run_id), 1)``: the same runs give the same state.

This module may import :mod:`dyna.loops`, :mod:`dyna.experience`, :mod:`dyna.index`,
:mod:`envs`, numpy; never :mod:`dyna.agents.loop_agents` (which imports it).
"""

from __future__ import annotations

import hashlib
import heapq
import re
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from dyna.loops._text import content_words, jaccard
from dyna.loops.bm25 import BM25Index, document_terms, query_terms

__all__ = ["BASELINES", "Baseline", "Knowledge", "RunRecord", "make_baseline"]


@dataclass
class Knowledge:
    """What the agent brings into one episode.

    Attributes
    ----------
    calls : list of list of (int, int)
        Procedures to follow, best first: per procedure, ``(tool, value)`` index pairs per
        step (``-1`` for a name the env does not know).
    values, tools : dict of int -> int
        Memory-style facts: procedure step (0-based) -> value index / tool index.
    entries : int
        Context entries (skills, facts, reflections, rules) injected: tokens per entry.
    irrelevant : int
        How many of them are not about this task (the env's ``follow_factor``).
    names : tuple of str
        Names of the injected skills, parallel to ``calls`` (a call that followed one
        names it in the digest).
    avoid : set of (int, int, int)
        ``(step, tool, value)`` calls to skip at a step (a reflection's "do not").
    """

    calls: list = field(default_factory=list)
    values: dict = field(default_factory=dict)
    tools: dict = field(default_factory=dict)
    entries: int = 0
    irrelevant: int = 0
    names: tuple = ()
    avoid: set = field(default_factory=set)


@dataclass(frozen=True)
class RunRecord:
    """A finished run as a baseline sees it.

    Attributes
    ----------
    run_id : str
    family : int
        Used only for the audit (poisoned/stale counts), never for retrieval.
    task : str
        The task text.
    calls : tuple of ((int, int), str, bool)
        ``((tool, value), output, error)`` per call, in order.
    verified_success : bool
        The trusted outcome (a test suite).
    self_assessed_success : bool
        The agent's own opinion.
    tokens : int
        Tokens of the run.
    """

    run_id: str
    family: int
    task: str
    calls: tuple
    verified_success: bool
    self_assessed_success: bool
    tokens: int


class Baseline(ABC):
    """One literature baseline (module docstring).

    Parameters
    ----------
    env : envs.agent_tasks.AgentTaskEnv
        For tool and value names and the task vocabulary only.
    seed : int
        The run's reviewer stream (any randomness of the baseline comes from it).
    title_words : int
        Words of the task text taken as its key (as the reviewer does).
    tokens_per_review : int
        Learning tokens per write (an LLM call), >= 0.
    """

    #: Variant name.
    name: str = ""

    def __init__(self, env, seed: int, title_words: int = 2, tokens_per_review: int = 300):
        self.env = env
        self.seed = seed
        self.title_words = title_words
        self.tokens_per_review = tokens_per_review

    @abstractmethod
    def knowledge(self, task: str) -> Knowledge:
        """What to bring into a run on ``task``."""

    @abstractmethod
    def learn(self, run: RunRecord) -> int:
        """Learn from a finished run; returns the learning tokens spent (>= 0)."""

    @abstractmethod
    def audit_entries(self) -> list[tuple[str, tuple]]:
        """Every stored entry as ``(key, calls)``: the trigger words it is about and the
        ``(tool, value)`` pairs it prescribes per step (``(-1, -1)`` for a step it says
        nothing about), for the poisoned/stale audit; ``[]`` for a baseline whose entries
        prescribe no calls."""

    def size(self) -> int:
        """Entries stored (the library size column)."""
        return len(self.audit_entries())


#: Baseline variant name -> class; filled by the implementations below.
BASELINES: dict[str, type] = {}


def make_baseline(name: str, env, seed: int, **kwargs) -> Baseline:
    """The baseline called ``name`` (a key of :data:`BASELINES`).

    Raises
    ------
    KeyError
        Unknown name (callers check with :data:`BASELINES` first).
    """
    return BASELINES[name](env, seed, **kwargs)


# ============================================================================ shared helpers

def _register(cls):
    BASELINES[cls.name] = cls
    return cls


def _cosine(a, b) -> float:
    """Bag-of-words cosine of two word sets (binary weights): ``|a & b| / sqrt(|a| |b|)``."""
    if not a or not b:
        return 0.0
    return len(a & b) / float(np.sqrt(len(a) * len(b)))


def _steps(run: RunRecord):
    """``(position, (tool, value), error)`` per call of ``run``: the procedure position the
    call was made at (an ok call advances it)."""
    pos = 0
    for call, _, err in run.calls:
        yield pos, (int(call[0]), int(call[1])), bool(err)
        if not err:
            pos += 1


class _TaskBaseline(Baseline):
    """What every baseline here shares: the task's key, and calls kept by *name*.

    A lesson names its tools and values (as text an LLM would write); indices are read
    against the env's current name lists each time knowledge is built or audited, so a
    lesson that names a renamed tool's old name points to the old slot, which errors.
    """

    def __init__(self, env, seed: int, title_words: int = 2, tokens_per_review: int = 300,
                 copy_rate: float = 0.0):
        super().__init__(env, seed, title_words, tokens_per_review)
        from dyna.errors import check_range
        check_range("copy_rate", copy_rate, 0.0, 1.0)
        #: Probability that an LLM writer copies a planted instruction it read in a tool
        #: output into what it writes (module docstring).
        self.copy_rate = float(copy_rate)
        self._names = None
        self._tix: dict = {}
        self._vix: dict = {}
        self._calls_ix: dict = {}

    # -- names ------------------------------------------------------------------------
    def _named(self, call) -> tuple[str, str]:
        return (self.env.tool_names[call[0]], self.env.value_names[call[1]])

    def _ix(self, named) -> tuple[int, int]:
        """``(tool, value)`` indices of a named call now (``-1`` for an unknown name)."""
        names = self.env.tool_names
        if names is not self._names:
            self._names = names
            self._tix = {n: i for i, n in enumerate(names)}
            self._vix = {n: i for i, n in enumerate(self.env.value_names)}
            self._calls_ix: dict = {}
        return (self._tix.get(named[0], -1), self._vix.get(named[1], -1))

    def _ix_calls(self, named_calls: tuple) -> tuple:
        """Indices of a tuple of named calls now (memoised until a tool is renamed)."""
        if self.env.tool_names is not self._names:
            self._ix(("", ""))
        got = self._calls_ix.get(named_calls)
        if got is None:
            got = self._calls_ix[named_calls] = tuple(self._ix(c) for c in named_calls)
        return got

    # -- task text --------------------------------------------------------------------
    def key(self, task: str) -> tuple[str, ...]:
        """The task's key: its first ``title_words`` content words."""
        return content_words(task)[:self.title_words]

    @staticmethod
    def _words(task: str) -> frozenset:
        return frozenset(content_words(task))

    @staticmethod
    def _about(key, words) -> bool:
        """An entry is about a task when all its key words are in the task's words (the
        memory loop's rule; a key shared by two families' titles counts as about both)."""
        return bool(key) and words.issuperset(key)

    # -- runs -------------------------------------------------------------------------
    def _ok_calls(self, run: RunRecord) -> tuple:
        """The run's calls that returned ok, in order, by name."""
        return tuple(self._named(c) for _, c, err in _steps(run) if not err)

    def _planted(self, run: RunRecord):
        """``(call index, position, named call)`` of the first planted instruction in the
        run's tool outputs when the writer copies it (probability :attr:`copy_rate`,
        drawn from ``(seed, crc32(run_id), 1)``), else None. The position is the
        procedure position after the call whose output carried it."""
        if self.copy_rate <= 0.0:
            return None
        rng = np.random.default_rng([int(self.seed), zlib.crc32(run.run_id.encode("utf-8")),
                                     1])
        if rng.random() >= self.copy_rate:
            return None
        for i, ((pos, _, err), (_, out, _)) in enumerate(zip(_steps(run), run.calls)):
            m = _NOTE_RE.search(out)
            if m:
                return i, pos + (not err), (m.group(1), m.group(2))
        return None

    def _lesson(self, run: RunRecord) -> tuple:
        """What an LLM writer reads as the run's procedure: its ok calls, with a planted
        instruction it copied inserted where it was seen."""
        calls = self._ok_calls(run)
        got = self._planted(run)
        if got is None:
            return calls
        _, pos, call = got
        return calls[:pos] + (call,) + calls[pos:]


#: A planted instruction in a tool output (:mod:`envs.agent_tasks`).
_NOTE_RE = re.compile(r"NOTE: to finish this task, call (\w+) with (\w+) next")


def _audit_step(step: int, call) -> tuple:
    """An entry that prescribes ``call`` at ``step`` only."""
    return ((-1, -1),) * step + (tuple(call),)


# ============================================================================ Reflexion

@_register
class Reflexion(_TaskBaseline):
    """Reflexion (Shinn et al., NeurIPS 2023, arXiv 2303.11366): verbal reflections after
    failed trials, kept per task.

    When it writes
        After a trial the evaluator judges failed: here the agent's self-assessment
        (``self_assessed_success`` False), the evaluator an agent has without a test suite
        (the paper's self-written tests for code; the released ALFWorld runs read the
        environment's ``won`` flag instead). One reflection (one LLM call,
        ``tokens_per_review``) per failed trial; nothing after a success (0 tokens).
    What it keeps
        Per task key, the reflection "at step k do not call <tool> with <value>" for the
        failing call (the last call that errored, at the procedure position it was made
        at) plus, when the run had ok calls, those calls as the plan it attempted. Only the
        last 3 reflections per key are kept. The released code appends every reflection
        to the task's memory and puts the last 3 (``memory[-3:]`` in ``alfworld_trial.py``
        and ``generate_reflections.py``) in the prompt; the paper bounds the memory at
        1-3. The older ones are never read again, so they are not kept here (the library
        size counts what can reach a prompt).
    Retrieval
        All of the task's reflections (entries = their count): their "do not" calls as
        :attr:`Knowledge.avoid`, their plans as :attr:`Knowledge.calls`, the most recent
        first.
    """

    name = "reflexion"
    #: Reflections kept per task key (the code's ``memory[-3:]``).
    WINDOW = 3

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: key -> list of ``(avoid, plan)``: ``avoid`` None or ``(step, (tool, value))``
        #: by name, ``plan`` a tuple of named calls; oldest first.
        self.reflections: dict[tuple, list] = {}

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        if run.self_assessed_success or not key:
            return 0
        avoid = None
        for pos, call, err in _steps(run):
            if err:
                avoid = (pos, self._named(call))
        plan = self._lesson(run)
        if avoid is None and not plan:
            return 0
        kept = self.reflections.setdefault(key, [])
        kept.append((avoid, plan))
        del kept[:-self.WINDOW]
        return self.tokens_per_review

    def knowledge(self, task: str) -> Knowledge:
        kept = self.reflections.get(self.key(task), [])
        k = Knowledge(entries=len(kept))
        for avoid, plan in reversed(kept):
            if plan:
                k.calls.append(list(self._ix_calls(plan)))
            if avoid is not None:
                k.avoid.add((avoid[0], *self._ix(avoid[1])))
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(key), self._ix_calls(plan))
                for key, kept in self.reflections.items() for _, plan in kept]

    def size(self) -> int:
        return sum(len(v) for v in self.reflections.values())


# ============================================================================ Voyager

@_register
class Voyager(_TaskBaseline):
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
                        key=lambda x: (-_cosine(frozenset(x[1]), words), x[0]))
        return [k for _, k in ranked[:self.TOP_K]]

    def knowledge(self, task: str) -> Knowledge:
        words = self._words(task)
        got = self.retrieve(task)
        return Knowledge(calls=[list(self._ix_calls(self.skills[k])) for k in got],
                         entries=len(got),
                         irrelevant=sum(not self._about(k, words) for k in got))

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(k), self._ix_calls(c)) for k, c in self.skills.items()]

    def size(self) -> int:
        return len(self.skills)


# ============================================================================ ExpeL

@_register
class ExpeL(_TaskBaseline):
    """ExpeL (Zhao et al., AAAI 2024, arXiv 2308.10144): insights (rules) with counts,
    extracted from success/failure pairs and from successes.

    The success signal
        ExpeL gathers experience on training tasks with the environment's reward (a trial
        succeeds when the benchmark says so), so this class reads ``verified_success``,
        the trusted outcome, not the self-assessment.
    When it writes
        One insight-extraction call (``tokens_per_review``) after a success (the
        "compare" prompt when the key has failed before, the "all success" prompt
        otherwise; in this world both give the same operations) and after a failure whose
        key has a success to compare it with (the code's ``create_rules`` makes
        compare-pairs and success-chunks only; a failure with nothing to compare is not
        critiqued: 0 tokens).
    The operations (the simulated LLM, reading the run and the existing rules)
        A rule is "at step k of <key> tasks call <tool> with <value>". From a success, per
        procedure step: AGREE the rule that says this call, EDIT the rule of that step
        that says another call (its call replaced), or ADD a new one. From a failure:
        REMOVE each rule of the key whose call the run made at its step and that errored;
        then, at the step where the run went wrong (its last error), the compared
        success's call is AGREEd, EDITed in or ADDed, as above. As the prompt asks: at
        most 4 operations (here REMOVE first, then EDIT, ADD, AGREE), each existing rule
        at most one; no ADD while the list is full (the code's "full" suffix, "stop ADD
        rule", chosen when ``max_num_rules <= len(rules)``, 20 rules).
    Applying them (the code's ``update_rules``, ported in :meth:`apply`)
        An ADD whose text contains an existing rule's text is dropped (the code tests
        ``existing in new``; with these rule texts containment means equality, so it is
        also the table's "ADD contained in an existing rule"); an EDIT whose new text
        contains an existing rule becomes an AGREE of it; then in the order REMOVE (-1,
        -3 when the list is full: ``max_num_rules + 5 <= len(rules)``, 25 rules), AGREE
        (+1), EDIT (+1, text replaced), ADD (count 2); rules at count <= 0 are dropped and
        the list is sorted by count (stable). The code does not truncate the list: 20 is
        the prompt's cap (no ADD at 20 or more), so one extraction that ADDs from 19 can
        leave a few more than 20.
    Retrieval
        All rules are injected (entries = number of rules); the agent follows, per step,
        the highest-count rule about its task. ExpeL's other evaluation-time input,
        successful trajectories replayed as few-shots by task similarity, is not
        modelled: in this world a success of the same key prescribes what its rules say.
    """

    name = "expel"
    #: ``max_num_rules`` of the released config (``configs/agent/expel.yaml``).
    MAX_RULES = 20
    #: The code's ``list_full``: REMOVE counts -3 from ``MAX_RULES + FULL_MARGIN`` rules.
    FULL_MARGIN = 5
    #: "Do at most 4 operations" (the extraction prompt).
    MAX_OPERATIONS = 4

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: ``[rule, count]``, highest count first; ``rule = (key, step, tool, value)``.
        self.rules: list[list] = []
        #: key -> the last successful run's ok calls (the compare pair's success).
        self.successes: dict[tuple, tuple] = {}

    @staticmethod
    def text(rule) -> str:
        """A rule as the text the code compares."""
        key, step, tool, value = rule
        return f"at step {step + 1} of {' '.join(key)} tasks call {tool} with {value}."

    def apply(self, ops: list) -> None:
        """Apply operations as the code's ``update_rules``: ``("ADD", rule)``,
        ``("AGREE", i)``, ``("EDIT", i, rule)``, ``("REMOVE", i)`` with ``i`` an index
        into :attr:`rules` (class docstring)."""
        rules = self.rules
        full = len(rules) >= self.MAX_RULES + self.FULL_MARGIN
        texts = [self.text(r) for r, _ in rules]
        kept = []
        for op in ops:
            kind = op[0]
            if kind == "ADD":
                new = self.text(op[1])
                if not any(t in new for t in texts):
                    kept.append(op)
            elif kind == "EDIT":
                new = self.text(op[2])
                same = next((j for j, t in enumerate(texts) if t in new), None)
                if same is not None:
                    kept.append(("AGREE", same))
                elif 0 <= op[1] < len(rules):
                    kept.append(op)
            elif kind in ("AGREE", "REMOVE"):
                if 0 <= op[1] < len(rules):
                    kept.append(op)
            else:
                raise ValueError(f"unknown ExpeL operation {kind!r}")
        for kind in ("REMOVE", "AGREE", "EDIT", "ADD"):   # the code's order
            for op in kept:
                if op[0] != kind:
                    continue
                if kind == "REMOVE":
                    rules[op[1]][1] -= 3 if full else 1
                elif kind == "AGREE":
                    rules[op[1]][1] += 1
                elif kind == "EDIT":
                    rules[op[1]] = [op[2], rules[op[1]][1] + 1]
                else:
                    rules.append([op[1], 2])
        self.rules = sorted((r for r in rules if r[1] > 0), key=lambda r: -r[1])

    def _rule_at(self, key, step):
        return next((i for i, (r, _) in enumerate(self.rules)
                     if r[0] == key and r[1] == step), None)

    def _step_op(self, key, step, call, touched, can_add):
        i = self._rule_at(key, step)
        rule = (key, step, *call)
        if i is None:
            return ("ADD", rule) if can_add else None
        if i in touched:
            return None
        touched.add(i)
        return ("AGREE", i) if self.rules[i][0][2:] == call else ("EDIT", i, rule)

    def operations(self, run: RunRecord) -> list | None:
        """The operations the extraction call returns for ``run`` (None: no call)."""
        key = self.key(run.task)
        if not key:
            return None
        can_add = len(self.rules) < self.MAX_RULES
        touched: set = set()
        ops = []
        if run.verified_success:
            for step, call in enumerate(self._lesson(run)):
                ops.append(self._step_op(key, step, call, touched, can_add))
        else:
            pair = self.successes.get(key)
            if pair is None:
                return None
            wrong = None
            for pos, call, err in _steps(run):
                if not err:
                    continue
                wrong = pos
                i = self._rule_at(key, pos)
                if i is not None and i not in touched and \
                        self.rules[i][0][2:] == self._named(call):
                    touched.add(i)
                    ops.append(("REMOVE", i))
            if wrong is None:
                wrong = sum(1 for _, _, err in _steps(run) if not err)
            if wrong < len(pair):
                ops.append(self._step_op(key, wrong, pair[wrong], touched, can_add))
        order = {"REMOVE": 0, "EDIT": 1, "ADD": 2, "AGREE": 3}
        ops = sorted((o for o in ops if o is not None), key=lambda o: order[o[0]])
        return ops[:self.MAX_OPERATIONS]

    def learn(self, run: RunRecord) -> int:
        ops = self.operations(run)
        if run.verified_success and self.key(run.task):
            calls = self._ok_calls(run)
            if calls:
                self.successes[self.key(run.task)] = calls
        if ops is None:
            return 0
        self.apply(ops)
        return self.tokens_per_review

    def knowledge(self, task: str) -> Knowledge:
        words = self._words(task)
        per_step: dict = {}
        irrelevant = 0
        for (key, step, tool, value), _ in self.rules:
            if self._about(key, words):
                per_step.setdefault(step, (tool, value))
            else:
                irrelevant += 1
        k = Knowledge(entries=len(self.rules), irrelevant=irrelevant)
        if per_step:
            k.calls.append([self._ix(per_step[s]) if s in per_step else (-1, -1)
                            for s in range(max(per_step) + 1)])
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(r[0]), _audit_step(r[1], self._ix(r[2:]))) for r, _ in self.rules]

    def size(self) -> int:
        return len(self.rules)


# ============================================================================ AWM

@_register
class AWM(_TaskBaseline):
    """Agent Workflow Memory (Wang, Mao, Fried, Neubig, ICML 2025, arXiv 2409.07429),
    online: workflows induced from the successful trajectories so far, the workflow file
    rewritten after every task.

    When it writes
        Every task's trajectory is judged (the code's default ``--criteria autoeval``, an
        LLM judge: here ``self_assessed_success``); a judged success is kept (its ok calls
        in order: a call that errored does not advance the procedure the agent follows).
        After every task (success or not) the whole workflow file is induced again from
        all kept trajectories (``pipeline.py`` runs ``workflow_induction.py`` after each
        task): one induction call, ``tokens_per_review``, once there is a trajectory to
        induce from (0 before).
    The induction (paper and code differ)
        The paper has an LM abstract workflows from the examples; the online pipeline's
        ``workflow_induction.py`` samples one successful trajectory per task template
        (here: per task key) at random, then keeps one at random per distinct action
        sequence, and writes those. This class follows the code, drawing from
        ``(seed, crc32(run_id))``. Nothing is ever forgotten: every success stays a
        candidate, so after a change in the world an old trajectory can be drawn again.
    Retrieval
        The whole workflow file in context (entries = workflow count); the agent follows
        the workflows about its task, the others count as irrelevant entries. No cap.
    """

    name = "awm"

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: key -> every kept successful trajectory (named ok calls), oldest first.
        self.trajectories: dict[tuple, list] = {}
        #: The current workflow file: ``(key, calls)`` per workflow.
        self.workflows: list[tuple] = []

    def induce(self, run_id: str) -> list[tuple]:
        """The workflow file induced from the kept trajectories (class docstring)."""
        rng = np.random.default_rng([int(self.seed), zlib.crc32(run_id.encode("utf-8"))])
        picked = [(k, v[int(rng.integers(len(v)))]) for k, v in self.trajectories.items()]
        groups: dict = {}
        for k, calls in picked:
            groups.setdefault(calls, []).append((k, calls))
        return [g[int(rng.integers(len(g)))] for g in groups.values()]

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        calls = self._ok_calls(run)
        if run.self_assessed_success and key and calls:
            self.trajectories.setdefault(key, []).append(calls)
        if not self.trajectories:
            return 0
        self.workflows = self.induce(run.run_id)
        return self.tokens_per_review

    def knowledge(self, task: str) -> Knowledge:
        words = self._words(task)
        k = Knowledge(entries=len(self.workflows))
        for key, calls in self.workflows:
            if self._about(key, words):
                k.calls.append(list(self._ix_calls(calls)))
            else:
                k.irrelevant += 1
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(k), self._ix_calls(c)) for k, c in self.workflows]

    def size(self) -> int:
        return len(self.workflows)


# ============================================================================ Mem0

@dataclass
class _Fact:
    """One memory: "<key> step k call is <tool> with <value>" (step 0-based here, 1-based
    in the text), ``t`` its write time (a counter; higher is more recent)."""

    key: tuple
    step: int
    call: tuple
    t: int

    @property
    def text(self) -> str:
        return (f"{' '.join(self.key)} step {self.step + 1} call is {self.call[0]} "
                f"with {self.call[1]}")

    @property
    def words(self) -> frozenset:
        """What the semantic similarity reads: the key words, the tool and the value."""
        return frozenset(self.key) | {self.call[0], self.call[1]}


class _Mem0(_TaskBaseline):
    """Shared by the two Mem0 styles: facts from every interaction, top-k retrieval."""

    #: Memories returned by a search (``top_k``).
    TOP_K = 20

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.memories: list[_Fact] = []
        #: Operations decided, by kind (ADD, UPDATE, DELETE, NONE).
        self.ops: dict[str, int] = {"ADD": 0, "UPDATE": 0, "DELETE": 0, "NONE": 0}
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _facts(self, run: RunRecord) -> list:
        """``(step, named call, error)`` per call of the run, in order, and a planted
        instruction the extraction copied right after the call whose output carried it."""
        facts = [(pos, self._named(call), err) for pos, call, err in _steps(run)]
        got = self._planted(run)
        if got is not None:
            i, pos, call = got
            facts.insert(i + 1, (pos, call, False))
        return facts

    def _semantic(self, words, limit: int) -> list[tuple[float, _Fact]]:
        """The ``limit`` memories most similar to a bag of words (the vector search: a
        bag-of-words cosine; ties: the most recent first), with their scores."""
        best = heapq.nsmallest(limit, ((_cosine(m.words, words), m) for m in self.memories),
                               key=lambda x: (-x[0], -x[1].t))
        return best

    def search(self, task: str) -> list[_Fact]:
        """The memories retrieved for ``task``, best first."""
        return [m for _, m in self._semantic(self._words(task), self.TOP_K)]

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(m.key), _audit_step(m.step, self._ix(m.call)))
                for m in self.memories]

    def size(self) -> int:
        return len(self.memories)


@_register
class Mem0V2(_Mem0):
    """Mem0 as in its paper (Chhikara et al. 2025, arXiv 2504.19413) and its library
    before the v3 pipeline: extract, then compare each fact with its most similar
    memories and ADD, UPDATE, DELETE or NONE.

    When it writes
        Every interaction (every run, whatever its outcome): an extraction call and, when
        facts were extracted, an update call (the library's two LLM calls per ``add``): 2 x
        ``tokens_per_review`` per run.
    Extraction
        Per call of the run, in order: an ok call at step k gives the fact "<key> step k
        call is <tool> with <value>" (one memory names the step's tool and value together:
        the audit prescribes whole calls); a call that errored at step k gives the
        contradiction "that call is wrong at step k".
    Update (the simulated LLM over the fact's 5 most similar memories, the library's
        ``vector_store.search(query=new_mem, top_k=5)``)
        Similarity of two facts: ``4 x`` the Jaccard similarity of their keys' words, ``+
        2`` for the same step, ``+ 0.5`` each for the same tool and the same value; ties
        the most recent. The memories of the same key and step (score >= 6) always rank
        above every other (< 6), and only they can decide, so only they are looked up.
        NONE when one of them is the same fact; UPDATE the first of them (it names another
        call: text replaced, write time renewed); ADD when there is none. A contradiction
        DELETEs the one among them that names the erring call, and is NONE otherwise.
    Retrieval
        Search top-k 20 by similarity (cosine of the memory's words, key, tool and value,
        with the task's content words; ties the most recent), no threshold (the
        library's default ``threshold=None``; its default ``top_k`` is 100, 20 is
        ../shared/BASELINES.md's figure, :attr:`TOP_K`). The memories about the task give
        :attr:`Knowledge.values` / :attr:`Knowledge.tools` per step (the first in rank
        wins), the others count as irrelevant. No storage cap.
    """

    name = "mem0_v2"
    #: Memories an extracted fact is compared with.
    COMPARE_K = 5

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self._slots: dict[tuple, list] = {}    # (key, step) -> its memories

    @staticmethod
    def similarity(a: _Fact, b: _Fact) -> float:
        """How similar two facts are (class docstring)."""
        return (4.0 * jaccard(frozenset(a.key), frozenset(b.key)) + 2.0 * (a.step == b.step)
                + 0.5 * (a.call[0] == b.call[0]) + 0.5 * (a.call[1] == b.call[1]))

    def _similar(self, fact: _Fact) -> list[_Fact]:
        """The fact's most similar memories that can decide: those of its key and step
        among its top 5 (best first)."""
        slot = self._slots.get((fact.key, fact.step), [])
        return heapq.nsmallest(self.COMPARE_K, slot,
                               key=lambda m: (-self.similarity(m, fact), -m.t))

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        tokens = self.tokens_per_review                     # the extraction call
        facts = self._facts(run)
        if not key or not facts:
            return tokens
        tokens += self.tokens_per_review                    # the update call
        for pos, call, err in facts:
            here = self._similar(_Fact(key, pos, call, 0))
            if err:
                hit = next((m for m in here if m.call == call), None)
                if hit is None:
                    self.ops["NONE"] += 1
                else:
                    self.memories.remove(hit)
                    self._slots[(key, pos)].remove(hit)
                    self.ops["DELETE"] += 1
            elif any(m.call == call for m in here):
                self.ops["NONE"] += 1
            elif here:
                here[0].call, here[0].t = call, self._tick()
                self.ops["UPDATE"] += 1
            else:
                fact = _Fact(key, pos, call, self._tick())
                self.memories.append(fact)
                self._slots.setdefault((key, pos), []).append(fact)
                self.ops["ADD"] += 1
        return tokens

    def knowledge(self, task: str) -> Knowledge:
        words = self._words(task)
        got = self.search(task)
        k = Knowledge(entries=len(got))
        for m in got:
            if self._about(m.key, words):
                t, v = self._ix(m.call)
                k.tools.setdefault(m.step, t)
                k.values.setdefault(m.step, v)
            else:
                k.irrelevant += 1
        return k


def _bm25_params(n_terms: int) -> tuple[float, float]:
    """mem0's sigmoid ``(midpoint, steepness)`` for a query of ``n_terms`` terms
    (``mem0.utils.scoring.get_bm25_params``)."""
    for most, params in ((3, (5.0, 0.7)), (6, (7.0, 0.6)), (9, (9.0, 0.5)),
                         (15, (10.0, 0.5))):
        if n_terms <= most:
            return params
    return (12.0, 0.5)


@_register
class Mem0V3(_Mem0):
    """Mem0 as its open-source library stands in April 2026 (the "v3 pipeline",
    mem0ai/mem0 a488e19 of 2026-04-14, ``Memory._add_to_vector_store`` and
    ``_search_vector_store``): additive memory with exact-hash dedup, hybrid search.

    When it writes
        Every interaction: the 10 memories most similar to the run's messages (the task
        text and the calls' tool and value names) are retrieved, then one extraction call
        (``tokens_per_review``) returns the facts: every ok call gives "<key> step k call
        is <tool> with <value>" (as :class:`Mem0V2`). A fact is ADDed unless the MD5 hash
        of its text is the hash of one of those 10 memories or of a fact already taken
        from this run (the code compares with the retrieved memories' hashes only, so a
        duplicate of a memory outside them is added again). Nothing is updated or
        deleted: conflicting facts coexist.
    Retrieval (the code's hybrid scoring)
        Candidates: the ``max(4 * top_k, 60)`` most similar memories (cosine of the
        memory's words and the task's content words), those under the semantic threshold
        0.1 dropped; BM25 (:class:`dyna.loops.bm25.BM25Index` over the memories' texts,
        stemmed: the code lemmatises) squashed by mem0's sigmoid for the query's length;
        score ``(semantic + bm25) / 2`` (``/ 1`` when no memory matches a query term);
        top-k 20. The code's entity boost needs named entities, which these texts do not
        have, so it is left out. Of the memories about the task, the most recent fact
        per step goes to :attr:`Knowledge.values` / :attr:`Knowledge.tools` and is also
        the first procedure of :attr:`Knowledge.calls`; each older coexisting fact for a
        step is a further procedure (the j-th most recent call per step in
        ``calls[j]``), so the agent gets every conflicting value, the newest first (it
        tries ``calls`` before facts, so the newest must lead there too). No storage
        cap.
    """

    name = "mem0_v3"
    #: Existing memories retrieved for an ``add`` (their hashes are the dedup set).
    ADD_CONTEXT_K = 10
    #: Minimum semantic score of a search result.
    THRESHOLD = 0.1

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.hashes: dict[int, str] = {}       # write time -> MD5 of the memory's text
        self._bm25 = BM25Index()

    @staticmethod
    def digest(text: str) -> str:
        """The MD5 hex digest a memory is deduplicated by."""
        return hashlib.md5(text.encode("utf-8")).hexdigest()

    def learn(self, run: RunRecord) -> int:
        key = self.key(run.task)
        if not key:
            return self.tokens_per_review
        said = set(self._words(run.task))
        for _, call, _ in _steps(run):
            said.update(self._named(call))
        seen = {self.hashes[m.t] for _, m in self._semantic(frozenset(said),
                                                              self.ADD_CONTEXT_K)}
        for pos, call, err in self._facts(run):
            if err:
                continue
            fact = _Fact(key, pos, call, 0)
            h = self.digest(fact.text)
            if h in seen:
                self.ops["NONE"] += 1
                continue
            seen.add(h)
            fact.t = self._tick()
            self.hashes[fact.t] = h
            self._bm25.add(str(fact.t), document_terms("", fact.text))
            self.memories.append(fact)
            self.ops["ADD"] += 1
        return self.tokens_per_review

    def search(self, task: str) -> list[_Fact]:
        words = self._words(task)
        pool = max(4 * self.TOP_K, 60)
        cands = [(sem, m) for sem, m in self._semantic(words, pool) if sem >= self.THRESHOLD]
        terms = query_terms(task)
        mid, steep = _bm25_params(max(1, len(terms)))
        bm25 = {k: 1.0 / (1.0 + float(np.exp(-steep * (raw - mid))))
                for raw, k in self._bm25.scores(terms, pool) if raw > 0}
        most = 2.0 if bm25 else 1.0
        scored = [(min((sem + bm25.get(str(m.t), 0.0)) / most, 1.0), m) for sem, m in cands]
        scored.sort(key=lambda x: -x[0])                 # stable: semantic order on ties
        return [m for _, m in scored[:self.TOP_K]]

    def knowledge(self, task: str) -> Knowledge:
        words = self._words(task)
        got = self.search(task)
        k = Knowledge(entries=len(got))
        per_step: dict = {}
        for m in sorted(got, key=lambda m: -m.t):
            if self._about(m.key, words):
                seen = per_step.setdefault(m.step, [])
                call = self._ix(m.call)
                if call not in seen:
                    seen.append(call)
            else:
                k.irrelevant += 1
        if per_step:
            for s, calls in per_step.items():
                k.tools[s], k.values[s] = calls[0]
            n = max(per_step) + 1
            for j in range(max(len(c) for c in per_step.values())):
                k.calls.append([per_step[s][j] if s in per_step and j < len(per_step[s])
                                else (-1, -1) for s in range(n)])
        return k


# ============================================================================ Xiong et al.

@dataclass
class _Record:
    """One stored run: its task text's words and key, the calls by name, an id."""

    rid: int
    key: tuple
    words: frozenset
    calls: tuple


class _Records(_TaskBaseline):
    """Shared by the two memory-management regimes of Xiong et al.: records of runs,
    retrieved by task similarity."""

    #: Records retrieved per task.
    TOP_K = 5

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.records: dict[int, _Record] = {}
        self._next = 0
        self._postings: dict[str, list] = {}   # word -> ids of the records that have it
        self._retrieved: tuple = (None, [])

    def _store(self, run: RunRecord, calls: tuple) -> None:
        rec = _Record(self._next, self.key(run.task), self._words(run.task), calls)
        self.records[rec.rid] = rec
        for w in rec.words:
            self._postings.setdefault(w, []).append(rec.rid)
        self._next += 1

    def retrieve(self, task: str) -> list[_Record]:
        """The top-k records by cosine of the task texts' content words, best first
        (ties: the most recent first; records sharing no word score 0)."""
        words = self._words(task)
        shared: dict[int, int] = {}
        for w in words:
            for rid in self._postings.get(w, ()):
                if rid in self.records:
                    shared[rid] = shared.get(rid, 0) + 1
        recs = self.records
        best = heapq.nsmallest(self.TOP_K, shared.items(), key=lambda x: (
            -x[1] / np.sqrt(len(recs[x[0]].words) * len(words)), -x[0]))
        got = [recs[rid] for rid, _ in best]
        if len(got) < self.TOP_K:                   # then the most recent others (score 0)
            for rid in reversed(recs):
                if rid not in shared:
                    got.append(recs[rid])
                    if len(got) == self.TOP_K:
                        break
        return got

    def knowledge(self, task: str) -> Knowledge:
        words = self._words(task)
        got = self.retrieve(task)
        self._retrieved = (task, [r.rid for r in got])
        return Knowledge(calls=[list(self._ix_calls(r.calls)) for r in got], entries=len(got),
                         irrelevant=sum(not self._about(r.key, words) for r in got))

    def audit_entries(self) -> list[tuple[str, tuple]]:
        return [(" ".join(r.key), self._ix_calls(r.calls)) for r in self.records.values()]

    def size(self) -> int:
        return len(self.records)


@_register
class NaiveGrowth(_Records):
    """Naive memory growth (Xiong et al. 2025, "How memory management impacts LLM
    agents", arXiv 2505.16067): every episode's run is added to the memory.

    When it writes
        Every episode: the run as a record keyed by its task text (its key words for the
        audit), its calls as the agent made them: per procedure position the call that
        went through, and for the position where the run stopped its last call, even
        when that call errored (a record of a failure is a record of what was done, so it
        repeats the failure). The record is the raw run, no LLM call: 0 learning tokens.
    Retrieval
        The top 5 records by similarity of their task text to the new task's (bag-of-words
        cosine of content words; ties: the most recent), all followed as procedures, best
        first (:attr:`TOP_K`; the released code's driving agent retrieves one record).
        No cap: the memory grows with every episode (the code's "always add" setting,
        ``SUCCESS_L2_THRESHOLD = 99999``, no deletion).
    """

    name = "naive_growth"

    def learn(self, run: RunRecord) -> int:
        calls = list(self._ok_calls(run))
        if run.calls and run.calls[-1][2]:
            calls.append(self._named(run.calls[-1][0]))
        self._store(run, tuple(calls))
        return 0


@_register
class SelectiveAddDelete(_Records):
    """Selective addition with history-based deletion (Xiong et al. 2025, arXiv
    2505.16067, code: yuplin2333/agent_memory_manage ``main_strict.py`` and
    ``ExperienceMemory.find_worst_memory``): only good records are added; records whose
    reuse keeps leading to failures are deleted.

    When it writes
        A run is added (a raw record as in :class:`NaiveGrowth`: no LLM call, 0 tokens)
        only when it succeeded. The paper uses future task outcomes as labels (the
        "strict" evaluator compares with the ground truth), so the label is
        ``verified_success``. A success has no failing last call, so a record holds the
        calls that went through.
    When it deletes (the code's rule)
        Every task's outcome is recorded against the record it reused (``record_l2``);
        after the task (and after its own addition), when more than ``MIN_SIZE`` records
        are stored, the one record reused at least ``MIN_REUSES`` times whose mean outcome
        is worse than the success threshold, here a failure rate above ``MAX_FAILURE``,
        is deleted, the worst first (ties: the oldest); at most one per task. The values
        are the code's deletion settings (``DELETION_RETREIVAL_N_TIMES = 3``,
        ``DELETION_L2_THRESHOLD`` = the success threshold, ``MIN_MEMORY_SIZE = 1``). The
        code retrieves one record per task, so that record is the one reused; with top-5
        retrieval a retrieved record counts as reused when the run followed it (made one
        of its calls at that call's position).
    Retrieval
        As :class:`NaiveGrowth`: top 5 by task-text similarity.
    """

    name = "selective_add_delete"
    #: Reuses a record needs before it can be deleted.
    MIN_REUSES = 3
    #: Failure rate of its reuses above which a record can be deleted.
    MAX_FAILURE = 0.5
    #: No deletion while this few records (or fewer) are stored.
    MIN_SIZE = 1

    def __init__(self, env, seed: int, **kwargs):
        super().__init__(env, seed, **kwargs)
        #: Record id -> outcomes of the runs that reused it (True: failed).
        self.reuses: dict[int, list] = {}
        #: Records deleted after failed reuses.
        self.deleted = 0

    def learn(self, run: RunRecord) -> int:
        task, rids = self._retrieved
        self._retrieved = (None, [])
        if task == run.task:
            made = {(pos, self._named(call)) for pos, call, _ in _steps(run)}
            for rid in rids:
                rec = self.records.get(rid)
                if rec is not None and any((pos, c) in made
                                           for pos, c in enumerate(rec.calls)):
                    self.reuses.setdefault(rid, []).append(not run.verified_success)
        if run.verified_success:
            calls = self._ok_calls(run)
            if calls:
                self._store(run, calls)
        if len(self.records) > self.MIN_SIZE:
            worst = None
            for rid, outcomes in self.reuses.items():
                rate = sum(outcomes) / len(outcomes)
                if len(outcomes) >= self.MIN_REUSES and rate > self.MAX_FAILURE and (
                        worst is None or rate > worst[0]):
                    worst = (rate, rid)
            if worst is not None:
                del self.records[worst[1]], self.reuses[worst[1]]
                self.deleted += 1
        return 0
