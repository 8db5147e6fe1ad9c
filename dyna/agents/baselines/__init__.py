"""Learning-loop baselines from the literature, for the agent tasks.

Each baseline is a :class:`~dyna.agents.baselines.common.Baseline`: what it keeps, when it
writes, how it retrieves and its limit, as its paper and released code state them
(../shared/BASELINES.md gives the rules; each class's docstring names its source and says
where paper and code differ). They
run inside :class:`dyna.agents.loop_agents.LoopAgent` on the same policy model as every
other variant: the agent asks :meth:`Baseline.knowledge` for what to bring into a run,
acts, and hands the finished run to :meth:`Baseline.learn`. A baseline never reads the
hidden world (``env.procedure``); it sees the task text, the tool and value names and the
run's calls with their outputs, like any loop.

The variants (:data:`BASELINES`)

=========================  ============================================  ====================
variant                    writes after                                  keeps / retrieves
=========================  ============================================  ====================
``reflexion``              a verified failure                            last 3 per task
                                                                         instance
``voyager``                a self-verified success                       top 5, no cap
``expel``                  in its training phase only: a verified        rules, all; 2 most
                           success, or a failure to compare              similar successes
``awm``                    every task (re-induction from self-judged     whole file, tools
                           successes)                                    only (no values)
``mem0_v2``                every run: ADD / UPDATE / DELETE / NONE       top 20
``mem0_v3``                every run: ADD with MD5 dedup                 top 20, hybrid
``naive_growth``           every run                                     top 1, no cap
``selective_add_delete``   a verified success; deletes on failed reuses  top 1
=========================  ============================================  ====================

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

The modules: :mod:`~dyna.agents.baselines.common` (the run record, the knowledge, the
interface and the helpers), then one module per baseline (:mod:`.reflexion`,
:mod:`.voyager`, :mod:`.expel`, :mod:`.awm`, :mod:`.mem0_v2`, :mod:`.mem0_v3`,
:mod:`.naive_growth`, :mod:`.selective`), with what two of them share in :mod:`.mem0` and
:mod:`.records`. They may import :mod:`dyna.loops`, :mod:`dyna.errors`, numpy; never
:mod:`dyna.agents.loop_agents` (which imports this package).
"""

from __future__ import annotations

from dyna.agents.baselines.awm import AWM
from dyna.agents.baselines.common import Baseline, Knowledge, RunRecord, agrees
from dyna.agents.baselines.expel import ExpeL
from dyna.agents.baselines.mem0_v2 import Mem0V2
from dyna.agents.baselines.mem0_v3 import Mem0V3
from dyna.agents.baselines.naive_growth import NaiveGrowth
from dyna.agents.baselines.reflexion import Reflexion
from dyna.agents.baselines.selective import SelectiveAddDelete
from dyna.agents.baselines.voyager import Voyager

__all__ = ["AWM", "BASELINES", "Baseline", "ExpeL", "Knowledge", "Mem0V2", "Mem0V3",
           "NaiveGrowth", "Reflexion", "RunRecord", "SelectiveAddDelete", "Voyager",
           "agrees", "make_baseline"]

#: Baseline variant name -> class.
BASELINES: dict[str, type] = {cls.name: cls for cls in (
    Reflexion, Voyager, ExpeL, AWM, Mem0V2, Mem0V3, NaiveGrowth, SelectiveAddDelete)}


def make_baseline(name: str, env, seed: int, **kwargs) -> Baseline:
    """The baseline called ``name`` (a key of :data:`BASELINES`), built with ``env``,
    ``seed`` and the keywords of its class.

    Raises
    ------
    KeyError
        Unknown name (callers check with :data:`BASELINES` first).
    """
    return BASELINES[name](env, seed, **kwargs)
