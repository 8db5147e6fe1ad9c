"""ExpeL (Zhao et al., AAAI 2024): a training phase that gathers experience and extracts
insights with counts, then frozen insights and few-shot replay of successes."""

from __future__ import annotations

from dyna.agents.baselines.common import (Knowledge, RunRecord, TaskBaseline, audit_step,
                                           cosine, steps)
from dyna.agents.baselines.reflexion import Reflexion
from dyna.errors import ConfigError, check_range


class ExpeL(TaskBaseline):
    """ExpeL (Zhao et al., AAAI 2024, arXiv 2308.10144; code: LeapLabTHU/ExpeL
    ``train.py``, ``insight_extraction.py``, ``agent/expel.py``): a training phase that
    gathers experience and extracts insights (rules) with counts; then the insights are
    frozen and injected, with the most similar successful trajectories as few-shots.

    Training phase (the first ``train_episodes`` runs it learns from)
        Experience is gathered as the code's ``train.py`` does: the agent runs Reflexion
        (``max_reflection_depth: 3``), so during training :meth:`knowledge` is the
        :class:`~dyna.agents.baselines.reflexion.Reflexion` knowledge of the task
        instance and each failure may cost a reflection call. ExpeL gathers with the
        environment's reward, so every signal here is ``verified_success``, the trusted
        outcome, not the self-assessment. Every verified success joins the experience
        pool (its ok calls, with its task text), and insights are extracted from the runs
        as they come (below). The code extracts in a separate pass over the finished
        training fold; extracting run by run over the same runs applies the same
        operations with the same counts, in the order the runs were made.
    After it (frozen)
        No more extraction, no more pool, no reflections: :meth:`learn` changes nothing
        and costs 0 tokens, as the code's evaluation loads the rules and the pool
        (``eval.py``, ``load_cache_rules``) and writes neither.
    How many training runs (``train_episodes``, default :attr:`TRAIN_EPISODES` = 200)
        The code trains on one of 2 folds (``k_folds: 2``): 50 of WebShop's 100 tasks,
        each tried up to 4 times (3 reflections), so at most 200 training trials; 200 is
        also the episode by which the full loop of the agent-task experiments must hold a
        right entry for 80% of the head families (a manipulation check of the v3
        experiments), so ExpeL learns from as much experience as the loop is given to
        converge.
    When it extracts (one call, ``tokens_per_review``)
        After a success (the "compare" prompt when the key has failed before, the "all
        success" prompt otherwise; in this world both give the same operations) and after
        a failure whose key has a success in the pool to compare it with (the code's
        ``create_rules`` makes compare-pairs and success-chunks only; a failure with
        nothing to compare is not critiqued: 0 tokens). The code pairs the trials of one
        training task; here the pair is by task key (one key, one procedure).
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
    Retrieval (frozen)
        All rules are injected; the agent follows, per step, the highest-count rule about
        its task, as the first procedure of :attr:`Knowledge.calls`. Then the
        :attr:`N_FEWSHOTS` successful trajectories of the pool most similar to the task
        (the code's ``fewshot_strategy: task_similarity``: here the bag-of-words cosine
        of the task texts' content words; ties the most recent), most similar first, each
        a further procedure. Entries = rules + few-shots; those not about the task count
        as irrelevant.

    Parameters
    ----------
    env, seed, title_words, tokens_per_review, copy_rate
        As :class:`~dyna.agents.baselines.common.TaskBaseline`.
    train_episodes : int
        Runs of the training phase, >= 0 (0: frozen from the start, with no rules).

    Raises
    ------
    dyna.errors.ConfigError
        ``train_episodes`` not an integer >= 0, ``copy_rate`` outside [0, 1].
    """

    name = "expel"
    #: ``max_num_rules`` of the released config (``configs/agent/expel.yaml``).
    MAX_RULES = 20
    #: The code's ``list_full``: REMOVE counts -3 from ``MAX_RULES + FULL_MARGIN`` rules.
    FULL_MARGIN = 5
    #: "Do at most 4 operations" (the extraction prompt).
    MAX_OPERATIONS = 4
    #: Few-shot trajectories per task: ``num_fewshots`` of the released ALFWorld and
    #: WebShop configs, the code's tool-using benchmarks (HotpotQA's is 6).
    N_FEWSHOTS = 2
    #: Default length of the training phase, in runs (class docstring).
    TRAIN_EPISODES = 200

    def __init__(self, env, seed: int, train_episodes: int = TRAIN_EPISODES, **kwargs):
        super().__init__(env, seed, **kwargs)
        self.train_episodes = check_range("train_episodes", train_episodes, 0, None,
                                          integer=True)
        #: Runs learned from so far (the training phase ends at ``train_episodes``).
        self.episodes = 0
        #: ``[rule, count]``, highest count first; ``rule = (key, step, tool, value)``.
        self.rules: list[list] = []
        #: The experience pool: ``(key, words, calls)`` of every verified success of the
        #: training phase (task key, task content words, named ok calls), oldest first.
        self.pool: list[tuple] = []
        #: The gathering agent's reflections (emptied when training ends).
        self.gathering = Reflexion(env, seed, title_words=self.title_words,
                                   tokens_per_review=self.tokens_per_review,
                                   copy_rate=self.copy_rate)

    @property
    def frozen(self) -> bool:
        """True once the training phase is over (no more extraction)."""
        return self.episodes >= self.train_episodes

    @staticmethod
    def text(rule) -> str:
        """A rule as the text the code compares."""
        key, step, tool, value = rule
        return f"at step {step + 1} of {' '.join(key)} tasks call {tool} with {value}."

    def apply(self, ops: list) -> None:
        """Apply operations as the code's ``update_rules``: ``("ADD", rule)``,
        ``("AGREE", i)``, ``("EDIT", i, rule)``, ``("REMOVE", i)`` with ``i`` an index
        into :attr:`rules` (class docstring).

        Raises
        ------
        dyna.errors.ConfigError
            An operation of another kind (field ``operation``).
        """
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
                raise ConfigError("operation", kind, "must be ADD, AGREE, EDIT or REMOVE")
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
            pair = self.compared(key)
            if pair is None:
                return None
            wrong = None
            for pos, call, err in steps(run):
                if not err:
                    continue
                wrong = pos
                i = self._rule_at(key, pos)
                if i is not None and i not in touched and \
                        self.rules[i][0][2:] == self._named(call):
                    touched.add(i)
                    ops.append(("REMOVE", i))
            if wrong is None:
                wrong = sum(1 for _, _, err in steps(run) if not err)
            if wrong < len(pair):
                ops.append(self._step_op(key, wrong, pair[wrong], touched, can_add))
        order = {"REMOVE": 0, "EDIT": 1, "ADD": 2, "AGREE": 3}
        ops = sorted((o for o in ops if o is not None), key=lambda o: order[o[0]])
        return ops[:self.MAX_OPERATIONS]

    def compared(self, key) -> tuple | None:
        """The success a failure of ``key`` is compared with: the pool's most recent
        success of that key (its named ok calls), None when it has none."""
        return next((calls for k, _, calls in reversed(self.pool) if k == key), None)

    def learn(self, run: RunRecord) -> int:
        if self.frozen:
            return 0
        self.episodes += 1
        tokens = self.gathering.learn(run)
        ops = self.operations(run)
        key = self.key(run.task)
        if run.verified_success and key:
            calls = self._ok_calls(run)
            if calls:
                self.pool.append((key, self._words(run.task), calls))
        if ops is not None:
            self.apply(ops)
            tokens += self.tokens_per_review
        if self.frozen:
            self.gathering.reflections.clear()
        return tokens

    def fewshots(self, task: str) -> list[tuple]:
        """The :attr:`N_FEWSHOTS` pool entries ``(key, words, calls)`` most similar to
        ``task``, most similar first (class docstring)."""
        words = self._words(task)
        ranked = sorted(range(len(self.pool)),
                        key=lambda i: (-cosine(self.pool[i][1], words), -i))
        return [self.pool[i] for i in ranked[:self.N_FEWSHOTS]]

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
        if not self.frozen:
            return self.gathering.knowledge(task, task_instance=task_instance)
        words = self._words(task)
        per_step: dict = {}
        irrelevant = 0
        for (key, step, tool, value), _ in self.rules:
            if self._about(key, words):
                per_step.setdefault(step, (tool, value))
            else:
                irrelevant += 1
        shots = self.fewshots(task)
        k = Knowledge(entries=len(self.rules) + len(shots),
                      irrelevant=irrelevant + sum(not self._about(key, words)
                                                  for key, _, _ in shots))
        if per_step:
            k.calls.append([self._ix(per_step[s]) if s in per_step else (-1, -1)
                            for s in range(max(per_step) + 1)])
        k.calls.extend(list(self._ix_calls(calls)) for _, _, calls in shots)
        return k

    def audit_entries(self) -> list[tuple[str, tuple]]:
        """The rules, then the pool's trajectories, then (while training) the gathering
        agent's reflections."""
        length = self.env.length
        return ([(" ".join(r[0]), audit_step(r[1], self._ix(r[2:]), length))
                 for r, _ in self.rules]
                + [(" ".join(key), self._ix_calls(calls)) for key, _, calls in self.pool]
                + self.gathering.audit_entries())
