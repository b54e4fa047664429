"""Checks on what users hand us, made before anything is written.

JSON is encoded strictly (no NaN, no objects Django's encoder would quietly
stringify) and read back as jsonb will give it (``jsonb.decode``), so a step
returns the same value on its first run as on every replay from its checkpoint.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from . import jsonb
from .conf import conf
from .errors import InvalidQueueLimit, InvalidWorkflowInput

WORKFLOW_TYPE_MAX_LENGTH = 100
QUEUE_MAX_LENGTH = 100
IDEMPOTENCY_KEY_MAX_LENGTH = 255
STEP_NAME_MAX_LENGTH = 200


class NotJSONSerializable(InvalidWorkflowInput, TypeError):
    """The value cannot be stored as JSON."""


#: What a check's error names: its text, or a function that makes it, called
#: only for the error (a step's checks would otherwise format it at every step).
Described = str | Callable[[], str]


def _named(what: Described) -> str:
    return what if isinstance(what, str) else what()


#: The types whose values jsonb reads back as themselves (a str unless it holds surrogates, see ``to_json``).
_SELF_DECODING = frozenset({type(None), bool, int, str})


def to_json_value(value: Any, what: Described) -> Any:
    """Return ``value`` as it will read back from jsonb (see ``jsonb``), or raise naming ``what``."""
    return to_json(value, what)[0]


def to_json(value: Any, what: Described) -> tuple[Any, str]:
    """Return ``value`` as it will read back from jsonb (keys reordered,
    numbers as ``numeric`` prints them: see ``jsonb``), and as the JSON text
    written (so that it is encoded once), or raise naming ``what``. A scalar
    other than a float is not decoded again: it reads back as itself, but a
    str with a surrogate pair, which decoding joins into one character."""
    encoded = to_json_text(value, what)
    if type(value) in _SELF_DECODING and "\\ud" not in encoded:
        return value, encoded
    return jsonb.decode(encoded), encoded


#: ``json.dumps(value, allow_nan=False)``, without making an encoder a call.
_encoder = json.JSONEncoder(allow_nan=False)


def _encode(value: Any) -> str:
    """``_encoder.encode(value)``; None, a bool and an int (what steps return
    most) without the encoder's machinery, which it builds for each value
    that is not a str."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)  # as the encoder writes an int (and refuses one too long)
    return _encoder.encode(value)


