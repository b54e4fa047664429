"""JSON as PostgreSQL's ``jsonb`` gives it back.

``jsonb`` does not keep a JSON text as written: an object's keys come back
shorter first (then in byte order), a duplicate key keeps its last value, and
a number is a ``numeric``, written back without an exponent (``1e+16`` reads
back as the integer ``10000000000000000``, ``1.5e-07`` as ``0.00000015``)
and without a sign on zero (``-0.0`` reads back as ``0.0``). ``decode`` reads
a JSON text the engine wrote into the value a read of the stored ``jsonb``
returns, without asking the database: what a step returns on its first
attempt is what every replay reads from its checkpoint.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


def _key_order(key: str) -> tuple[int, str]:
    # By length in UTF-8 bytes, then bytewise: comparing code points orders
    # as comparing their UTF-8 bytes does.
    return (len(key) if key.isascii() else len(key.encode()), key)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len(pairs) < 2:
        return dict(pairs)
    found = dict(pairs)  # a key written twice keeps its last value, as in jsonb
    return {key: found[key] for key in sorted(found, key=_key_order)}


def _number(text: str) -> int | float:
    """A JSON number with a fraction or an exponent, as ``numeric`` prints it
    back: with as many decimals as the text has after its point, less its
    exponent. None left (``1e+16``, ``1.5e+16``): an integer, exactly as
    ``Decimal`` reads it; else the float itself, but a negative zero's sign."""
    mantissa, _, exponent = text.lower().partition("e")
    if exponent and len(mantissa.partition(".")[2]) <= int(exponent):
        return int(Decimal(text))
    return float(text) or 0.0


_decoder = json.JSONDecoder(object_pairs_hook=_object, parse_float=_number)


def decode(text: str) -> Any:
    """The value a read of ``text`` stored as ``jsonb`` returns (``text`` being
    JSON that jsonb accepts, as ``validation.to_json_text`` writes it)."""
    return _decoder.decode(text)
