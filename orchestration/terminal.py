"""Stored text made safe to print on a terminal or in a log line.

Error messages, step names and tracebacks come from user code and remote
systems: written raw, an escape sequence could retitle the window, clear the
screen, or a newline forge a log line. C0 and C1 control characters (and DEL)
are written as Python escapes instead.
"""

from __future__ import annotations

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_CONTROLS = {code: _NAMED.get(code, f"\\x{code:02x}") for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_CONTROLS_BUT_NEWLINE = {code: text for code, text in _CONTROLS.items() if code != 0x0A}


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` with its control characters escaped (``\\x1b``, ``\\n`` ...);
    with ``newlines``, line breaks kept (a traceback's lines).

    >>> printable("boom\\x1b]0;title\\x07\\nfake")
    'boom\\\\x1b]0;title\\\\x07\\\\nfake'
    >>> printable("Traceback:\\n  line\\r", newlines=True)
    'Traceback:\\n  line\\\\r'
    """
    if text.isprintable():  # the common case, checked in C
        return text
    return text.translate(_CONTROLS_BUT_NEWLINE if newlines else _CONTROLS)
