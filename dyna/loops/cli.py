"""CLI of the loops: ``dyna skills ...`` and ``dyna memory ...``.

::

    dyna skills list DIR [--all]           table of skills (files that failed to load too,
                                           and warnings: files loaded leniently)
    dyna skills show DIR NAME              one SKILL.md with competence
    dyna skills match DIR TEXT [--limit N] ranked matches
    dyna skills add DIR --name N --description D [--trigger T ...] --body FILE [--source S]
                                           a person's skill, through the loop's validation
                                           and grading; an untrusted source is staged
    dyna skills catalog DIR [--format markdown|xml|json]
                                           name and description of every active skill, as an
                                           agent gets them in context, with its token count
                                           (xml: the Agent Skills <available_skills> block)
    dyna skills pending DIR                proposals waiting for approval: each whole, with
                                           the diff against the skill it would replace
    dyna skills approve|reject DIR ID
    dyna skills retire|restore DIR NAME [--reason R]
    dyna skills history DIR [--name NAME] [--run RUN]
    dyna skills undo-run DIR RUN [--force]
    dyna memory show PATH                  facts, and pairs that may contradict each other
    dyna memory add PATH TEXT [--source S] a person's fact, as ``skills add``
    dyna memory pending PATH               facts waiting for approval, with the facts they
                                           would supersede
    dyna memory approve|reject PATH ID
    dyna memory consolidate PATH [--cap N] [--dry-run]

Exit status 0; bad input (unknown skill, bad id, unreadable file) prints one line and
exits 2 (handled by :mod:`dyna.cli`). ``list`` exits 1 when some skill files failed to
load, after listing them; files loaded with a warning (a description over 1,024
characters, a name that differs from its folder: loaded as the Agent Skills client guide
asks, never written back) are listed with the file and the rule and exit 0.
"""

from __future__ import annotations

from pathlib import Path

from dyna.errors import ConfigError, MissingFileError
from dyna.fileio.failures import check_utf8
from dyna.fileio.names import first_hidden, terminal_safe, visible
from dyna.fileio.paths import file_kind

__all__ = ["format_table", "register"]


