"""Declared input: ``@workflow(..., input=Schema)`` checked at every start, and
the checked value handed to the workflow function at every attempt.

A schema is a pydantic model (the ``[pydantic]`` extra) or any callable
``check(data)`` that raises on bad input. The stored input stays the JSON the
caller gave (a model instance is stored as its ``model_dump(mode="json")``);
the worker checks it again and passes the function what the schema makes of
it, so a row inserted by plain SQL or started before the schema changed fails
at once, naming the field, instead of somewhere inside a step.

Imported by ``decorator`` before Django's models are ready; pydantic is
imported only when a model's input is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError

from .errors import InvalidWorkflowInput

#: The validation errors a callable schema may raise to refuse an input.
REFUSALS = (ValueError, TypeError, KeyError, ValidationError)

#: How many of a pydantic model's field errors a message names.
ERRORS_NAMED = 3


def check_schema(schema: Any) -> Callable[[Any], Any] | None:
    """``@workflow``'s ``input=`` as given, once it is known to be usable."""
    if schema is not None and not callable(schema):
        raise ImproperlyConfigured(
            f"@workflow input must be a pydantic model or a function that checks the input, not {schema!r}"
        )
    return schema


def is_model(schema: Any) -> bool:
    """Whether ``schema`` is a pydantic model class (told without importing pydantic)."""
    return isinstance(schema, type) and callable(getattr(schema, "model_validate", None))


def validated(workflow_type: str, schema: Callable[[Any], Any], data: Any, where: str = "The input") -> Any:
    """What ``schema`` makes of ``data``: the model instance, or the callable's
    return value (``data`` itself when it returns None). Raises
    ``InvalidWorkflowInput`` naming the workflow and the field at fault."""
    prefix = f"{where} of workflow {workflow_type!r} is invalid"
    if is_model(schema):
        return _model_instance(prefix, schema, data)
    try:
        result = schema(data)
    except InvalidWorkflowInput as exc:
        raise InvalidWorkflowInput(f"{prefix}: {exc}") from exc
    except REFUSALS as exc:
        raise InvalidWorkflowInput(f"{prefix}: {_refusal_text(exc)}") from exc
    return data if result is None else result


def as_json(schema: Any, data: Any) -> Any:
    """The input to store: a model instance given to a start becomes its JSON."""
    if is_model(schema) and isinstance(data, schema):
        return data.model_dump(mode="json")
    return data


def _model_instance(prefix: str, model: Any, data: Any) -> Any:
    try:
        from pydantic import ValidationError as ModelError
    except ImportError:  # pragma: no cover - a model class implies pydantic is there
        raise ImproperlyConfigured(
            "A pydantic model checks this workflow's input, but pydantic is not installed: "
            "pip install 'django-orchestration[pydantic]'."
        ) from None
    try:
        return model.model_validate(data)
    except ModelError as exc:
        problems = [
            f"field {'.'.join(map(str, error['loc'])) or '(the input itself)'!r}: {error['msg']}"
            for error in exc.errors(include_url=False)
        ]
        more = f" (and {len(problems) - ERRORS_NAMED} more)" if len(problems) > ERRORS_NAMED else ""
        raise InvalidWorkflowInput(f"{prefix}: {'; '.join(problems[:ERRORS_NAMED])}{more}") from None


def _refusal_text(exc: BaseException) -> str:
    """A callable schema's refusal as text; Django's ``ValidationError`` of a
    form (``ValidationError(form.errors)``) names each field."""
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"field {field!r}: {' '.join(texts)}" for field, texts in exc.message_dict.items())
        return " ".join(exc.messages)
    if isinstance(exc, KeyError):
        return f"field {exc.args[0]!r} is missing" if exc.args else "a field is missing"
    return str(exc) or type(exc).__name__
