"""envs.seeding: SeedSequence entropy as uint32 words, the same streams as numpy's own
conversion of Python integers."""

from __future__ import annotations

import numpy as np
import pytest

from dyna.errors import ConfigError
from envs.seeding import seed_words, sequence_words


@pytest.mark.parametrize("values", [(0,), (0, 0), (0, 3), (7, 2**32 - 1), (2**32, 1),
                                    (2**40 + 5, 3), (2**64 + 2**33 + 9, 0, 12),
                                    (12345678901234567890123,)])
def test_words_give_the_streams_numpy_gives_for_the_integers(values):
    for key in ((), (1,), (1, 57), (4, 999, 2**31)):
        want = np.random.SeedSequence(list(values), spawn_key=key)
        got = np.random.SeedSequence(seed_words(*values), spawn_key=key)
        assert np.array_equal(got.generate_state(8), want.generate_state(8))
        assert np.array_equal(np.random.default_rng(got).random(5),
                              np.random.default_rng(want).random(5))


def test_words_by_hand():
    assert seed_words(0).tolist() == [0]
    assert seed_words(2**32 + 5, 1).tolist() == [5, 1, 1]
    assert seed_words(np.int64(9)).dtype == np.uint32


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_values_name_the_field(bad):
    with pytest.raises(ConfigError) as err:
        seed_words(1, bad)
    assert err.value.field == "seed" and err.value.value == bad


@pytest.mark.parametrize("entropy", [5, [5, 6], 2**70])
def test_a_spawned_sequence_continues_as_numpy_spawns_it(entropy):
    child = np.random.SeedSequence(entropy).spawn(3)[2]
    words, key = sequence_words(child)
    assert key == (2,)
    for ep in (0, 1, 999):
        want = np.random.SeedSequence(child.entropy, spawn_key=child.spawn_key + (ep,))
        got = np.random.SeedSequence(words, spawn_key=key + (ep,))
        assert np.array_equal(got.generate_state(4), want.generate_state(4))
