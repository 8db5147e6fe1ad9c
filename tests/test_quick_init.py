"""dyna._quick.quick_init: the same objects as the dataclass ``__init__`` it replaces."""

import dataclasses
import inspect
import pickle

import pytest

from dyna._quick import quick_init
from dyna.loops import memory as M


@quick_init
@dataclasses.dataclass(frozen=True)
class _Point:
    x: int
    tags: list = dataclasses.field(default_factory=list)
    label: str = dataclasses.field(default="p", kw_only=True)
    y: float = 0.5

    def __post_init__(self):
        if self.x < 0:
            raise ValueError("x must be >= 0")


def test_signature_defaults_factory_kw_only_and_post_init_as_the_dataclass():
    # (the same text: a factory's default is a sentinel of ours, shown as dataclasses' is)
    assert (str(inspect.signature(_Point.__init__))
            == str(inspect.signature(_Point.__dataclass_init__)))
    assert str(inspect.signature(_Point)) == ("(x: int, tags: list = <factory>, "
                                              "y: float = 0.5, *, label: str = 'p') -> None")
    p = _Point(3)
    assert vars(p) == {"x": 3, "tags": [], "y": 0.5, "label": "p"}
    q = _Point(3)
    assert p.tags is not q.tags                     # a new list per object, as dataclasses
    assert _Point(1, [2], 0.25, label="z") == _Point(x=1, tags=[2], y=0.25, label="z")
    with pytest.raises(TypeError):
        _Point(1, [2], 0.25, "z")                   # label is keyword-only
    with pytest.raises(ValueError, match="x must be >= 0"):
        _Point(-1)                                  # __post_init__ still runs
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 4                                     # still frozen
    assert repr(_Point(2)) == "_Point(x=2, tags=[], label='p', y=0.5)"
    assert pickle.loads(pickle.dumps(_Point(5, [1]))) == _Point(5, [1])


def test_refuses_what_it_cannot_build_alike():
    with pytest.raises(TypeError, match="not a frozen dataclass"):
        quick_init(dataclasses.dataclass(type("A", (), {"__annotations__": {"x": int}})))
    with pytest.raises(TypeError, match="__slots__"):
        @quick_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class B:
            x: int
    with pytest.raises(TypeError, match="takes"):
        @quick_init
        @dataclasses.dataclass(frozen=True)
        class C:
            x: int
            y: dataclasses.InitVar[int] = 0
    with pytest.raises(TypeError, match="takes"):
        @quick_init
        @dataclasses.dataclass(frozen=True)
        class D:
            x: int
            z: int = dataclasses.field(default=0, init=False)


#: every class of dyna built with quick_init, and arguments to build one with
CASES = [
    (M.MemoryEntry, ("the staging port is 8080",), {}),
    (M.MemorySnapshot, ((),), {}),
    (M.StoreResult, ("added", None), {}),
]


@pytest.mark.parametrize("cls,args,kwargs", CASES, ids=[c[0].__name__ for c in CASES])
def test_dyna_classes_build_the_same_objects_as_their_dataclass_init(cls, args, kwargs):
    assert str(inspect.signature(cls.__init__)) == str(inspect.signature(cls.__dataclass_init__))
    quick = cls(*args, **kwargs)
    plain = object.__new__(cls)
    cls.__dataclass_init__(plain, *args, **kwargs)
    assert vars(quick) == vars(plain) and quick == plain and repr(quick) == repr(plain)
    assert list(vars(quick)) == [f.name for f in dataclasses.fields(cls)]
    if cls.__hash__ is not None:
        try:
            assert hash(quick) == hash(plain)
        except TypeError:   # an unhashable value (a dict): unhashable in both
            with pytest.raises(TypeError):
                hash(plain)


class _Positive:
    """A data descriptor used as a field's default (the dataclasses docs' pattern)."""

    def __set_name__(self, owner, name):
        self._name = "_" + name

    def __get__(self, obj, objtype=None):
        return 100 if obj is None else getattr(obj, self._name)

    def __set__(self, obj, value):
        object.__setattr__(obj, self._name, int(value))


def test_what_the_generated_code_would_get_wrong_is_refused():
    """The review of session 16: a descriptor field hidden by its __get__, fields named
    like the generated code's own names, and a class with its own __init__."""
    with pytest.raises(TypeError, match="descriptor"):
        @quick_init
        @dataclasses.dataclass(frozen=True)
        class A:
            qty: _Positive = _Positive()
    for name in ("self", "_qi_d", "_qi_FACTORY", "_qi_factory_x"):
        with pytest.raises(TypeError, match="name of the generated code"):
            quick_init(dataclasses.make_dataclass("B", [(name, int)], frozen=True))
    with pytest.raises(TypeError, match="init=False"):
        @quick_init
        @dataclasses.dataclass(frozen=True, init=False)
        class C:
            x: int

            def __init__(self, x):
                object.__setattr__(self, "x", abs(int(x)))
    # a field named d (the first version's local name) is a field like any other
    D = quick_init(dataclasses.make_dataclass("D", [("d", int), ("e", list)], frozen=True))
    assert vars(D(5, [1])) == {"d": 5, "e": [1]} and D(5, [1]) == D(5, [1])
