"""Speed of the loops: skill matching over 10,000 skills, consolidation of 1,000 facts.

Run with ``pytest benchmarks/bench_loops.py -s``. Each benchmark times ours and a naive
peer in the same run on the same data, each contestant a test and a pytest-benchmark entry
of its own (:mod:`conftest`); the ratio of the medians is printed and asserted in the test
after them:

- ``SkillLibrary.match`` (inverted index of first tokens, phrase check) against a scan that
  runs one compiled word-boundary regex per trigger of every skill (what a library without
  an index does), over 10,000 skills, 40 queries a round; target: at most 0.01x the scan
  (100 times faster).
- ``MemoryStore.consolidate`` (one sparse product for all pairwise similarities) against
  a pure-Python all-pairs Jaccard loop that only finds the near-duplicate pairs, 1,000
  facts; target: at most 1x the loop.
- ranked (BM25) description matching over 10,000 skills; target: at most 10x an unweighted
  match.
"""

import re

import numpy as np
import pytest

from dyna.loops._text import content_words, jaccard
from dyna.loops.memory import MemoryEntry, MemoryStore
from dyna.loops.skills import Skill, SkillLibrary

N_SKILLS, N_QUERIES, N_FACTS = 10_000, 200, 1_000


def _vocab(rng, n):
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(letters, rng.integers(4, 9))))
    return sorted(words)


def _library_and_queries(seed=0):
    rng = np.random.default_rng(seed)
    vocab = _vocab(rng, 5_000)
    lib = SkillLibrary.in_memory(log_outcomes=False)
    for i in range(N_SKILLS):
        trig = [" ".join(rng.choice(vocab, rng.integers(1, 3))) for _ in range(rng.integers(1, 4))]
        lib.add(Skill(f"skill-{i}", f"skill number {i}", triggers=trig))
    common = ["the", "a", "to", "and", "then", "of", "in", "with", "please", "fix"]
    queries = []
    for _ in range(N_QUERIES):
        words = list(rng.choice(vocab, rng.integers(10, 20))) + list(
            rng.choice(common, rng.integers(10, 20)))
        rng.shuffle(words)
        queries.append(" ".join(words).capitalize() + ".")
    return lib, queries


def _regex_scan(skills):
    """Peer: one compiled regex per trigger, every skill scanned for every query."""
    pats = [(s.name, [re.compile(rf"(?<!\w){re.escape(t.casefold())}(?!\w)")
                      for t in s.triggers]) for s in skills]

    def match(text, limit=3):
        text = text.casefold()
        scored = []
        for name, rxs in pats:
            score = sum(len(rx.pattern.split()) for rx in rxs if rx.search(text))
            if score:
                scored.append((-score, name))
        scored.sort()
        return [n for _, n in scored[:limit]]
    return match


@pytest.fixture(scope="module")
def skills():
    """The library, the queries, and the regex scan over the same skills."""
    lib, queries = _library_and_queries()
    return lib, queries, _regex_scan(lib.skills())


@pytest.mark.benchmark(group=f"match over {N_SKILLS} skills, 40 queries")
@pytest.mark.parametrize("contestant", ["dyna", "regex scan"])
def test_match_10k_skills(benchmark, skills, contestant):
    lib, queries, peer = skills
    timed = queries[:40]
    if contestant == "dyna":
        # Same answers (triggers here are plain words, where both definitions agree).
        for q in queries[:50]:
            assert [m.name for m in lib.match(q, limit=10)] == peer(q, limit=10)
        assert sum(bool(lib.match(q)) for q in queries) > N_QUERIES // 2
        benchmark.pedantic(lambda: [lib.match(q) for q in timed], rounds=5, warmup_rounds=1)
    else:
        benchmark.pedantic(lambda: [peer(q) for q in timed], rounds=5, warmup_rounds=1)


@pytest.mark.ratio(of="test_match_10k_skills")
def test_match_10k_skills_index_within_0_01x_of_regex_scan(medians):
    r = medians.ratio("dyna", "regex scan")
    print(f"    per query: index {medians['dyna'] / 40 * 1e3:.3f} ms, regex scan "
          f"{medians['regex scan'] / 40 * 1e3:.2f} ms -> {1 / r:.0f}x faster")
    assert r <= 0.01, f"matching is {r:.4f}x the regex scan (target 0.01x)"


