"""resperf (Debian dnsperf) summary output."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z ]+?):\s+([0-9.]+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ResperfResult:
    max_qps: float          # "Maximum throughput"
    lost_percent: float     # "Lost at that point" (percent)
    queries_sent: int
    queries_completed: int


def parse_resperf(text: str) -> ResperfResult:
    fields = {k.strip().lower(): v for k, v in _FIELD.findall(text)}
    try:
        return ResperfResult(
            max_qps=float(fields["maximum throughput"]),
            lost_percent=float(fields["lost at that point"]),
            queries_sent=int(float(fields["queries sent"])),
            queries_completed=int(float(fields["queries completed"])),
        )
    except KeyError as e:
        raise ValueError(f"resperf output lacks {e.args[0]!r}: {text[-300:]!r}") from None
