"""Characters that hide or reorder text: control, bidirectional and zero-width characters.

A name, a description or a fact that a person or a model wrote can hold a character that a
terminal acts on rather than shows (an ESC sequence, an OSC title or link), that reorders
what is shown (a bidirectional override, Trojan Source, CVE-2021-42574) or that shows
nothing at all (a zero-width space). :func:`first_hidden` finds one, so the text can be
refused before it is stored; :func:`visible` and :func:`terminal_safe` show text from files
anyone may have written with such characters as escapes (``\\x1b``, ``\\u202e``).
"""

from __future__ import annotations

__all__ = ["HIDDEN", "TERMINAL_UNSAFE", "first_hidden", "terminal_safe", "visible"]

#: Code point -> escape of the characters that hide or reorder text: C0 controls but tab
#: and newline, DEL, C1 controls, the zero-width characters and marks (U+200B-U+200F,
#: U+FEFF) and the bidirectional embeddings, overrides and isolates.
HIDDEN = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f)}
HIDDEN.update({c: f"\\u{c:04x}" for c in (*range(0x80, 0xa0), 0x200b, 0x200c, 0x200d,
                                           0x200e, 0x200f, *range(0x202a, 0x202f),
                                           *range(0x2066, 0x206a), 0xfeff)})

#: Code point -> escape of the characters a terminal would act on rather than show: C0
#: controls but tab and newline, DEL, C1 controls, and the bidirectional overrides, isolates
#: and marks (U+200E, U+200F, U+061C).
TERMINAL_UNSAFE = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
                   for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0),
                             *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F,
                             0x061C]}


def visible(text: str) -> str:
    """``text`` with control, bidirectional and zero-width characters (:data:`HIDDEN`)
    shown as escapes (``\\x1b``, ``\\u202e``), so a staged proposal cannot hide or reorder
    what an approver sees in a terminal; newlines and tabs are kept."""
    return str(text).translate(HIDDEN)


def terminal_safe(text: str) -> str:
    """``text`` with every character of :data:`TERMINAL_UNSAFE` shown as its escape
    (``\\x1b``); newlines and tabs are kept."""
    return text.translate(TERMINAL_UNSAFE)


def first_hidden(text: str, allow: str = "") -> str | None:
    """The first character of ``text`` that is in :data:`HIDDEN` or a newline, and not in
    ``allow`` (e.g. ``"\\r\\n"`` for a file's line ends); None when there is none."""
    return next((c for c in str(text) if (ord(c) in HIDDEN or c == "\n") and c not in allow),
                None)
