"""One measured figure: a line of the table and a JSON line."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class Figure:
    """One line of the table and one JSON line."""

    metric: str
    value: float
    unit: str
    #: the figure this one is divided by, and the quotient
    ratio_of: str | None = None
    ratio: float | None = None
    #: ``(">=" or "<=", bound)`` on the ratio when ``ratio_of`` is set, else on the value
    target: tuple[str, float] | None = None
    samples: list[float] = field(default_factory=list)

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        checked = self.ratio if self.ratio_of else self.value
        if checked is None:
            return None
        op, bound = self.target
        return checked >= bound if op == ">=" else checked <= bound

    def as_json(self) -> str:
        data = asdict(self)
        data["target"] = f"{self.target[0]} {self.target[1]:g}" if self.target else None
        data["met"] = self.met
        return json.dumps(data)
