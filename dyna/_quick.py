"""A quicker ``__init__`` for frozen dataclasses built on every episode.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__``
(~0.13 us a field on CPython 3.11); the loops build about a dozen such objects an episode
(a digest, a proposal, its validation, grade and decision, a review result ...).
:func:`quick_init` gives the class an ``__init__`` with the same signature, defaults,
default factories and ``__post_init__`` call that stores the fields in the instance
``__dict__`` directly (~0.05 us a field): the same object, still frozen (assignment
raises :class:`dataclasses.FrozenInstanceError` as before), equal and hashing alike.
"""

from __future__ import annotations

import dataclasses
import inspect

__all__ = ["quick_init"]

_MISSING = dataclasses.MISSING


class _FactoryDefault:
    """The default of a field with a ``default_factory`` (shown as dataclasses shows it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _FactoryDefault()


def quick_init(cls: type) -> type:
    """Replace the generated ``__init__`` of the frozen dataclass ``cls`` by one that
    writes the fields into the instance ``__dict__`` (see the module docstring); returns
    ``cls``. Apply it above ``@dataclass(frozen=True)``.

    Raises
    ------
    TypeError
        ``cls`` is not a frozen dataclass, has its own ``__init__`` (``init=False``),
        ``__slots__`` (no instance dict), a field with ``init=False``, an ``InitVar``
        pseudo-field, a field the class also defines as a data descriptor (its
        ``__set__`` would be bypassed), or a field named ``self`` or ``_qi_...`` (the
        generated code's own names).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"quick_init: {cls.__name__} is not a frozen dataclass")
    if not params.init:   # its __init__ is the class's own
        raise TypeError(f"quick_init: {cls.__name__} has init=False")
    if "__slots__" in cls.__dict__:
        raise TypeError(f"quick_init: {cls.__name__} has __slots__")
    wanted = [f.name for f in dataclasses.fields(cls)]
    have = list(inspect.signature(cls.__init__).parameters)[1:]
    if sorted(have) != sorted(wanted):   # an InitVar (a parameter, no field) or init=False
        raise TypeError(f"quick_init: the __init__ of {cls.__name__} takes {have}, "
                        f"not its fields {wanted}")
    # the generated source's own names are self and names starting with _qi_: a field may
    # not take one of them
    ns: dict = {"_qi_FACTORY": _FACTORY}
    pos: list[str] = []
    kw: list[str] = []
    body = ["_qi_d = self.__dict__"]
    for f in dataclasses.fields(cls):
        if not f.init:
            raise TypeError(f"quick_init: field {f.name!r} of {cls.__name__} has init=False")
        if f.name == "self" or f.name.startswith("_qi_") or not f.name.isidentifier():
            raise TypeError(f"quick_init: field {f.name!r} of {cls.__name__} takes a name "
                            "of the generated code")
        # (getattr_static: a descriptor's __get__ on the class would show its default)
        if hasattr(type(inspect.getattr_static(cls, f.name, None)), "__set__"):
            raise TypeError(f"quick_init: field {f.name!r} of {cls.__name__} is a descriptor")
        if f.default is not _MISSING:
            ns[f"_qi_default_{f.name}"] = f.default
            param = f"{f.name}=_qi_default_{f.name}"
        elif f.default_factory is not _MISSING:
            ns[f"_qi_factory_{f.name}"] = f.default_factory
            param = f"{f.name}=_qi_FACTORY"
            body.append(f"if {f.name} is _qi_FACTORY: {f.name} = _qi_factory_{f.name}()")
        else:
            param = f.name
        (kw if f.kw_only else pos).append(param)
        body.append(f"_qi_d[{f.name!r}] = {f.name}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    args = ", ".join(["self"] + pos + (["*"] + kw if kw else []))
    src = f"def __init__({args}):\n    " + "\n    ".join(body) + "\n"
    exec(src, ns)   # the source is made of the class's own field names only
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)   # help() shows the same
    #: the generated ``__init__`` replaced (tests build objects with both and compare)
    cls.__dataclass_init__ = cls.__init__
    cls.__init__ = init
    return cls
