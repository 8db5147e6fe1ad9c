"""Ranked description matching: Okapi BM25 over a skill's name and description, stemmed.

Skills without triggers are matched on what they say they are for, as the Agent Skills
format intends (a client puts every skill's name and description in context and picks by
them). Each skill is one document: its name (split at ``-``) and description, case-folded,
stop-words (:data:`dyna.loops._text.STOPWORDS`) dropped, each word reduced to its Snowball
English stem (PyStemmer), so "presentation", "presentations" and "present" meet. Words in a
*negated* clause -- from a cue (``not``, ``never``, ``n't``, ``avoid``, ``except``,
``instead of``, ``rather than``, ``excluding``) to the end of its sentence -- are left out:
"Do NOT use for PDFs" is no match for "merge two PDFs".

The score of a document ``d`` for a query ``q`` is (Robertson & Zaragoza, "The Probabilistic
Relevance Framework: BM25 and Beyond", 2009; the Lucene idf)::

    sum over distinct stems t of q in d:  idf(t) * tf(t, d) * (k1 + 1)
                                          / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``k1 = 1.5``, ``b = 0.75`` (the bm25s defaults), ``N`` documents of mean length ``avgdl``. Postings are numpy
arrays of document rows and precomputed weights, rebuilt lazily after the index changes, so
a query costs one fancy-indexed add per query stem plus a partial sort.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from dyna.loops._text import STOPWORDS, identity_text

__all__ = ["B", "K1", "NEGATION_CUES", "BM25Index", "document_terms", "stem"]

K1 = 1.5
B = 0.75

#: Cues that open a negated clause (matched as whole words, case-insensitive).
NEGATION_CUES = ("not", "never", "avoid", "except", "excluding", "instead of", "rather than",
                 "no longer")
_NEG_RE = re.compile(r"\b(?:" + "|".join(re.escape(c) for c in NEGATION_CUES) + r")\b|n't\b",
                     re.IGNORECASE)
_SENTENCE_RE = re.compile(r"[.;!?\n]+|\s[-\u2013\u2014]\s|\(|\)")
_WORD_RE = re.compile(r"\w+")


@functools.lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer: the Snowball stemmers in C

    return Stemmer.Stemmer("english")


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball English stem of a case-folded word (cached)."""
    return _stemmer().stemWord(word)


#: Words no description is about, on top of :data:`dyna.loops._text.STOPWORDS`: number
#: words, which would otherwise score high for being rare ("one of ten themes").
EXTRA_STOPWORDS = frozenset("one two three four five six seven eight nine ten any some all "
                            "also each".split())


def _words(text: str) -> list[str]:
    return [w for w in _WORD_RE.findall(identity_text(text))
            if len(w) > 1 and w not in STOPWORDS and w not in EXTRA_STOPWORDS]


def query_terms(text: str) -> list[str]:
    """Distinct stems of a query, in order."""
    return list(dict.fromkeys(stem(w) for w in _words(text)))


def document_terms(name: str, description: str) -> list[str]:
    """The stems a skill is indexed under: its name's parts and its description's words,
    leaving out every word of a negated clause (module docstring)."""
    out = [stem(w) for w in _words(name.replace("-", " "))]
    for clause in _SENTENCE_RE.split(description):
        m = _NEG_RE.search(clause)
        kept = clause[:m.start()] if m else clause
        out += [stem(w) for w in _words(kept)]
    return out


class BM25Index:
    """An inverted BM25 index of documents ``(key, terms)``; see the module docstring."""

    def __init__(self):
        self._docs: dict[str, dict[str, int]] = {}   # key -> term frequencies
        self._lens: dict[str, int] = {}
        self._built = None

    def __len__(self) -> int:
        return len(self._docs)

    def copy(self) -> "BM25Index":
        new = BM25Index()
        new._docs = dict(self._docs)
        new._lens = dict(self._lens)
        new._built = self._built
        return new

    def add(self, key: str, terms) -> None:
        """Index (or re-index) document ``key`` with its stems."""
        tf: dict[str, int] = {}
        for t in terms:
            tf[t] = tf.get(t, 0) + 1
        self._docs[key] = tf
        self._lens[key] = sum(tf.values())
        self._built = None

    def remove(self, key: str) -> None:
        if self._docs.pop(key, None) is not None:
            del self._lens[key]
            self._built = None

    def _build(self):
        keys = sorted(self._docs)
        n = len(keys)
        avgdl = (sum(self._lens.values()) / n) if n else 0.0
        post: dict[str, tuple[list, list]] = {}
        for row, key in enumerate(keys):
            norm = K1 * (1 - B + B * self._lens[key] / avgdl) if avgdl else K1
            for t, f in self._docs[key].items():
                rows, tfs = post.setdefault(t, ([], []))
                rows.append(row)
                tfs.append((f * (K1 + 1)) / (f + norm))
        arrays = {}
        for t, (rows, tfs) in post.items():
            df = len(rows)
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
            arrays[t] = (np.asarray(rows, dtype=np.int64),
                         np.asarray(tfs, dtype=np.float64) * idf)
        self._built = (keys, arrays)
        return self._built

    def scores(self, terms, limit: int) -> list[tuple[float, str]]:
        """The ``limit`` best ``(score, key)`` with a positive score, best first (ties by
        key)."""
        keys, arrays = self._built or self._build()
        if not keys or limit <= 0:
            return []
        hit = [arrays[t] for t in terms if t in arrays]
        if not hit:
            return []
        acc = np.zeros(len(keys))
        for rows, w in hit:
            acc[rows] += w
        nz = np.flatnonzero(acc > 0)
        if nz.size > limit:
            # the limit-th best score, then every row at or above it (ties resolved by key)
            kth = np.partition(acc[nz], nz.size - limit)[nz.size - limit]
            nz = nz[acc[nz] >= kth]
        ranked = sorted(((float(acc[i]), keys[i]) for i in nz), key=lambda x: (-x[0], x[1]))
        return ranked[:limit]
