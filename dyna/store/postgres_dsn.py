"""A PostgreSQL store's DSN without its password: names, scrubbed messages, detached errors.

The DSN of a PostgreSQL store (``postgresql://user:secret@host/db``) may carry a password.
It never appears in a store's ``path``, its stats, an error message or an exception chain:
:func:`display_dsn` rebuilds the DSN without it, :func:`scrubbed` removes every form of it
(:func:`password_forms`) and any other secret :func:`dyna.redact.redact_text` finds from a
server's message, and :func:`detached` keeps the psycopg errors (whose ``pgconn`` holds the
password) out of the typed errors raised in their place.
"""

from __future__ import annotations

import contextlib
import functools
import urllib.parse
from collections.abc import Callable, Sequence

from dyna.errors import StoreError
from dyna.redact import REDACTED, redact_text

__all__ = ["detached", "display_dsn", "is_dsn", "load_psycopg", "password_forms",
           "quote_ident", "scrubbed", "stored_dim"]


def is_dsn(target) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def display_dsn(dsn: str) -> str:
    """The DSN without its password, for messages, stats and manifests.

    ``postgresql://user:secret@host:5432/db?options=...`` ->
    ``postgresql://user@host:5432/db`` (the connection options other than user, host, port
    and database are left out: any of them may carry a secret).
    """
    try:
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415
        parts = conninfo_to_dict(dsn)
    except Exception:  # unparsable, or no psycopg: show nothing of it
        return "postgresql://[DSN not shown]"
    user = parts.get("user")
    host = parts.get("host") or ""
    port = parts.get("port")
    db = parts.get("dbname") or ""
    return (f"postgresql://{user + '@' if user else ''}{host}{':' + port if port else ''}"
            f"/{db}")


def password_forms(dsn: str) -> tuple[str, ...]:
    """Every form of the DSN's password that a message may echo, longest first.

    The one libpq parses and, for a DSN libpq cannot parse (whose error quotes the
    offending token), the URI's password and ``password=`` query values as written and
    percent-decoded (``sslpassword`` too).
    """
    found = set()
    with contextlib.suppress(Exception):
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415
        parts = conninfo_to_dict(dsn)
        found |= {parts.get("password") or "", parts.get("sslpassword") or ""}
    with contextlib.suppress(Exception):
        parts = urllib.parse.urlsplit(dsn)
        netloc = parts.netloc.rpartition("@")[0]
        if ":" in netloc:
            found.add(netloc.split(":", 1)[1])
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key in ("password", "sslpassword"):
                found.add(value)
        for pw in [raw.split("&")[0] for raw in parts.query.split("password=")[1:]]:
            found.add(pw)
    found |= {urllib.parse.unquote(pw) for pw in found}
    return tuple(sorted((pw for pw in found if pw), key=len, reverse=True))


def scrubbed(text: object, secret: Sequence[str] | None) -> str:
    """An error text on one line with the DSN's password (every form of
    :func:`password_forms`, given as ``secret``) and any other secret
    :func:`dyna.redact.redact_text` finds redacted."""
    text = " ".join(str(text).split())  # libpq's messages span lines: one line here
    for pw in secret or ():
        text = text.replace(pw, REDACTED)
    return redact_text(text)


def _from_psycopg(err: BaseException) -> bool:
    """Whether a psycopg error is anywhere in ``err``'s chain of causes and contexts."""
    seen, todo = set(), [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e).__module__.startswith("psycopg"):
            return True
        todo += [e.__cause__, e.__context__]
    return False


def detached(fn: Callable, typed: Callable[[object, BaseException], Exception] | None = None
             ) -> Callable:
    """Wrap a function so that the typed error it raises carries no exception chain.

    Each psycopg error it replaced stays out of ``__context__`` (``raise ... from None``
    only hides it from a traceback), since a connection error's ``pgconn`` holds the DSN's
    password and a parse error's text may quote it. A psycopg error that escaped unmapped
    becomes ``typed(first argument, error)`` (a method's typed error), or without
    ``typed`` a :class:`dyna.errors.StoreError` with the text scrubbed.
    """
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - re-raised below, detached
            err = exc
        if type(err).__module__.startswith("psycopg"):
            err = (typed(args[0], err) if typed is not None and args
                   else StoreError(f"PostgreSQL: {scrubbed(err, None)}"))
        if _from_psycopg(err):
            err.__context__ = err.__cause__ = None
        raise err

    return call


def load_psycopg(dsn: str):
    """The psycopg module, or a StoreError saying how to install it."""
    try:
        import psycopg  # noqa: PLC0415
    except ImportError:
        raise StoreError(f"DB={display_dsn(dsn)}: the PostgreSQL backend needs psycopg 3: "
                         'pip install -e ".[postgres]" in the dyna checkout') from None
    return psycopg


def quote_ident(name: str) -> str:
    """A double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


@detached
def stored_dim(dsn: str, timeout: float = 10.0) -> int | None:
    """The vector dim of the dyna store in the DSN's schema, or None when it holds none.

    Reads only (``meta``'s ``dim`` row; nothing is created). Raises
    :class:`dyna.errors.StoreError` when the server cannot be reached (no password in it).
    """
    psycopg = load_psycopg(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True,
                             connect_timeout=max(1, int(round(timeout)))) as conn:
            ns = conn.execute("SELECT pg_catalog.current_schema()").fetchone()[0]
            if ns is None or conn.execute("SELECT pg_catalog.to_regclass(%s)",
                                          (f"{quote_ident(ns)}.meta",)).fetchone()[0] is None:
                return None
            row = conn.execute(f"SELECT value FROM {quote_ident(ns)}.meta WHERE key = 'dim'"
                               ).fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"DB={display_dsn(dsn)}: {scrubbed(exc, password_forms(dsn))}"
                         ) from None
    try:
        return int(row[0]) if row else None
    except ValueError:
        return None
