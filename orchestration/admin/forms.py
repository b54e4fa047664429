"""The forms of the console's own pages: a skipped step's output, an event to send.

Both take JSON typed by hand, read strictly: Python's ``json`` accepts NaN and
Infinity, which are not JSON and which a ``jsonb`` column refuses.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms

from ..errors import InvalidWorkflowInput
from ..validation import EVENT_NAME_MAX_LENGTH, validate_event_name


class SkipStepForm(forms.Form):
    output = forms.CharField(
        label="Output of the step, as JSON",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "class": "vLargeTextField orch-json-input"}),
        help_text='What the step would have returned, e.g. {"payout_id": "po_123"}, "done" or null. '
        "Later steps receive it exactly as if the step had run.",
        strip=True,
    )

    def clean_output(self) -> Any:
        return parse_json(self.cleaned_data["output"])


class SendEventForm(forms.Form):
    name = forms.CharField(
        label="Event name",
        max_length=EVENT_NAME_MAX_LENGTH,
        help_text="The name the workflow's ctx.wait_for_event(name) waits for.",
        widget=forms.TextInput(attrs={"size": 40, "class": "vTextField"}),
    )
    payload = forms.CharField(
        label="Payload, as JSON",
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 5, "cols": 80, "class": "vLargeTextField orch-json-input"}),
        help_text='What ctx.wait_for_event returns, e.g. {"approved": true, "by": "grace@example.com"}. '
        "Leave it empty to send null.",
    )

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        try:
            validate_event_name(name)
        except InvalidWorkflowInput as exc:
            raise forms.ValidationError(str(exc)) from None
        return name

    def clean_payload(self) -> Any:
        text = self.cleaned_data["payload"]
        return parse_json(text) if text else None


def parse_json(text: str) -> Any:
    """The value ``text`` holds as strict JSON (no NaN or Infinity), or a ValidationError saying why not."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise forms.ValidationError(f"Not valid JSON: {exc}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