def _facts(seed=1):
    rng = np.random.default_rng(seed)
    vocab = _vocab(rng, 400)
    facts = []
    for i in range(N_FACTS):
        if facts and rng.random() < 0.2:  # a near-duplicate of an earlier fact
            facts.append(facts[rng.integers(len(facts))] + " again")
            continue
        words = " ".join(rng.choice(vocab, rng.integers(5, 10)))
        facts.append(f"Use `{words.split()[0]} --{words.split()[1]}` when {words} "
                     f"on host{i}")
    return facts


def _filled_store(facts):
    """An in-memory store holding ``facts`` as written by hand (no dedupe on the way in)."""
    store = MemoryStore.in_memory(cap=None)
    store._save([MemoryEntry(t, f"2024-01-{1 + i % 28:02d}", "bench")
                 for i, t in enumerate(facts)])
    return store


def _pairwise_python(facts, threshold=0.8):
    """Peer: all pairs, Python sets."""
    sets = [frozenset(content_words(t)) for t in facts]
    return [(i, j) for i in range(len(sets)) for j in range(i + 1, len(sets))
            if jaccard(sets[i], sets[j]) >= threshold]


@pytest.mark.benchmark(group=f"consolidate {N_FACTS} facts vs all-pairs similarity")
@pytest.mark.parametrize("contestant", ["dyna", "python all-pairs"])
def test_consolidate_1000_facts(benchmark, contestant):
    """dyna: the whole consolidation; the peer: the Python all-pairs similarity alone."""
    facts = _facts()
    if contestant == "python all-pairs":
        pairs = benchmark.pedantic(lambda: _pairwise_python(facts), rounds=3, warmup_rounds=1)
        benchmark.extra_info["pairs"] = len(pairs)
        return
    stores = []

    def setup():
        stores.append(_filled_store(facts))
        return (stores[-1],), {}

    benchmark.pedantic(lambda s: s.consolidate(), setup=setup, rounds=7, warmup_rounds=1)
    assert not stores[-1].consolidate().changed  # idempotent: a second pass finds nothing
    first = _filled_store(facts).consolidate()
    assert first.merged and len(first.merged) <= N_FACTS


@pytest.mark.ratio(of="test_consolidate_1000_facts")
def test_consolidate_1000_facts_within_1x_of_python_pairs(medians):
    r = medians.ratio("dyna", "python all-pairs")
    assert r <= 1.0, f"consolidation is {r:.2f}x the all-pairs loop (target 1x)"


# --------------------------------------------------------------------------- descriptions

class _UnweightedDescriptionMatcher:
    """An unweighted description match (the peer): every content word of a
    description scores 0.5, no stemming, no negation, ties by name."""

    def __init__(self, skills):
        self.post = {}
        for s in skills:
            for w in content_words(s.description):
                self.post.setdefault(w, []).append(s.name)

    def match(self, text, limit=3):
        hits = {}
        for w in dict.fromkeys(re.findall(r"\w+", text.casefold())):
            for name in self.post.get(w, ()):
                hits[name] = hits.get(name, 0.0) + 0.5
        return sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


@pytest.fixture(scope="module")
def described():
    """10,000 trigger-less skills in a library (postings built), the unweighted peer over
    the same skills, and the queries."""
    rng = np.random.default_rng(3)
    vocab = _vocab(rng, 5_000)
    skills = [Skill(f"s{i:05d}", " ".join(rng.choice(vocab, 12)) + ".") for i in range(N_SKILLS)]
    lib = SkillLibrary.in_memory(log_outcomes=False)
    for s in skills:
        lib.add(s)
    queries = [" ".join(rng.choice(vocab, 4)) for _ in range(N_QUERIES)]
    lib.match(queries[0])                                   # warm: build the postings once
    return lib, _UnweightedDescriptionMatcher(skills), queries


@pytest.mark.benchmark(group=f"description match over {N_SKILLS} skills, {N_QUERIES} queries")
@pytest.mark.parametrize("contestant", ["dyna", "unweighted"])
def test_match_10k_descriptions(benchmark, described, contestant):
    """Ranked (BM25, stemmed) description matching over 10,000 trigger-less skills against
    an unweighted match (the peer above), warm, 200 queries a round."""
    lib, peer, queries = described
    match = lib.match if contestant == "dyna" else peer.match
    benchmark.pedantic(lambda: [match(q) for q in queries], rounds=15, warmup_rounds=1)


@pytest.mark.ratio(of="test_match_10k_descriptions")
def test_match_10k_descriptions_bm25_within_10x_of_unweighted(medians):
    assert medians.ratio("dyna", "unweighted") <= 10
