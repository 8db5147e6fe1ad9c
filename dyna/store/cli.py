"""CLI of the experience store: ``dyna store
stats|export|delete|prune|compact|recover|scrub|cache|competence DB``.

::

    dyna store stats DB [--tenant T]
    dyna store competence DB --tenant T --task-type K [--by episode|time] [--out PNG]
    dyna store export DB --tenant T --out PATH [--format jsonl|parquet]
                         [--task-type K] [--run-id R] [--task-id I] [--request-id Q]
    dyna store delete DB --tenant T [--task-type K] [--run-id R] [--task-id I] [--request-id Q]
                         [--dry-run] [--yes]
    dyna store prune DB --max-age SECONDS [--tenant T] [--yes]   (asks if it would empty it)
    dyna store compact DB [--keep N] [--tenant T] [--yes]   (--keep 0 asks first)
    dyna store recover DB --out NEW
    dyna store scrub DB [--dry-run]
    dyna store cache DB

Each runs the operation of the same name through
:meth:`dyna.experience.ExperienceStore.dispatch` and prints its JSON answer (with
``persistence_status``) on stdout. ``DB`` must exist (the CLI never creates a store); its
feature dimension is read from the file. Selectors match exactly, never as prefixes. Bad
input prints one line and exits 2 (handled by :mod:`dyna.cli`).

``stats`` answers from SQL (counts, time span, bytes per tenant and task type) without
loading any episode. ``stats`` and ``export`` open the store read-only: they never rename,
create or write the database (SQLite's ``-wal`` / ``-shm`` companions excepted). A damaged
store makes every command fail with one line naming the file and what SQLite found;
``recover`` copies its readable rows into the new store NEW (refused if NEW exists; written
to a temporary file renamed at the end) and prints ``rows_recovered`` and
``rows_unreadable`` (:func:`dyna.store.recover.recover`). ``scrub`` redacts what an older
version stored: every JSON column re-redacted with the current rules, labels holding a
secret reported by row id (not changed), in one transaction with ``secure_delete``, then a
WAL checkpoint and ``VACUUM`` (:func:`dyna.store.scrub.scrub`); it prints
``values_changed``; ``--dry-run`` counts without writing. ``cache`` writes the feature cache
beside a SQLite store (:mod:`dyna.store.featcache`), with which a store opened without
loading its episodes answers ``query_similar`` from a memory map; it prints ``n_rows``,
``n_tenants``, ``generation`` and ``max_id`` (rewrite it after deletions: until then queries
read from SQL).

``competence`` (defined in :mod:`dyna.experiment.store_competence.cli`, since it draws)
opens the store read-only and follows the store's Beta posterior of one tenant's task type
over its episodes, oldest first (by timestamp, then id): after each episode the posterior
the store would hold had it seen only the episodes up to it (its own prior and discount,
:func:`dyna.competence.posterior_path`), with the 95% equal-tailed credible interval. It
prints the final posterior (the one ``get_competence`` answers) as JSON; with ``--out PNG``
it draws the path against the episode index or, ``--by time``, the episode's time (UTC) into
that PNG (written whole or not at all; its folder must exist), and without ``--out`` it
prints the whole path instead and writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from dyna.errors import ConfigError, ConfirmationError, MissingFileError, NotAStoreError

__all__ = ["register"]


def open_store(db: str, read_only: bool):
    """The experience store at ``db`` (a SQLite file that must exist, or a postgresql://
    DSN of a dyna store), opened with its own ``dim``.

    Raises
    ------
    MissingFileError, NotAStoreError, ConfigError
        Nothing there, not a dyna store, or a folder.
    """
    from dyna.experience import ExperienceStore  # noqa: PLC0415 - keeps `dyna --help` fast
    from dyna.store import postgres as _postgres  # noqa: PLC0415
    from dyna.store.sqlite import stored_dim  # noqa: PLC0415

    if _postgres.is_dsn(db):  # a PostgreSQL store: never shown with its password
        pg_dim = _postgres.stored_dim(db)
        if pg_dim is None:
            raise MissingFileError("DB", _postgres.display_dsn(db), "no dyna store there")
        return ExperienceStore(db, dim=pg_dim, read_only=read_only)
    path = Path(db)
    if path.is_dir():
        raise ConfigError("DB", str(path), "is a folder, not a store file")
    if not path.is_file():
        raise MissingFileError("DB", path)
    dim = stored_dim(path)
    if dim is None:
        raise NotAStoreError(path, "no dim in a meta table")
    # episodes are read by the first operation that needs them: stats never does (SQL)
    return ExperienceStore(path, dim=dim, read_only=read_only, eager=False)


def _shown(db: str) -> str:
    """DB as it may be shown: a PostgreSQL DSN without its password."""
    from dyna.store import postgres  # noqa: PLC0415

    return postgres.display_dsn(db) if postgres.is_dsn(db) else db


def _file_only(db: str, command: str) -> None:
    """Refuse a PostgreSQL DSN for a command that works on SQLite files (without echoing
    the password)."""
    from dyna.store import postgres  # noqa: PLC0415

    if postgres.is_dsn(db):
        raise ConfigError("DB", _shown(db), f"store {command} works on SQLite files; "
                          "PostgreSQL checks and repairs its own pages")


def _selectors(args) -> dict:
    return {k: getattr(args, k) for k in ("task_type", "run_id", "task_id", "request_id")
            if getattr(args, k, None) is not None}


def _run(op: str, build, read_only: bool = False):
    def func(args) -> int:
        store = open_store(args.db, read_only)
        try:
            out = store.dispatch(op, **build(args))
            if op == "get_stats":
                cons = store.dispatch("get_data_consumption", **build(args))
                out["consumption"] = cons["consumption"]
                out["total_bytes"] = cons["total_bytes"]
        finally:
            store.close()
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    return func


def _keep_count(text: str) -> int:
    """``--keep`` as an int; a number too long for int() (over 4,300 digits) is refused
    here in one short line instead of being echoed whole by argparse."""
    import argparse  # noqa: PLC0415

    digits = text.strip().lstrip("+-")
    if digits.isdigit() and len(digits) > 30:
        raise argparse.ArgumentTypeError(f"must be an integer <= 2**62, got one of "
                                         f"{len(digits)} digits")
    try:
        return int(text)
    except ValueError:
        from dyna.redact import redact_text  # noqa: PLC0415 - (redacted, then cut short)

        raise argparse.ArgumentTypeError(f"must be an integer, got "
                                         f"{redact_text(text)[:30]!r}") from None


def _keep(value: int | None) -> int | None:
    """``--keep``: None or an integer in [0, 2**62].

    Raises
    ------
    ConfigError
        Naming the flag ``--keep`` (the store's own check names its internal field).
    """
    from dyna.experience import MAX_KEEP  # noqa: PLC0415

    if value is not None and not 0 <= value <= MAX_KEEP:
        raise ConfigError("--keep", value, "must be an integer >= 0 and <= 2**62")
    return value


def _max_age(value: float) -> float:
    """``--max-age`` in seconds: a finite number >= 0.

    Raises
    ------
    ConfigError
        Naming the flag ``--max-age`` (the store's own check names its internal field).
    """
    import math  # noqa: PLC0415

    if not math.isfinite(value) or value < 0:
        raise ConfigError("--max-age", value, "must be a finite number of seconds >= 0")
    return value


#: ``--out`` suffixes of ``dyna store export`` -> format.
EXPORT_SUFFIXES = {".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl",
                   ".json": "jsonl"}


def _export_format(out: str, given: str | None) -> str:
    """The export format: ``--format`` if given, else from the suffix of ``--out``.

    Raises
    ------
    ConfigError
        No ``--format`` and a suffix that names neither format (``.csv`` was silently
        written as JSONL).
    """
    if given is not None or Path(out).is_dir():
        return given or "jsonl"   # a folder as --out: the export itself refuses it
    suffix = Path(out).suffix.lower()
    if suffix not in EXPORT_SUFFIXES:
        raise ConfigError("--out", out, f"suffix {suffix or '(none)'!r} names no export "
                          "format: use .jsonl or .parquet, or give --format")
    return EXPORT_SUFFIXES[suffix]


def refuse_unknown_tenant(store, args) -> None:
    """Raise ConfigError (``--tenant``, naming up to five tenants the store has) when the
    tenant has no episodes: a mistyped tenant is refused, not answered with nothing."""
    if store.dispatch("get_stats", tenant_id=args.tenant)["n_records"] == 0:
        tenants = store.tenant_ids()
        shown = ", ".join(repr(t) for t in tenants[:5]) + (", ..." if len(tenants) > 5
                                                          else "")
        raise ConfigError("--tenant", args.tenant, "has no episodes in "
                          f"{_shown(args.db)} (tenants: {shown or 'none'})")


def _export(args) -> int:
    """``dyna store export``: the format and the target of ``--out`` checked before the
    store is opened (a symbolic link such as ``/dev/stdout``, a FIFO or a device is
    refused, never replaced); an unknown tenant refused before anything is written."""
    from dyna.fileio.atomic import check_target  # noqa: PLC0415

    check_target(args.out, "--out")   # a link, FIFO or device is never replaced
    fmt = _export_format(args.out, args.format)
    store = open_store(args.db, read_only=True)
    try:
        refuse_unknown_tenant(store, args)
        out = store.dispatch("export_data", tenant_id=args.tenant, path=args.out,
                             format=fmt, **_selectors(args))
    finally:
        store.close()
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _delete(args) -> int:
    """``dyna store delete``: refuse an unknown tenant, count, then ask (or ``--yes``)."""
    import sys  # noqa: PLC0415

    sel = _selectors(args)
    store = open_store(args.db, read_only=True)
    try:
        refuse_unknown_tenant(store, args)
        n = store.count_matching(args.tenant, **sel)
    finally:
        store.close()
    if args.dry_run:
        print(json.dumps({"matched": n, "deleted": 0, "dry_run": True}, indent=2,
                         sort_keys=True))
        return 0
    if n and not args.yes:
        if not sys.stdin.isatty():
            raise ConfirmationError("--yes", False, f"would delete {n} episodes: give --yes to "
                              "delete without a terminal (or --dry-run to count)")
        answer = input(f"delete {n} episodes of tenant {args.tenant!r} from "
                       f"{_shown(args.db)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("dyna: nothing deleted", file=sys.stderr)
            return 1
    return _run("delete_data", lambda a: {"tenant_id": a.tenant, **_selectors(a)})(args)


def _confirm_all(args, n: int, doing: str) -> int | None:
    """Ask before ``doing`` deletes all ``n`` episodes (of ``--tenant``, or of the store), as
    ``delete`` asks: without a terminal, ``--yes`` is needed (ConfigError naming it); a
    "no" is exit status 1. None: go on."""
    import sys  # noqa: PLC0415

    if not n or args.yes:
        return None
    if not sys.stdin.isatty():
        raise ConfirmationError("--yes", False, f"{doing} would delete all {n} episodes: give "
                          "--yes to do it without a terminal")
    whose = f"of tenant {args.tenant!r} " if args.tenant is not None else ""
    answer = input(f"delete all {n} episodes {whose}from {_shown(args.db)}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        print("dyna: nothing deleted", file=sys.stderr)
        return 1
    return None


def _prune(args) -> int:
    """``dyna store prune``: when every episode in scope is older than ``--max-age`` (the
    prune would empty it, e.g. ``--max-age 0``), ask first as ``delete`` does (or
    ``--yes``); otherwise prune as given."""
    from dyna.experience.times import utc_time  # noqa: PLC0415
    from dyna.store.columns import SECONDS_RANGE, time_in_range  # noqa: PLC0415

    age = _max_age(args.max_age)
    if not args.yes:
        store = open_store(args.db, read_only=True)
        try:
            if args.tenant is not None:
                refuse_unknown_tenant(store, args)
            # (the statistics come from SQL: no episode is loaded to count.) Every stored
            # time is in the years 1 to 9999; the stats' times are to the microsecond, so a
            # newest episode in the cutoff's microsecond counts as pruned: the prune asks
            # rather than emptying the store unasked
            st = store.get_stats(args.tenant)
            cutoff = float(store.clock()) - age
            emptied = st["n_records"] and (cutoff >= SECONDS_RANGE[1] or (
                time_in_range(cutoff) and st["newest"] <= utc_time(cutoff)))
        finally:
            store.close()
        stop = _confirm_all(args, st["n_records"] if emptied else 0, f"--max-age {age:g}")
        if stop is not None:
            return stop
    return _run("prune_old", lambda a: {"max_age_seconds": age, "tenant_id": a.tenant})(args)


def _compact(args) -> int:
    """``dyna store compact``: ``--keep 0`` (every record of every task type deleted) asks
    first, as ``delete`` does (or ``--yes``); any other ``--keep`` runs as given."""
    keep = _keep(args.keep)
    if keep == 0 and not args.yes:
        store = open_store(args.db, read_only=True)
        try:
            if args.tenant is not None:
                refuse_unknown_tenant(store, args)
            n = store.dispatch("get_stats", tenant_id=args.tenant)["n_records"]
        finally:
            store.close()
        stop = _confirm_all(args, n, "--keep 0")
        if stop is not None:
            return stop
    return _run("compact", lambda a: {"compact_keep_records": keep,
                                      "tenant_id": a.tenant})(args)


def _add_selectors(p) -> None:
    p.add_argument("--task-type", dest="task_type", help="exact task type")
    p.add_argument("--run-id", dest="run_id", help="exact run id")
    p.add_argument("--task-id", dest="task_id", help="exact task id")
    p.add_argument("--request-id", dest="request_id", help="exact request id")


def register(sub):
    """Add ``dyna store ...`` to the top-level sub-parsers ``sub``; returns the sub-parsers
    of ``dyna store`` (where :mod:`dyna.experiment.store_competence.cli` adds its
    command)."""
    store = sub.add_parser("store", help="inspect and maintain an experience store (SQLite "
                           "file or postgresql:// DSN; put the password in PGPASSWORD or "
                           "~/.pgpass, not on the command line, where ps shows it)")
    cmds = store.add_subparsers(dest="store_command", metavar="ACTION",
                                parser_class=type(store))
    store.set_defaults(func=lambda args: (store.print_help(), 2)[1])

    p = cmds.add_parser("stats", help="records, tenants, task types, bytes, file state")
    p.add_argument("db", metavar="DB")
    p.add_argument("--tenant", help="only this tenant (exact)")
    p.set_defaults(func=_run("get_stats", lambda a: {"tenant_id": a.tenant}, read_only=True))

    p = cmds.add_parser("export", help="export a tenant's episodes to JSONL or Parquet")
    p.add_argument("db", metavar="DB")
    p.add_argument("--tenant", required=True, help="tenant to export (exact; must have "
                   "episodes)")
    p.add_argument("--out", required=True, help="output file")
    p.add_argument("--format", choices=["jsonl", "parquet"], default=None,
                   help="default: from the suffix of --out (.parquet; .jsonl, .ndjson, "
                   ".json; any other suffix is refused)")
    _add_selectors(p)
    p.set_defaults(func=_export)

    p = cmds.add_parser("delete", help="delete a tenant's episodes matching every selector "
                        "(asks first on a terminal)")
    p.add_argument("db", metavar="DB")
    p.add_argument("--tenant", required=True, help="tenant (exact; must have episodes)")
    _add_selectors(p)
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="count the episodes that would be deleted; delete nothing")
    p.add_argument("--yes", action="store_true",
                   help="do not ask (required when stdin is not a terminal)")
    p.set_defaults(func=_delete)

    p = cmds.add_parser("prune", help="delete episodes older than --max-age seconds")
    p.add_argument("db", metavar="DB")
    p.add_argument("--max-age", dest="max_age", type=float, required=True,
                   help="maximum age in seconds (>= 0)")
    p.add_argument("--tenant", help="only this tenant (exact)")
    p.add_argument("--yes", action="store_true",
                   help="when every episode is older than --max-age: do not ask (required "
                   "when stdin is not a terminal)")
    p.set_defaults(func=_prune)

    p = cmds.add_parser("compact", help="keep the newest N per tenant and task type, "
                        "then VACUUM")
    p.add_argument("db", metavar="DB")
    p.add_argument("--keep", type=_keep_count, default=None,
                   help="records kept per tenant and task type (default: delete nothing; "
                   "0 deletes every record, and asks first as delete does)")
    p.add_argument("--tenant", help="only this tenant (exact)")
    p.add_argument("--yes", action="store_true",
                   help="with --keep 0: do not ask (required when stdin is not a terminal)")
    p.set_defaults(func=_compact)

    p = cmds.add_parser("recover", help="copy the readable rows of a damaged store into a "
                        "new store")
    p.add_argument("db", metavar="DB")
    p.add_argument("--out", required=True, metavar="NEW", help="the new store (must not exist)")
    p.set_defaults(func=_recover)

    p = cmds.add_parser("scrub", help="redact what an older version stored (JSON columns "
                        "re-redacted, labels with secrets reported), then secure_delete, "
                        "WAL checkpoint and VACUUM")
    p.add_argument("db", metavar="DB")
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="count the values that would change; write nothing")
    p.set_defaults(func=_scrub)

    p = cmds.add_parser("cache", help="write the feature cache beside a SQLite store, so "
                        "that query_similar answers without loading every episode")
    p.add_argument("db", metavar="DB")
    p.set_defaults(func=_cache)
    return cmds


def _cache(args) -> int:
    from dyna.store import postgres  # noqa: PLC0415

    if postgres.is_dsn(args.db):
        raise ConfigError("DB", _shown(args.db), "store cache writes a file beside a SQLite "
                          "store; a PostgreSQL store has none")
    store = open_store(args.db, read_only=False)
    try:
        out = store.write_feature_cache()
    finally:
        store.close()
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _scrub(args) -> int:
    from dyna.experience import RECORD_SCHEMA  # noqa: PLC0415
    from dyna.store.scrub import scrub  # noqa: PLC0415

    _file_only(args.db, "scrub")
    out = scrub(args.db, RECORD_SCHEMA, dry_run=args.dry_run)
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _recover(args) -> int:
    from dyna.store.recover import recover  # noqa: PLC0415

    from dyna.experience import RECORD_SCHEMA  # noqa: PLC0415

    _file_only(args.db, "recover")
    out = recover(args.db, args.out, RECORD_SCHEMA)
    print(json.dumps(out, indent=2, sort_keys=True))
    return 0
