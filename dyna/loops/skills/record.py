"""A skill: a procedure an agent keeps between runs, validated when it is built.

The rules of its fields live in :mod:`dyna.loops.skills.fields`, its SKILL.md text in
:mod:`dyna.loops.skills.skill_md`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from dyna.errors import ConfigError, check_range
from dyna.loops._text import tokenize
from dyna.loops.frontmatter import dump_frontmatter
from dyna.loops.skills.fields import (
    ACTION_RE,
    KINDS,
    MAX_DESCRIPTION,
    MAX_TRIGGER,
    METADATA_KEYS,
    STATUSES,
    TRUST_LEVELS,
    check_date,
    check_skill_name,
    split_list,
)
from dyna.loops.skills.skill_md import skill_from_text, skill_frontmatter

__all__ = ["Skill"]

#: The bookkeeping fields of a :class:`Skill`, in the order its construction checks them
#: (``"a"`` stands for the pair ``a``, ``b``).
_BOOK_FIELDS = ("created", "last_verified", "source_run", "retired_reason", "provenance",
                "trust", "status", "successes", "failures", "a")


@dataclass(frozen=True)
class Skill:
    """One skill: a procedure to follow when a situation arises (or a learned workflow).

    Construction validates and normalises every field (so two skills that read the same
    are equal): triggers and actions given as a string are split on commas (actions also
    on whitespace), stripped and de-duplicated case-insensitively; the body loses leading
    and trailing newlines and CRLF becomes LF.

    Parameters
    ----------
    name : str
        Folder name and identifier, see :func:`check_skill_name`.
    description : str
        1-1,024 characters: what the skill does and when to use it.
    body : str
        Markdown instructions.
    triggers : str or sequence of str
        Words or phrases (no commas, <= 128 characters) that select the skill in
        :meth:`SkillLibrary.match`; empty means "match on the description".
    kind : {"skill", "workflow"}
        A workflow is a checked action sequence callable as one action; it needs
        ``actions``.
    actions : str or sequence of str
        Action names of a workflow, in order (names only: no code, no shell).
    created, last_verified : str
        ISO dates (``YYYY-MM-DD``) of creation and of the last successful use.
    source_run : str
        Id of the run that wrote the skill.
    provenance : str or sequence of str
        What the lesson was learned from, e.g. ``("verified_outcome", "tool_output")``.
    trust : {"trusted", "approved", "untrusted"}
    successes, failures : int
        Outcomes of episodes in which the skill was injected.
    a, b : float or None
        Beta posterior of the skill's competence (None: the library's prior).
    status : {"active", "retired"}
    retired_reason : str
    extra : tuple of (str, object)
        Other top-level frontmatter fields (``license``, ``allowed-tools``, ...), kept as
        read.
    extra_metadata : tuple of (str, object)
        Other ``metadata`` entries, kept as read.
    lenient : tuple of str
        Rules waived when the skill was read from a file (:class:`LoadWarning` rules);
        set by the loader only. Such a skill is never written back until fixed.

    Raises
    ------
    ConfigError
        Naming the offending field and value.
    """

    name: str
    description: str
    body: str = ""
    triggers: tuple[str, ...] = ()
    kind: str = "skill"
    actions: tuple[str, ...] = ()
    created: str = ""
    last_verified: str = ""
    source_run: str = ""
    provenance: tuple[str, ...] = ()
    trust: str = "trusted"
    successes: int = 0
    failures: int = 0
    a: float | None = None
    b: float | None = None
    status: str = "active"
    retired_reason: str = ""
    extra: tuple = ()
    extra_metadata: tuple = ()
    lenient: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        put = object.__setattr__
        put(self, "name", check_skill_name(self.name))
        if not isinstance(self.description, str) or not self.description.strip():
            raise ConfigError("description", self.description, "must be a non-empty string")
        if len(self.description) > MAX_DESCRIPTION and "description-length" not in self.lenient:
            raise ConfigError("description", self.description[:40] + "...",
                              f"must have at most {MAX_DESCRIPTION} characters "
                              f"(has {len(self.description)})")
        if not isinstance(self.body, str):
            raise ConfigError("body", self.body, "must be a string")
        put(self, "body", self.body.replace("\r\n", "\n").replace("\r", "\n").strip("\n"))
        trig = split_list(self.triggers, "triggers", ",")
        for t in trig:
            if len(t) > MAX_TRIGGER:
                raise ConfigError("triggers", t, f"a trigger has at most {MAX_TRIGGER} characters")
            if not tokenize(t)[0]:
                raise ConfigError("triggers", t, "a trigger needs a word or a symbol")
        put(self, "triggers", trig)
        if self.kind not in KINDS:
            raise ConfigError("kind", self.kind, f"must be one of {KINDS}")
        acts = split_list(self.actions, "actions", "")
        acts = tuple(a for part in acts for a in part.split(",") if a)
        for act in acts:
            if not ACTION_RE.fullmatch(act):
                raise ConfigError("actions", act, "an action is a name (letters, digits, "
                                  "'_.:-'), not code or a shell command")
        put(self, "actions", acts)
        if self.kind == "workflow" and not acts:
            raise ConfigError("actions", self.actions, "a workflow needs at least one action")
        self._check_bookkeeping()
        for f in ("extra", "extra_metadata"):
            v = getattr(self, f)
            if isinstance(v, Mapping):
                v = tuple(v.items())
            put(self, f, tuple((str(k), x) for k, x in v))
        for k, _ in self.extra:
            if k in ("name", "description", "metadata", "triggers"):
                raise ConfigError("extra", k, "is a field of its own")
        for k, _ in self.extra_metadata:
            if k in METADATA_KEYS:
                raise ConfigError("extra_metadata", k, "is a field of its own")

    def _check_bookkeeping(self) -> None:
        """Validate and normalise the bookkeeping fields (:data:`_BOOK_FIELDS`, in that
        order) in place: the dates, the run, provenance, trust, status, the outcome counts
        and the posterior."""
        put = object.__setattr__
        for f in _BOOK_FIELDS:
            v = getattr(self, f)
            if f in ("created", "last_verified"):
                put(self, f, check_date(f, v))
            elif f in ("source_run", "retired_reason"):
                if not isinstance(v, str):
                    raise ConfigError(f, v, "must be a string")
                put(self, f, " ".join(v.split()))
            elif f == "provenance":
                put(self, f, split_list(v, "provenance", ","))
            elif f == "trust":
                if v not in TRUST_LEVELS:
                    raise ConfigError("trust", v, f"must be one of {TRUST_LEVELS}")
            elif f == "status":
                if v not in STATUSES:
                    raise ConfigError("status", v, f"must be one of {STATUSES}")
            elif f in ("successes", "failures"):
                put(self, f, check_range(f, v, 0, None, integer=True))
            elif f == "a":   # a and b together
                if (self.a is None) != (self.b is None):
                    raise ConfigError("a", self.a, "a and b are given together or not at all")
                for g in ("a", "b"):
                    x = getattr(self, g)
                    if x is not None:
                        x = float(check_range(g, x, 0.0, None, lo_open=True))
                        if not math.isfinite(x):
                            raise ConfigError(g, x, "must be finite")
                        put(self, g, x)

    def evolve(self, **changes) -> "Skill":
        """This skill with ``changes`` applied (``dataclasses.replace(self, **changes)``):
        built, so validated and normalised, again.

        Raises
        ------
        ConfigError
            A changed field's value is invalid (as :class:`Skill` says).
        """
        return replace(self, **changes)

    # ------------------------------------------------------------------ properties
    @property
    def uses(self) -> int:
        """Episodes with a reported outcome in which the skill was injected."""
        return self.successes + self.failures

    @property
    def active(self) -> bool:
        """The skill is active (not retired)."""
        return self.status == "active"

    # ------------------------------------------------------------------ file format
    def to_frontmatter(self) -> dict:
        """The frontmatter mapping written to SKILL.md (dyna's fields under ``metadata``,
        all values strings): :func:`dyna.loops.skills.skill_md.skill_frontmatter`."""
        return skill_frontmatter(self)

    def to_text(self) -> str:
        """The SKILL.md text of this skill."""
        return dump_frontmatter(self.to_frontmatter(), self.body)

    @classmethod
    def from_text(cls, text: str | bytes, path="<text>", folder: str | None = None, *,
                  lenient: bool = False, warnings: list | None = None) -> "Skill":
        """Parse SKILL.md text.

        Parameters
        ----------
        text : str or bytes
            File content (BOM and CRLF accepted).
        path : str or Path
            For error messages.
        folder : str, optional
            Name of the folder holding the file; the skill's name must equal it (after
            NFKC normalisation).
        lenient : bool
            Load a description over 1,024 characters and a name that differs from the
            folder (then the skill is named after its folder), each with a
            :class:`LoadWarning` appended to ``warnings``, as the Agent Skills client guide
            asks; :attr:`lenient` records the waived rules so the skill is not written back.
        warnings : list, optional
            Receives the :class:`LoadWarning` objects (with ``lenient``).

        Raises
        ------
        FrontmatterError
            Naming the file, the line and the field: bad YAML, missing or invalid
            ``name``/``description``, a name that differs from the folder (unless
            ``lenient``), bad metadata.
        """
        return skill_from_text(cls, text, path, folder, lenient=lenient, warnings=warnings)