def format_table(headers: list[str], rows: list[list], right: set[int] = frozenset()) -> str:
    """Plain-text table: header, a rule, one line per row; columns padded to their
    widest cell, columns in ``right`` right-aligned, cells cut at 60 characters."""
    cells = [[_cell(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(vals):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _cell(v) -> str:
    s = "" if v is None else str(v)
    s = " ".join(s.split())
    return s if len(s) <= 60 else s[:57] + "..."


class _SafeText:
    """``sys.stdout`` for the skills and memory commands: what they print comes from files
    anyone may have written (hand-dropped skills, a MEMORY.md), so a character a terminal
    would execute (an ESC sequence, an OSC title or link, a bidi override) is shown escaped
    instead; ``add`` refuses such characters, files on disk may still hold them."""

    def __init__(self, out):
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(terminal_safe(text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._out, name)


def _safe_output(func):
    """``func(args)`` with :class:`_SafeText` as ``sys.stdout`` while it runs."""
    import functools
    import sys

    @functools.wraps(func)
    def run(args):
        out = sys.stdout
        sys.stdout = _SafeText(out)
        try:
            return func(args)
        finally:
            sys.stdout = out
    return run


def _library(args):
    from dyna.loops.skills import SkillLibrary

    d = Path(args.dir)
    if d.exists() and not d.is_dir():
        raise ConfigError("DIR", str(d), "is a file, not a skill library folder")
    if not d.is_dir():
        raise MissingFileError("DIR", d, "no such folder")
    return SkillLibrary(d)


def _competence(lib, name):
    a, b = lib.posterior(name)
    lo, hi = lib.competence.interval(name, lib.level)
    return a / (a + b), lo, hi


def _list(args) -> int:
    lib = _library(args)
    rows = []
    for s in lib.skills(include_retired=args.all):
        mean, lo, _ = _competence(lib, s.name)
        rows.append([s.name, s.status, s.kind, ", ".join(s.triggers) or "(description)",
                     s.successes, s.failures, f"{mean:.2f}", f"{lo:.2f}", s.last_verified,
                     s.trust])
    for err in lib.errors:
        rows.append([Path(err.path).parent.name, "ERROR", "", str(err), "", "", "", "", "", ""])
    c = lib.summary()   # (reads the pending proposals: a damaged one fails before any output)
    print(format_table(["name", "status", "kind", "triggers", "ok", "fail", "mean", "lower",
                        "verified", "trust"], rows, right={4, 5, 6, 7}))
    print(f"\n{c['active']} active, {c['retired']} retired, {c['pending']} pending, "
          f"{c['failed']} failed to load ({_plural(c['total'], 'skill file')})"
          + (f", {c['warned']} loaded with warnings" if c["warned"] else ""))
    for err in lib.errors:
        print(f"error: {err}")
    for w in lib.warnings:
        print(f"warning: {w}")
    return 1 if lib.errors else 0


def _show(args) -> int:
    from dyna.loops._text import identity_text
    from dyna.loops.skills import check_skill_name

    # '../../etc' is an invalid name, not a missing one; 'Deploy' finds 'deploy' (names
    # are looked up after NFKC case folding)
    try:
        check_skill_name(identity_text(args.name))
    except ConfigError as exc:
        raise ConfigError("name", args.name, exc.reason) from None
    lib = _library(args)
    if lib.get(args.name) is None:
        for err in lib.errors:           # it is there but could not be read: say why
            if identity_text(Path(err.path).parent.name) == identity_text(args.name):
                raise ConfigError("name", args.name, f"failed to load: {err}")
    s = lib[args.name]
    mean, lo, hi = _competence(lib, s.name)
    a, b = lib.posterior(s.name)
    print(s.to_text(), end="")
    print(f"\ncompetence: Beta(a={a:g}, b={b:g}), mean {mean:.3f}, "
          f"{int(lib.level * 100)}% interval [{lo:.3f}, {hi:.3f}]; status {s.status}"
          + (f" ({s.retired_reason})" if s.retired_reason else ""))
    return 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _warn_failed(lib) -> None:
    """On stderr, a line per skill file that could not be read (``list`` shows them in its
    table), and the hint naming SKILL.md files in nested folders: a skill that is not
    loaded is never matched or listed in a catalog, and a silent absence reads as "no
    such skill"."""
    import sys

    for err in lib.errors:
        print(f"dyna: warning: not loaded: {err}", file=sys.stderr)
    for w in lib.warnings:
        if w.rule == "nested-folders":
            print(f"dyna: warning: {w.message}", file=sys.stderr)


def _match(args) -> int:
    lib = _library(args)
    _warn_failed(lib)
    res = lib.match(args.text, limit=args.limit)
    if not res:
        print("no skill matches")
        return 0
    print(format_table(["rank", "name", "score", "matched", "suspect"],
                       [[i + 1, m.name, f"{m.score:g}", ", ".join(m.matched),
                         "yes" if m.suspect else ""] for i, m in enumerate(res)],
                       right={0, 2}))
    return 0


def _catalog(args) -> int:
    """The catalog in ``args.format`` on stdout; its size on stdout after a Markdown
    catalog, on stderr after XML or JSON (so that stdout parses)."""
    import sys

    from dyna.loops._text import CHARS_PER_TOKEN, estimate_tokens
    from dyna.loops.skills.catalog import render_catalog

    lib = _library(args)
    _warn_failed(lib)
    text = render_catalog(lib, args.format)
    print(text, end="")
    size = (f"{_plural(len(lib), 'skill')}, {_plural(len(text), 'character')}, about "
            f"{_plural(estimate_tokens(text), 'token')} (estimate: characters / "
            f"{CHARS_PER_TOKEN})")
    if args.format == "markdown":
        print(f"\n{size}")
    else:
        print(f"dyna: {size}", file=sys.stderr)
    return 0


def _pending(args) -> int:
    """Every staged proposal in full: what it is, where it came from, why it waits, its
    whole SKILL.md and the unified diff against the skill it would replace (an approver
    must see everything the skill would say, not its description alone)."""
    import difflib

    lib = _library(args)
    items = lib.pending()
    if not items:
        print("nothing pending")
        return 0
    for p in items:
        print(visible(f"== {p.id}: {p.dest}  (run {p.run_id or '-'}, staged {p.staged_at}, "
                      f"provenance {', '.join(p.provenance) or '-'})"))
        if p.reason:
            print(visible(f"   why staged: {p.reason}"))
        new = visible(p.skill.to_text())
        old = lib.get(p.dest)
        if old is None:
            print("   a new skill:")
            print("".join(f"   | {line}" for line in new.splitlines(keepends=True)), end="")
        else:
            print(f"   replaces the {old.status} skill {old.name!r} (trust {old.trust}):")
            diff = difflib.unified_diff(visible(old.to_text()).splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        f"{old.name} (now)", f"{p.dest} (proposed)")
            print("".join(f"   {line}" for line in diff), end="")
        print()
    print(f"{len(items)} pending; approve or reject with: dyna skills approve|reject DIR ID")
    return 0


def _approve(args) -> int:
    res = _library(args).approve(args.id)
    print(f"approved {args.id}: wrote {res.skill.name}"
          + (f" (evicted {res.evicted.name})" if res.evicted else ""))
    return 0


def _reject(args) -> int:
    item = _library(args).reject(args.id)
    print(f"rejected {args.id} ({item.dest})")
    return 0


def _retire(args) -> int:
    skill = _library(args).retire(args.name, "cli", args.reason)
    print(f"retired {skill.name}")
    return 0


def _restore(args) -> int:
    res = _library(args).restore(args.name, "cli", args.reason)
    print(f"restored {res.skill.name}"
          + (f" (evicted {res.evicted.name})" if res.evicted else ""))
    return 0


def _history(args) -> int:
    hist = _library(args).history(name=args.name, run_id=args.run)
    if not hist:
        print("no history")
        return 0
    print(format_table(["seq", "time", "op", "name", "run", "reason"],
                       [[h.seq, h.time, h.op, h.name, h.run_id, h.reason] for h in hist],
                       right={0}))
    return 0


def _undo(args) -> int:
    names = _library(args).undo_run(args.run, force=args.force)
    print(f"reverted run {args.run}: {', '.join(names) if names else 'no skill changed'}")
    return 0


def _submit(loop, proposal, source: str, field: str, shown: str):
    """A person's lesson through the loop's pipeline (:meth:`LearningLoop.submit`):
    validate, grade, then commit, or stage it when ``source`` is not a trusted one. A
    refusal raises with the reason and nothing is written; ``shown`` is the value the
    error names (redacted: a refused secret is never echoed)."""
    from dyna.loops.provenance import Source, parse_source
    from dyna.redact import check_label

    check_label("--source", source)
    person = parse_source(source) is Source.PERSON
    d = loop.submit(proposal, _CLI_RUN, provenance=(source,), by_person=person)
    if d.action not in ("committed", "staged"):
        raise ConfigError(field, _shown(shown), f"refused ({d.action}): {d.detail}")
    return d


#: The run id a change made from the command line is recorded under (history, undo-run).
_CLI_RUN = "cli"


def _shown(text: str) -> str:
    """``text`` as an error may show it: secret-looking parts redacted, cut at 60."""
    from dyna.redact import redact_text

    t = redact_text(" ".join(str(text).split()))
    return t if len(t) <= 60 else t[:57] + "..."


def _staged(dec, what: str, source: str, approve: str) -> str:
    """The line saying a submitted lesson waits for approval, why, and how to approve."""
    pid, _, why = dec.detail.partition(": ")
    return (f"staged {pid}: {what} ({why or f'untrusted source {source}'}); "
            f"approve with: dyna {approve} {pid}")


def _plain(field: str, text: str, *, allow: str = "") -> str:
    """``text`` if it holds no control, bidirectional or zero-width character (those
    :func:`visible` escapes) and no line break but those in ``allow``: they would hide or
    reorder what an approver, an editor or a later agent reads.

    Raises
    ------
    ConfigError
        Naming ``field``, the value shown escaped and redacted, and the character.
    """
    check_utf8(field, text)   # a byte that was not UTF-8 (read with surrogateescape)
    bad = first_hidden(text, allow)
    if bad is not None:
        raise ConfigError(field, visible(_shown(text)), f"holds the character "
                          f"U+{ord(bad):04X} (a control, bidirectional or zero-width "
                          "character, or a line break)")
    return text


def _path(field: str, path: str) -> Path:
    """``path`` as a Path that the file system accepts (a name too long, a NUL: a
    ConfigError naming ``field``, not an OSError)."""
    p = Path(path)
    try:
        p.exists()
    except (OSError, ValueError) as exc:
        raise ConfigError(field, visible(_shown(path)), f"cannot be used as a path "
                          f"({getattr(exc, 'strerror', None) or exc})") from None
    return p


def _read_body(path: str, limit: int) -> str:
    """The body file's text (``-``: standard input): a regular UTF-8 file of at most
    ``limit`` characters, not a symbolic link (``--body notes.md`` linked to
    ``/etc/passwd`` would publish that file as a skill), without hidden characters
    (:func:`_plain`), not empty or white space only."""
    if path == "-":
        import sys

        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:
            raise ConfigError("--body", path, "standard input is closed; give a file")
        return _body_text(stdin.read(4 * limit + 4), path, "standard input", limit)
    p = _path("--body", path)
    kind = file_kind(p)
    if kind == "link":
        raise ConfigError("--body", str(p), "is a symbolic link; give the file itself")
    if kind == "folder":
        raise ConfigError("--body", str(p), "is a folder, not a file")
    if kind == "missing":
        raise MissingFileError("--body", p)
    if kind == "special":               # a FIFO or a device would block or never end
        raise ConfigError("--body", str(p), "is not a regular file")
    with open(p, "rb") as f:
        raw = f.read(4 * limit + 4)         # a UTF-8 character is at most 4 bytes
    return _body_text(raw, str(p), "the file", limit)


def _body_text(raw: bytes, shown: str, what: str, limit: int) -> str:
    """``raw`` (the first bytes of ``--body``, named ``shown``; ``what`` it came from) as
    the body's text: UTF-8, at most ``limit`` characters, not empty, nothing hidden."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("--body", shown, f"is not UTF-8 text (byte {exc.start})") from None
    if len(text) > limit:
        raise ConfigError("--body", shown, f"has more than {limit} characters")
    if not text.strip():
        raise ConfigError("--body", shown, f"the body is empty ({what} holds "
                          f"{'no text' if not text else 'white space only'}): a skill "
                          "needs its instructions")
    return _plain("--body", text, allow="\r\n")   # CRLF line ends too


def _skills_add(args) -> int:
    from dyna.loops.memory import MemoryStore
    from dyna.loops.review import LearningLoop, LoopConfig, Proposal, RuleBasedReviewer
    from dyna.loops.skills import SkillLibrary, check_skill_name

    cfg = LoopConfig()
    check_skill_name(args.name, "--name")
    _plain("--description", args.description)
    for t in args.trigger or ():
        _plain("--trigger", t)
        if not t.strip():
            raise ConfigError("--trigger", t, "is empty; give a word or phrase, or no "
                              "--trigger to match on the description")
        if "," in t:                    # stored comma-separated: "a, b" would be two triggers
            raise ConfigError("--trigger", visible(_shown(t)), "holds a comma; a trigger is "
                              "one word or phrase (triggers are stored comma-separated): "
                              "give each with its own --trigger")
    _plain("--source", args.source)
    d = _path("DIR", args.dir)
    if d.exists() and not d.is_dir():
        raise ConfigError("DIR", str(d), "is a file, not a skill library folder")
    if not d.exists() and not d.parent.is_dir():
        raise MissingFileError("DIR", d.parent, "no such folder (the library's parent "
                               "folder is not created: make it first)")
    body = _read_body(args.body, cfg.max_body_chars)
    proposal = Proposal("skill", args.name, args.description, body, tuple(args.trigger or ()))

    def loop(lib):
        return LearningLoop(lib, MemoryStore(None), RuleBasedReviewer(), cfg)

    if not d.exists():                  # a new library: check first, create it only if it passes
        _submit(loop(SkillLibrary(None)), proposal, args.source, "--name", args.name)
    lib = SkillLibrary(d)
    if args.name in lib:
        raise ConfigError("--name", args.name, "an active skill has this name (retire it "
                          "first, or edit its SKILL.md)")
    dec = _submit(loop(lib), proposal, args.source, "--name", args.name)
    if dec.action == "staged":
        print(_staged(dec, f"skill {args.name}", args.source, f"skills approve {args.dir}"))
    else:
        print(f"added skill {args.name} (grade {dec.grade.score:.2f}): "
              f"{d / lib[args.name].name / 'SKILL.md'}")
    return 0


def _mem_add(args) -> int:
    from dyna.loops.memory import MemoryStore
    from dyna.loops.review import LearningLoop, LoopConfig, Proposal, RuleBasedReviewer
    from dyna.loops.skills import SkillLibrary

    _plain("TEXT", args.text, allow="\n")   # validate says "one line" itself
    _plain("--source", args.source)
    p = _path("PATH", args.path)
    kind = file_kind(p)
    if kind == "link":   # checked before the store makes its .dyna folder
        raise ConfigError("PATH", str(p), "is a symbolic link; refusing to write through it")
    if kind == "folder":
        raise ConfigError("PATH", str(p), "is a folder, not a MEMORY.md file")
    if kind == "special":   # /dev/null: the atomic write would replace it
        raise ConfigError("PATH", str(p), "is not a regular file (a device, a FIFO or a "
                          "socket)")
    if not p.parent.is_dir():
        raise MissingFileError("PATH", p.parent, "no such folder (MEMORY.md's folder is "
                               "not created: make it first)")
    store = MemoryStore(p, cap=None)     # reading creates no file
    loop = LearningLoop(SkillLibrary(None), store, RuleBasedReviewer(), LoopConfig())
    dec = _submit(loop, Proposal("memory", text=args.text), args.source, "TEXT", args.text)
    if dec.action == "staged":
        print(_staged(dec, "fact", args.source, f"memory approve {args.path}"))
    else:
        print(f"{dec.detail} fact (grade {dec.grade.score:.2f}): {dec.proposal.text}")
    return 0


def _memory(args):
    from dyna.loops.memory import MemoryStore

    p = Path(args.path)
    if p.is_dir():
        raise ConfigError("PATH", str(p), "is a folder, not a MEMORY.md file")
    if not p.is_file():
        raise MissingFileError("PATH", p)
    return MemoryStore(p, cap=getattr(args, "cap", None))


def _mem_show(args) -> int:
    store = _memory(args)
    pend = store.pending()   # (a damaged pending file fails before any output)
    print(format_table(["#", "date", "source", "trust", "fact"],
                       [[i + 1, e.date, e.source, e.trust, e.text]
                        for i, e in enumerate(store.entries())], right={0}))
    print(f"\n{len(store)} facts, {len(pend)} pending")
    pairs = store.unsure_pairs()
    if pairs:
        print(f"\n{len(pairs)} pair{'s' if len(pairs) > 1 else ''} to check (both kept):")
        for a, b in pairs:
            print(visible(f"  {a.text!r} / {b.text!r}"))
    return 0


def _mem_pending(args) -> int:
    """Staged facts in full, with the stored facts each would supersede."""
    store = _memory(args)
    items = store.pending()
    if not items:
        print("nothing pending")
        return 0
    what = {"conflict": "would be superseded", "restated": "same value, other words",
            "unsure": "may contradict it; both kept"}
    for p in items:
        print(visible(f"== {p.id}  (run {p.run_id or '-'}, staged {p.staged_at}, provenance "
                      f"{', '.join(p.provenance) or '-'})"))
        if p.reason:
            print(visible(f"   why staged: {p.reason}"))
        print(visible(f"   + {p.entry.text}"))
        for e, rel in store.relations(p.entry.text):
            sign = "-" if rel == "conflict" else "="
            print(visible(f"   {sign} {e.text}  ({e.trust}, {e.date}; {what[rel]})"))
        print()
    print(f"{len(items)} pending; approve or reject with: dyna memory approve|reject PATH ID")
    return 0


def _mem_approve(args) -> int:
    res = _memory(args).approve(args.id)
    print(f"approved {args.id}: {res.status} {res.entry.text!r}"
          + "".join(f"\n  superseded {e.text!r}" for e in res.superseded))
    return 0


def _mem_reject(args) -> int:
    item = _memory(args).reject(args.id)
    print(f"rejected {args.id}: {item.entry.text!r}")
    return 0


def _mem_consolidate(args) -> int:
    store = _memory(args)
    before = len(store)
    report = store.consolidate(run_id="cli", dry_run=args.dry_run)
    print(report)
    if args.dry_run:
        print(f"\n{before} -> {before - report.n_removed} facts (dry run: nothing written)")
    else:
        print(f"\n{before} -> {len(store)} facts")
    return 0


#: The ``--format`` option of ``skills catalog``.
_FORMAT = (("--format",), {"choices": ("markdown", "xml", "json"), "default": "markdown",
                           "help": "markdown (a list, default), xml (the <available_skills> "
                                   "block of the Agent Skills reference tooling's to-prompt, "
                                   "for a system prompt) or json"})


def register(sub) -> None:
    """Add ``skills`` and ``memory`` to the ``dyna`` sub-commands."""
    sk = sub.add_parser("skills", help="inspect and manage a SKILL.md library")
    sks = sk.add_subparsers(dest="skills_command", metavar="ACTION", required=True,
                            parser_class=type(sk))

    def add(name, func, help_, *extra, dir_help="skill library folder"):
        p = sks.add_parser(name, help=help_)
        p.add_argument("dir", metavar="DIR", help=dir_help)
        for args, kw in extra:
            p.add_argument(*args, **kw)
        p.set_defaults(func=_safe_output(func))
        return p

    add("list", _list, "list skills", (("--all",), {"action": "store_true",
                                                     "help": "include retired skills"}))
    add("show", _show, "show one skill", (("name",), {"metavar": "NAME"}))
    add("match", _match, "rank skills for a text", (("text",), {"metavar": "TEXT"}),
        (("--limit",), {"type": int, "default": 3}))
    add("catalog", _catalog, "name and description of every active skill, with its "
        "token count",
        _FORMAT)
    add("add", _skills_add, "add a skill of your own (validated and graded as a loop's "
        "lesson; an untrusted source is staged for approval)",
        (("--name",), {"required": True, "help": "skill name: lowercase letters, digits, "
                                                 "single hyphens (its folder)"}),
        (("--description",), {"required": True, "help": "what it does and when to use it "
                                                        "(1-1,024 characters)"}),
        (("--trigger",), {"action": "append", "metavar": "TEXT",
                          "help": "a word or phrase that selects the skill (no commas); "
                                  "repeat for more (none: it matches on its description)"}),
        (("--body",), {"required": True, "metavar": "FILE",
                       "help": "Markdown file with the instructions (UTF-8; - reads "
                               "standard input)"}),
        (("--source",), {"default": "person", "help": "where it comes from: person, "
                         "internal, verifier (trusted) or web, user_files, email, "
                         "retrieved, tool_output, ... (untrusted: staged)"}),
        dir_help="skill library folder (created if missing; the folder that holds it must "
                 "exist)")
    add("pending", _pending, "list proposals waiting for approval")
    add("approve", _approve, "approve a pending proposal", (("id",), {"metavar": "ID"}))
    add("reject", _reject, "reject a pending proposal", (("id",), {"metavar": "ID"}))
    add("retire", _retire, "retire a skill", (("name",), {"metavar": "NAME"}),
        (("--reason",), {"default": "retired by hand"}))
    add("restore", _restore, "restore a retired skill", (("name",), {"metavar": "NAME"}),
        (("--reason",), {"default": "restored by hand"}))
    add("history", _history, "show the change log", (("--name",), {"default": None}),
        (("--run",), {"default": None}))
    add("undo-run", _undo, "revert everything a run wrote", (("run",), {"metavar": "RUN"}),
        (("--force",), {"action": "store_true"}))

    me = sub.add_parser("memory", help="inspect, approve and consolidate a MEMORY.md file")
    mes = me.add_subparsers(dest="memory_command", metavar="ACTION", required=True,
                            parser_class=type(me))
    p = mes.add_parser("show", help="list the facts")
    p.add_argument("path", metavar="PATH")
    p.set_defaults(func=_safe_output(_mem_show))
    p = mes.add_parser("add", help="add a fact of your own (validated and graded as a "
                       "loop's lesson; an untrusted source is staged for approval)")
    p.add_argument("path", metavar="PATH", help="MEMORY.md file (created if missing; its folder "
                   "must exist)")
    p.add_argument("text", metavar="TEXT", help="the fact, one line")
    p.add_argument("--source", default="person",
                   help="where it comes from: person, internal, verifier (trusted) or web, "
                        "user_files, email, retrieved, tool_output, ... (untrusted: staged)")
    p.set_defaults(func=_safe_output(_mem_add))
    p = mes.add_parser("pending", help="facts waiting for approval")
    p.add_argument("path", metavar="PATH")
    p.set_defaults(func=_safe_output(_mem_pending))
    for name, func, help_ in (("approve", _mem_approve, "write a pending fact"),
                              ("reject", _mem_reject, "drop a pending fact")):
        p = mes.add_parser(name, help=help_)
        p.add_argument("path", metavar="PATH")
        p.add_argument("id", metavar="ID", help="pending id (m0001, ...)")
        p.set_defaults(func=_safe_output(func))
    p = mes.add_parser("consolidate", help="merge near-duplicates, drop superseded and "
                       "vague facts, enforce the cap")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--cap", type=int, default=30)
    p.add_argument("--dry-run", action="store_true",
                   help="print what would change; write nothing, create no file")
    p.set_defaults(func=_safe_output(_mem_consolidate))
