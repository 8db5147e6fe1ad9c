"""envs.seeding: SeedSequence entropy as uint32 words, the same streams as numpy's own
conversion of Python integers."""

from __future__ import annotations

import numpy as np
import pytest

from dyna.errors import ConfigError
from envs.seeding import seed_words, sequence_words, spawned_states, spawned_uniforms


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


# ------------------------------------------------------------------ spawned_uniforms

def _numpy_rows(words, key, start, count, n):
    return np.array([np.random.Generator(np.random.PCG64(
        np.random.SeedSequence(words, spawn_key=key + (start + j,)))).random(n)
        for j in range(count)]).reshape(count, n)


@pytest.mark.parametrize("entropy,key", [
    ((0,), ()), ((5,), (2,)), ((7, 2**32 - 1), (0, 3)), ((1, 2, 3, 4), (1,)),
    ((2**64 + 9, 3, 12), (4, 999, 2**31)), ((11, 12, 13, 14, 15, 16), (2**40 + 1,)),
    ((2**31,), (0, 0, 0, 0, 0))])
def test_spawned_uniforms_are_numpys_numbers_bit_for_bit(entropy, key):
    words = seed_words(*entropy)
    for start, count, n in ((0, 300, 7), (999, 5, 20), (2**32 - 3, 3, 2), (17, 0, 4),
                            (40, 3, 0)):
        got = spawned_uniforms(words, key, start, count, n)
        assert got.shape == (count, n) and got.dtype == np.float64
        assert np.array_equal(got, _numpy_rows(words, key, start, count, n))


def test_spawned_uniforms_cover_the_unrotated_output():
    # XSL-RR rotates by the state's top 6 bits; a rotation of 0 (1 in 64 outputs) takes
    # the shift-by-64 corner of the rotation: among 300 x 7 draws there are such outputs
    words, key = seed_words(3, 1), (2,)
    got = spawned_uniforms(words, key, 0, 300, 7)
    assert np.array_equal(got, _numpy_rows(words, key, 0, 300, 7))
    # the rotation of each output, recomputed from numpy's own generator states
    zero = 0
    for j in range(300):
        bg = np.random.PCG64(np.random.SeedSequence(words, spawn_key=key + (j,)))
        for _ in range(7):
            bg.random_raw()
            zero += (bg.state["state"]["state"] >> 122) == 0
    assert zero >= 10


def test_spawned_uniforms_of_a_sequence_numpy_spawned():
    child = np.random.SeedSequence(2024).spawn(4)[3].spawn(1)[0]
    words, key = sequence_words(child)
    want = np.array([np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        child.entropy, spawn_key=child.spawn_key + (e,)))).random(6) for e in range(50)])
    assert np.array_equal(spawned_uniforms(words, key, 0, 50, 6), want)


@pytest.mark.parametrize("field,args", [("start", (-1, 3, 2)), ("count", (0, -2, 2)),
                                        ("n", (0, 3, -1)), ("start", (1.5, 3, 2)),
                                        ("count", (2**32 - 1, 2, 2)), ("n", (0, 1, True))])
def test_spawned_uniforms_bad_ranges_name_the_field(field, args):
    with pytest.raises(ConfigError) as err:
        spawned_uniforms(seed_words(1), (0,), *args)
    assert err.value.field == field


def test_spawned_uniforms_bad_key_names_the_seed():
    with pytest.raises(ConfigError) as err:
        spawned_uniforms(seed_words(1), (0, -4), 0, 2, 2)
    assert err.value.field == "seed"


def test_spawned_states_make_a_reused_generator_draw_what_a_fresh_one_draws():
    words, key = seed_words(4, 9), (1,)
    states = spawned_states(words, key, 250, 12)
    bg = np.random.PCG64(0)
    gen = np.random.Generator(bg)
    for j, (state, inc) in enumerate(states):
        fresh = np.random.default_rng(np.random.SeedSequence(words, spawn_key=key + (250 + j,)))
        assert fresh.bit_generator.state["state"] == {"state": state, "inc": inc}
        gen.integers(5, size=3, dtype=np.int32)       # leaves a buffered 32-bit half
        bg.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc},
                    "has_uint32": 0, "uinteger": 0}
        assert gen.random() == fresh.random()
        assert gen.integers(7, size=5, dtype=np.int32).tolist() == \
            fresh.integers(7, size=5, dtype=np.int32).tolist()
        assert gen.choice(10, size=3, replace=False).tolist() == \
            fresh.choice(10, size=3, replace=False).tolist()


def test_spawned_states_bad_ranges_name_the_field():
    with pytest.raises(ConfigError) as err:
        spawned_states(seed_words(1), (0,), 2**32, 1)
    assert err.value.field == "count"


@pytest.mark.parametrize("words", [np.array([2**33], dtype=np.uint64), np.array([-1]),
                                   [5, 6], np.zeros((2, 2), dtype=np.uint32)])
def test_spawned_streams_take_only_uint32_words(words):
    for fn in (lambda: spawned_uniforms(words, (1,), 0, 1, 2),
               lambda: spawned_states(words, (1,), 0, 1)):
        with pytest.raises(ConfigError) as err:
            fn()
        assert err.value.field == "words"


def test_spawned_streams_check_the_range_in_python_integers():
    # numpy integers would wrap start + count (2**32 - 1 + 1 == 0 in uint32)
    with pytest.raises(ConfigError) as err:
        spawned_uniforms(seed_words(1), (0,), np.uint32(2**32 - 1), np.uint32(2), 1)
    assert err.value.field == "count"
    got = spawned_uniforms(seed_words(1), (0,), np.uint32(2**32 - 1), np.uint32(1), 2)
    assert got.shape == (1, 2)
    assert np.array_equal(got, _numpy_rows(seed_words(1), (0,), 2**32 - 1, 1, 2))
