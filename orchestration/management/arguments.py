"""The management commands' options, refused with the rule they break.

argparse reports a failed ``type=`` with the converter's name ("invalid
_positive_int value: '0'"); an option declared with ``Bounded`` says instead
what it takes: "--concurrency must be a whole number of 1 or more, got 0".
A value only the database or the registry can judge (an unknown queue) is
refused in ``handle`` with ``refused``, under the same exit status argparse
gives (docs/reference/commands.md's table).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError

#: The exit status of an option or argument refused, as argparse exits.
USAGE = 2


def refused(message: str) -> CommandError:
    """A ``CommandError`` for an option's or argument's value, exiting ``USAGE``."""
    return CommandError(message, returncode=USAGE)


class Bounded(argparse.Action):
    """A number option (``kind`` int or float) of at least ``minimum`` (strictly
    above it with ``above``) and at most ``maximum``; ``unit`` names what it
    counts ("seconds", "days"). Floats must be finite."""

    def __init__(
        self,
        *args: Any,
        kind: type[int] | type[float] = int,
        minimum: float = 0,
        above: bool = False,
        maximum: float | None = None,
        unit: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.kind, self.minimum, self.above, self.maximum, self.unit = kind, minimum, above, maximum, unit

    @property
    def rule(self) -> str:
        """What the option takes, in words: "a whole number of 1 or more"."""
        what = "a whole number" if self.kind is int else "a number"
        if self.unit:
            what += f" of {self.unit}"
        if self.maximum is not None:
            return f"{what} from {self.minimum:g} to {self.maximum:g}"
        if self.above:
            return f"{what} above {self.minimum:g}"
        return f"{what} of {self.minimum:g} or more" if not self.unit else f"{what}, {self.minimum:g} or more"

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self.parse(str(values), option_string or self.dest))

    def parse(self, text: str, option: str) -> float:
        try:
            number = self.kind(text.strip())
        except ValueError:
            number = math.nan
        low_ok = number > self.minimum if self.above else number >= self.minimum
        if not (math.isfinite(number) and low_ok and (self.maximum is None or number <= self.maximum)):
            # An ArgumentError without an argument is printed as its message alone.
            raise argparse.ArgumentError(None, f"{option} must be {self.rule}, got {text or repr(text)}")
        return number


#: An option of a time in seconds above 0: ``add_argument("--timeout", **POSITIVE_SECONDS, ...)``.
POSITIVE_SECONDS: dict[str, Any] = {"action": Bounded, "kind": float, "above": True, "unit": "seconds"}
