"""The loop agents' fast paths give the numbers of the slow ones (issue 16's speed work).

- ``_review_uniforms(a, b)``, the reviewer's two draws in integer arithmetic, equals
  ``numpy.random.Generator(PCG64(SeedSequence([a, b]))).random(2)`` bit for bit on
  20,000 random 32-bit pairs and on the edge words (0, 1, 2**31, 2**32 - 1).
- A :class:`ProcedureReviewer` with a seed wider than 32 bits falls back to numpy and
  draws what numpy draws.
"""

import random
import zlib

import numpy as np
import pytest

from dyna.agents.loop_agents import ProcedureReviewer, _review_uniforms
from dyna.loops import Digest

EDGES = (0, 1, 2, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1)


def _numpy(a, b):
    return tuple(np.random.Generator(np.random.PCG64(np.random.SeedSequence([a, b])))
                 .random(2).tolist())


def test_review_uniforms_equal_numpy_on_edges():
    for a in EDGES:
        for b in EDGES:
            assert _review_uniforms(a, b) == _numpy(a, b), (a, b)


def test_review_uniforms_equal_numpy_on_random_pairs():
    rng = random.Random(20261201)
    for _ in range(20_000):
        a, b = rng.getrandbits(32), rng.getrandbits(32)
        assert _review_uniforms(a, b) == _numpy(a, b), (a, b)


def test_review_uniforms_known_values():
    # default_rng([0, crc32(b"e0")]).random(2) as numpy 2.4.6 drew it (the stream is
    # part of numpy's compatibility promise for SeedSequence and PCG64)
    assert _review_uniforms(0, zlib.crc32(b"e0")) == (0.7452464505098649, 0.8372127028878678)


@pytest.mark.parametrize("seed", [0, 2**32 - 1, 2**32, 2**40 + 7])
def test_reviewer_draws_what_numpy_draws(seed, monkeypatch):
    seen = []
    calls = ({"name": "tool_a", "args": {"value": "val_1"}, "output": "ok"},)
    d = Digest.from_run("e17", "alpha beta task", success=True, verified=True,
                        tool_calls=calls)
    rev = ProcedureReviewer("skill", seed=seed, copy_rate=0.5, misattribution=0.5)
    real = ProcedureReviewer.procedure

    def spy(self, digest, copy, misattribute=True):
        seen.append((copy, misattribute))
        return real(self, digest, copy, misattribute)
    monkeypatch.setattr(ProcedureReviewer, "procedure", spy)
    rev.review(d, None)
    u = np.random.default_rng([seed, zlib.crc32(b"e17")]).random(2)
    assert seen == [(bool(u[0] < 0.5), bool(u[1] < 0.5))]
