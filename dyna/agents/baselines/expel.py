"""ExpeL (Zhao et al., AAAI 2024): insights with counts, extracted from experience."""

from __future__ import annotations

from dyna.agents.baselines.common import (Knowledge, RunRecord, TaskBaseline, audit_step,
                                           steps)


class ExpeL(TaskBaseline):
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

    def knowledge(self, task: str, *, task_instance: int) -> Knowledge:
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
        return [(" ".join(r[0]), audit_step(r[1], self._ix(r[2:]))) for r, _ in self.rules]

    def size(self) -> int:
        return len(self.rules)