def to_json_text(value: Any, what: Described) -> str:
    """Return ``value`` encoded as JSON that jsonb accepts, or raise naming ``what``."""
    try:
        encoded = _encode(value)
    except (TypeError, ValueError) as exc:
        raise NotJSONSerializable(f"{_named(what)} is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise NotJSONSerializable(f"{_named(what)} is nested too deeply to be encoded as JSON.") from None
    depth = _nesting(encoded)
    if depth > MAX_JSON_DEPTH:
        raise NotJSONSerializable(
            f"{_named(what)} nests arrays and objects {depth} deep; the limit is {MAX_JSON_DEPTH} "
            "(deeper values break the pages and tools that show them)."
        )
    if "\\u0000" in encoded:
        raise NotJSONSerializable(f"{_named(what)} contains a NUL character, which PostgreSQL's jsonb cannot store.")
    if "\\ud" in encoded and not _pairs_surrogates(encoded):
        raise NotJSONSerializable(
            f"{_named(what)} contains a lone surrogate (half of a UTF-16 pair, such as '\\ud800'), "
            "which is not Unicode text and which PostgreSQL's jsonb cannot store."
        )
    limit = conf.MAX_PAYLOAD_BYTES
    if len(encoded) > limit:
        raise InvalidWorkflowInput(
            f"{_named(what)} is {len(encoded)} bytes as JSON, over the {limit}-byte limit "
            "(ORCHESTRATION['MAX_PAYLOAD_BYTES']); store large data elsewhere and pass a reference."
        )
    return encoded


#: How deep arrays and objects may nest in stored JSON (inputs, outputs, events).
MAX_JSON_DEPTH = 100
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = re.compile(r"[^][{}]+")


def _nesting(encoded: str) -> int:
    """How deep the arrays and objects of ``encoded`` (JSON text) nest; when it
    holds no more brackets than ``MAX_JSON_DEPTH``, their count (not above it)."""
    opened = encoded.count("[") + encoded.count("{")
    if opened <= MAX_JSON_DEPTH:  # the common case: counted in C, no string scanned
        return opened
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", encoded))
    return max(accumulate(1 if bracket in "[{" else -1 for bracket in brackets))


def dumps_for_display(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)`` for a page or a terminal; a value nested
    too deeply for Python's encoder (a row written by SQL past ``MAX_JSON_DEPTH``)
    becomes a note instead of an error."""
    try:
        return json.dumps(value, **options)
    except RecursionError:
        pass
    try:
        return json.dumps(value, **{**options, "indent": None})  # C's encoder goes deeper than the indenting one
    except RecursionError:
        return f'"(nested too deeply to show: more than {MAX_JSON_DEPTH} levels; read it with SQL)"'


def _pairs_surrogates(encoded: str) -> bool:
    """Whether the surrogate escapes of ``encoded`` all come in pairs, which jsonb
    joins into one character (JSON decoding joins them the same way)."""
    return _encodable(json.dumps(json.loads(encoded), ensure_ascii=False))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(text: str, what: Described) -> None:
    """Raise naming ``what`` when ``text`` holds what PostgreSQL cannot store in a
    text column: a NUL character, or a lone surrogate (which is not Unicode)."""
    if "\x00" in text:
        raise InvalidWorkflowInput(f"{_named(what)} contains a NUL character, which PostgreSQL cannot store.")
    if not text.isascii() and not _encodable(text):
        raise InvalidWorkflowInput(f"{_named(what)} contains a lone surrogate, which is not Unicode text.")


#: Characters kept of a stored error message (its start) and of a traceback (its end).
ERROR_MESSAGE_MAX_LENGTH = 4_000
TRACEBACK_MAX_LENGTH = 20_000


def storable_text(text: str, limit: int, *, keep_end: bool = False) -> str:
    """``text`` as PostgreSQL can store it: NUL characters and lone surrogates
    written as escapes, and cut to ``limit`` characters, keeping its start (and,
    with ``keep_end``, its end too: a traceback's frames and its last lines)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii() and not _encodable(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    kept = max(0, limit - len(f" [... {len(text)} characters cut ...] "))
    note = f"[... {len(text) - kept} characters cut ...]"
    if keep_end:
        end = kept // 2
        return f"{text[: kept - end]} {note} {text[len(text) - end :]}"
    return f"{text[:kept]} {note}"


def validate_workflow_type(name: Any) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidWorkflowInput(f"A workflow type must be a non-empty string, not {name!r}.")
    check_text(name, f"Workflow type {name[:40]!r}")
    if len(name) > WORKFLOW_TYPE_MAX_LENGTH:
        raise InvalidWorkflowInput(
            f"Workflow type {name[:40]!r}... is {len(name)} characters; the limit is {WORKFLOW_TYPE_MAX_LENGTH}."
        )


_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")


def validate_queue(queue: Any) -> None:
    if not isinstance(queue, str) or not queue.strip() or "," in queue:
        raise InvalidWorkflowInput(f"A queue name must be a non-empty string without commas, not {queue!r}.")
    check_text(queue, f"Queue name {queue[:40]!r}")
    if _CONTROL_CHARACTER.search(queue):  # a tab, a newline: a name no one can tell from another in a list
        raise InvalidWorkflowInput(f"Queue name {queue[:40]!r} contains a control character.")
    if len(queue) > QUEUE_MAX_LENGTH:
        raise InvalidWorkflowInput(f"Queue name {queue[:40]!r}... is longer than {QUEUE_MAX_LENGTH} characters.")


def validate_options(
    *,
    idempotency_key: Any,
    queue: Any,
    priority: Any,
    max_retries: Any,
) -> None:
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key or len(idempotency_key) > IDEMPOTENCY_KEY_MAX_LENGTH
    ):
        raise InvalidWorkflowInput(
            f"idempotency_key must be a non-empty string of at most {IDEMPOTENCY_KEY_MAX_LENGTH} characters, "
            f"not {idempotency_key!r}."
        )
    if idempotency_key is not None:
        check_text(idempotency_key, f"idempotency_key {idempotency_key[:40]!r}")
    validate_queue(queue)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise InvalidWorkflowInput(f"priority must be a 32-bit integer, not {priority!r}.")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries < 2**31:
        raise InvalidWorkflowInput(f"max_retries must be an integer >= 0, not {max_retries!r}.")


def validate_step_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidWorkflowInput(f"A step name must be a non-empty string, not {name!r}.")
    check_text(name, lambda: f"Step name {name[:40]!r}")
    if len(name) > STEP_NAME_MAX_LENGTH:
        raise InvalidWorkflowInput(f"Step name {name[:40]!r}... is longer than {STEP_NAME_MAX_LENGTH} characters.")


#: A run's tags: at most this many, each a non-empty string of at most ``TAG_MAX_LENGTH`` characters.
MAX_TAGS = 20
TAG_MAX_LENGTH = 100


def validate_tags(tags: Any) -> list[str] | None:
    """A run's ``tags`` as stored: a list of strings, each once, in the order
    given; None (or an empty list) is none. Anything else raises naming it, so
    that no run is stored with tags it was not meant to have (a str is refused,
    not taken as its characters)."""
    if tags is None:
        return None
    if not isinstance(tags, list | tuple):
        raise InvalidWorkflowInput(f"tags must be a list of strings, not {type(tags).__name__} {tags!r:.80}.")
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip():
            raise InvalidWorkflowInput(f"tags must be a list of non-empty strings; {tag!r:.80} is not one.")
        check_text(tag, f"Tag {tag[:40]!r}")
        if _CONTROL_CHARACTER.search(tag):
            raise InvalidWorkflowInput(f"Tag {tag[:40]!r} contains a control character.")
        if len(tag) > TAG_MAX_LENGTH:
            raise InvalidWorkflowInput(f"Tag {tag[:40]!r}... is {len(tag)} characters; the limit is {TAG_MAX_LENGTH}.")
    unique = list(dict.fromkeys(tags))
    if len(unique) > MAX_TAGS:
        raise InvalidWorkflowInput(f"A run takes at most {MAX_TAGS} tags, not {len(unique)}.")
    return unique or None


#: The most a run's progress takes as JSON: a few numbers and a message, written
#: up to once a second and read by every waiter and console page that shows it.
PROGRESS_MAX_BYTES = 8 * 1024


def validate_progress(details: Any) -> str:
    """``ctx.set_progress``'s ``details`` as JSON text: a JSON object of at
    most ``PROGRESS_MAX_BYTES``; anything else raises naming it."""
    if not isinstance(details, dict):
        raise InvalidWorkflowInput(
            f"ctx.set_progress takes a JSON object (a dict), such as {{'done': 40, 'total': 100}}, "
            f"not {type(details).__name__} {details!r:.80}."
        )
    encoded = to_json_text(details, "ctx.set_progress's details")
    if len(encoded) > PROGRESS_MAX_BYTES:
        raise InvalidWorkflowInput(
            f"ctx.set_progress's details are {len(encoded)} bytes as JSON, over the {PROGRESS_MAX_BYTES}-byte "
            "limit: report a few numbers and a message, and keep larger data in a step's result."
        )
    return encoded


#: An event's name, with the "event: " prefix, must fit ``workflows.waiting_for``,
#: which is how ``send_event`` finds the workflow that waits for it.
EVENT_NAME_MAX_LENGTH = 150


def validate_event_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidWorkflowInput(f"An event name must be a non-empty string, not {name!r}.")
    check_text(name, f"Event name {name[:40]!r}")
    if len(name) > EVENT_NAME_MAX_LENGTH:
        raise InvalidWorkflowInput(f"Event name {name[:40]!r}... is longer than {EVENT_NAME_MAX_LENGTH} characters.")


def to_timedelta(value: Any, what: str, *, allow_zero: bool = False) -> datetime.timedelta:
    """Seconds (int or float) or a timedelta, as a timedelta; rejects negatives (and zero unless allowed)."""
    given = value
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = datetime.timedelta(seconds=value)
    zero = datetime.timedelta(0)
    if not isinstance(value, datetime.timedelta) or value < zero or (value == zero and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        # Said as given: -1, or a timedelta as seconds, not its repr (days=-1, seconds=86399).
        said = f"{given.total_seconds():g} seconds" if isinstance(given, datetime.timedelta) else repr(given)
        raise InvalidWorkflowInput(f"{what} must be a number of seconds or a timedelta {bound}, not {said}.")
    return value


def validate_key_scope(
    idempotency_key: str | None, unique_while_active: Any, debounce: Any, run_after: Any
) -> tuple[str | None, datetime.timedelta | None]:
    """How long a start's ``idempotency_key`` holds: ``("active", None)``,
    ``("debounce", window)``, or ``(None, None)`` (for ever)."""
    if not isinstance(unique_while_active, bool):
        raise InvalidWorkflowInput(f"unique_while_active must be True or False, not {unique_while_active!r}.")
    if debounce is not None:
        seconds = debounce.total_seconds() if isinstance(debounce, datetime.timedelta) else debounce
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < 10**9:
            raise InvalidWorkflowInput(f"debounce must be a positive number of seconds or timedelta, not {debounce!r}.")
    if not unique_while_active and debounce is None:
        return None, None
    option = "debounce" if debounce is not None else "unique_while_active"
    if idempotency_key is None:
        raise InvalidWorkflowInput(f"{option} needs an idempotency_key: the key its starts are collapsed by.")
    if unique_while_active and debounce is not None:
        raise InvalidWorkflowInput("Pass unique_while_active or debounce, not both.")
    if debounce is None:
        return "active", None
    if run_after is not None:
        raise InvalidWorkflowInput("Pass run_after or debounce, not both: a debounced run starts when its window ends.")
    return "debounce", datetime.timedelta(seconds=seconds)


#: A ``ctx.patched`` change id is a short name, as a step's is.
PATCH_ID_MAX_LENGTH = 100


def validate_patch_id(change_id: Any) -> None:
    if not isinstance(change_id, str) or not change_id.strip() or len(change_id) > PATCH_ID_MAX_LENGTH:
        raise InvalidWorkflowInput(
            f"A patch id must be a non-empty string of at most {PATCH_ID_MAX_LENGTH} characters, not {change_id!r}."
        )
    check_text(change_id, f"Patch id {change_id[:40]!r}")


def validate_timeout(timeout: Any) -> datetime.timedelta | None:
    """A run's time limit as a timedelta, or None."""
    return None if timeout is None else to_timedelta(timeout, "timeout")


def validate_step_timeout(timeout: Any, what: str) -> float:
    """A step's time limit in seconds (finite, > 0), from seconds or a timedelta."""
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
        raise InvalidWorkflowInput(
            f"{what} must be a number of seconds or a timedelta > 0, not {timeout!r}. It is the engine's time "
            "limit of the step; give the step function a timeout of its own with functools.partial(fn, timeout=...)."
        )
    return float(seconds)


# -- flow control: concurrency keys and the limits of a queue -----------------------

CONCURRENCY_KEY_MAX_LENGTH = 255

#: The rate limits' periods, by the letter that writes them: ``"100/m"``.
RATE_PERIODS = {"s": 1, "m": 60, "h": 3600}
#: What a rate limit looks like, whole (the table's check constraint says the same).
RATE_PATTERN = r"[1-9][0-9]{0,8}/[smh]"

#: The limits a queue can have, in ``ORCHESTRATION["QUEUES"]``, ``set_queue_limits`` and the admin.
QUEUE_LIMITS = ("concurrency", "key_concurrency", "rate_limit", "key_rate_limit")


def validate_concurrency_key(key: Any) -> str | None:
    """A run's concurrency key (None: none) as stored: a whole number becomes its text."""
    if key is None:
        return None
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not key:
        raise InvalidWorkflowInput(f"concurrency_key must be a non-empty string (or None), not {key!r}.")
    if len(key) > CONCURRENCY_KEY_MAX_LENGTH:
        raise InvalidWorkflowInput(
            f"concurrency_key {key[:40]!r}... is {len(key)} characters; the limit is {CONCURRENCY_KEY_MAX_LENGTH}."
        )
    return key


def parse_rate(rate: Any) -> tuple[int, int]:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` as (N, seconds of the period); raises ``InvalidQueueLimit``.

    >>> parse_rate("100/m")
    (100, 60)
    """
    if not isinstance(rate, str) or not re.fullmatch(RATE_PATTERN, rate):
        raise InvalidQueueLimit(
            f"A rate limit is written N/s, N/m or N/h (at most N starts a second, minute or hour; N a whole "
            f"number from 1 to 999999999), not {rate!r}."
        )
    count, _, period = rate.partition("/")
    return int(count), RATE_PERIODS[period]


def validate_queue_limit(name: str, value: Any) -> Any:
    """One of ``QUEUE_LIMITS`` as stored (None lifts it); raises ``InvalidQueueLimit``."""
    if name not in QUEUE_LIMITS:
        raise InvalidQueueLimit(f"{name!r} is not a queue limit; the limits are {', '.join(QUEUE_LIMITS)}.")
    if value is None:
        return None
    if name.endswith("rate_limit"):
        parse_rate(value)
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        raise InvalidQueueLimit(f"{name} must be a whole number above 0 (or None for no limit), not {value!r}.")
    return value


def queue_defaults(setting: Any) -> dict[str, dict[str, Any]]:
    """``ORCHESTRATION["QUEUES"]`` as ``{queue: {limit: value}}``: a list of names
    (no limits), or a dict of queue to a dict of limits (or None); raises
    ``InvalidQueueLimit`` naming what is wrong."""
    limits: list[Any]
    if isinstance(setting, list | tuple):
        names, limits = list(setting), [{}] * len(setting)
    elif isinstance(setting, dict):
        names, limits = list(setting), [value or {} for value in setting.values()]
    else:
        raise InvalidQueueLimit(f"it must be a list of queue names or a dict of queue to limits, not {setting!r}")
    defaults: dict[str, dict[str, Any]] = {}
    for name, given in zip(names, limits, strict=True):
        try:
            validate_queue(name)
        except InvalidWorkflowInput as exc:
            raise InvalidQueueLimit(str(exc)) from None
        if not isinstance(given, dict):
            raise InvalidQueueLimit(f"queue {name!r}: its limits must be a dict, not {given!r}")
        try:
            defaults[name] = {limit: validate_queue_limit(limit, value) for limit, value in given.items()}
        except InvalidQueueLimit as exc:
            raise InvalidQueueLimit(f"queue {name!r}: {exc}") from None
    return defaults
