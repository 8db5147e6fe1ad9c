"""Skill names as a library looks them up: after one normalisation.

A skill is stored under its name as written (:func:`dyna.loops.skills.check_skill_name`:
NFKC, lowercase). Every lookup by name (:meth:`SkillLibrary.get`, ``[]``, ``in``,
:meth:`~SkillLibrary.patch`, :meth:`~SkillLibrary.retire`, :meth:`~SkillLibrary.restore`,
:meth:`~SkillLibrary.record_outcome`, :meth:`~SkillLibrary.history`, ``dyna skills show``,
``retire``, ``restore``) compares names as identity text is compared everywhere
(:func:`dyna.loops._text.identity_text`: NFKC, case-folded): ``"Ｄeploy"`` and
``"DEPLOY"`` find the skill ``deploy``, ``"STRASSE"`` finds ``straße``.

The rule for two names that fold the same: they cannot both be stored. Adding a skill
whose name folds like the name of a stored skill (active or retired) spelt otherwise is
refused (:class:`~dyna.errors.ConfigError` naming the stored skill); a library folder that
already holds two such skills (written by hand) is read, both are kept and named in a
look-alike warning, and a lookup finds the exact spelling first, else the first of them
in sorted order. A :class:`~dyna.loops.skills.SkillSnapshot` finds its skills by the same
rule (:func:`folded_name`).
"""

from __future__ import annotations

from dyna.errors import ConfigError
from dyna.loops._text import identity_text
from dyna.loops.provenance import skeleton

__all__ = ["FoldedNames", "folded_name"]


def folded_name(name, names) -> str | None:
    """The name among ``names`` that a lookup of ``name`` finds: ``name`` itself if it is
    one of them, else the first in sorted order of those that fold like it
    (:func:`dyna.loops._text.identity_text`: NFKC, case-folded), else None (also for a
    ``name`` that is not a string).

    >>> folded_name("ＤＥＰＬＯＹ", ["deploy", "build"]), folded_name("Strasse", ["straße"])
    ('deploy', 'straße')
    """
    if not isinstance(name, str):
        return None
    if name in names:
        return name
    key = identity_text(name)
    return min((n for n in names if identity_text(n) == key), default=None)


class FoldedNames:
    """Name lookup after NFKC case folding, for
    :class:`~dyna.loops.skills.library.SkillLibrary` (a base class of it, reading its
    active and retired skills and its index of names by confusable skeleton)."""

    def stored_name(self, name) -> str | None:
        """The name under which the skill called ``name`` is stored, active or retired:
        ``name`` itself, else the stored name that folds like it (NFKC, case-folded; the
        first in sorted order if a folder holds several), else None.

        Folding never changes a confusable skeleton (:func:`dyna.loops.provenance.skeleton`),
        so only the names of ``name``'s skeleton are compared.
        """
        if name in self._skills or name in self._retired:
            return name
        if not isinstance(name, str):
            return None
        return folded_name(name, self._skeletons.get(skeleton(name), ()))

    def get(self, name: str):
        """The active or retired skill called ``name``, compared after folding
        (:meth:`stored_name`); None if there is none."""
        name = self.stored_name(name)
        return self._skills.get(name) or self._retired.get(name)

    def __getitem__(self, name: str):
        """The active or retired skill called ``name``, compared after folding.

        Raises
        ------
        ConfigError
            No such skill (``name='x': no such skill``).
        """
        skill = self.get(name)
        if skill is None:
            raise ConfigError("name", name, "no such skill")
        return skill

    def __contains__(self, name) -> bool:
        """Whether an active skill is called ``name`` (compared after folding)."""
        return self.stored_name(name) in self._skills

    def check_new_name(self, name: str) -> None:
        """Refuse a skill called ``name`` as a new skill.

        Raises
        ------
        ConfigError
            An active skill has this name (use :meth:`patch`), or a stored skill (active or
            retired) has a name spelt otherwise that folds like it (field ``name``).
        """
        if name in self._skills:
            raise ConfigError("name", name, "an active skill has this name; use patch()")
        other = self.stored_name(name)
        if other is not None and other != name:
            raise ConfigError("name", name, f"folds like the name of the stored skill "
                              f"{other!r} (NFKC, case-folded): two skills cannot have names "
                              f"that compare equal")
