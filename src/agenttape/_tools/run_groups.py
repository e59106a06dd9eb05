"""``agenttape runs STORE --errors --by model,hour,tag:K``: where the failing runs cluster.

A group is the runs sharing a value of each dimension (one model, one hour, one tenant). Its
expected count is what the store's base rate predicts if the dimensions were independent:
the failing runs in all times the share of all runs with that model, that hour and that
tenant. Groups are ranked by how far they stand above it, ``(seen - expected) / sqrt(expected)``
— "same model, same hour, same tenant" shows up as a large score even in a store that keeps
only failing runs. Cold cases (runs marked as not replayable) are counted beside.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._production.stored_runs import RunInfo, plain

DIMENSIONS = ("model", "hour", "status")
TOP = 20
CHART_GROUPS = 5


@dataclass(slots=True, frozen=True)
class Group:
    """One group: its values, its runs (failing ones with ``--errors``), cold cases among
    them, what the base rate predicts, and the score it is ranked by."""

    key: tuple[str, ...]
    runs: int
    cold: int
    expected: float
    score: float
    hours: dict[str, int]

    def to_dict(self, dimensions: Sequence[str]) -> dict[str, Any]:
        return {
            "group": dict(zip(dimensions, self.key, strict=True)),
            "runs": self.runs,
            "cold": self.cold,
            "expected": round(self.expected, 3),
            "score": round(self.score, 3),
            "hours": self.hours,
        }


def parse_by(text: str) -> list[str]:
    """``model,hour,tag:tenant_id``; ValueError for an unknown dimension."""
    dimensions = [part.strip() for part in text.split(",") if part.strip()]
    for dimension in dimensions:
        if dimension not in DIMENSIONS and not (
            dimension.startswith("tag:") and len(dimension) > 4
        ):
            raise ValueError(
                f"--by {dimension!r}: group by model, hour, status or tag:KEY (comma-separated)"
            )
    if not dimensions:
        raise ValueError("--by needs at least one of model, hour, status, tag:KEY")
    return dimensions


def hour_of(info: RunInfo) -> str:
    if info.created_at is None:
        return "-"
    return info.created_at.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:00")


def value(info: RunInfo, dimension: str) -> str:
    if dimension == "model":
        return ",".join(info.models) or "-"
    if dimension == "hour":
        return hour_of(info)
    if dimension == "status":
        return info.status
    found = info.tags.get(dimension[4:])
    return "-" if found is None else str(plain(found))


@dataclass(slots=True, frozen=True)
class Ranking:
    """The base rates of the runs looked at and the groups, highest score first."""

    dimensions: list[str]
    runs: int
    focus: int
    cold: int
    groups: list[Group]

    def to_dict(self) -> dict[str, Any]:
        return {
            "by": self.dimensions,
            "base": {
                "runs": self.runs,
                "counted": self.focus,
                "cold": self.cold,
                "rate": round(self.focus / self.runs, 6) if self.runs else None,
            },
            "groups": [group.to_dict(self.dimensions) for group in self.groups],
        }


def rank(runs: Sequence[RunInfo], dimensions: Sequence[str], errors: bool) -> Ranking:
    """Group ``runs`` (the failing ones, with ``errors``) and rank the groups."""
    focus = [info for info in runs if info.is_error] if errors else list(runs)
    total = len(runs)
    shares = [Counter(value(info, dimension) for info in runs) for dimension in dimensions]
    members: dict[tuple[str, ...], list[RunInfo]] = defaultdict(list)
    for info in focus:
        members[tuple(value(info, dimension) for dimension in dimensions)].append(info)
    groups = []
    for key, found in members.items():
        expected = float(len(focus))
        for share, part in zip(shares, key, strict=True):
            expected *= share[part] / total
        score = (len(found) - expected) / math.sqrt(expected) if expected else 0.0
        hours = Counter(hour_of(info) for info in found)
        groups.append(
            Group(
                key=key,
                runs=len(found),
                cold=sum(info.is_cold for info in found),
                expected=expected,
                score=score,
                hours=dict(sorted(hours.items())),
            )
        )
    groups.sort(key=lambda group: (-group.score, -group.runs, group.key))
    return Ranking(
        dimensions=list(dimensions),
        runs=total,
        focus=len(focus),
        cold=sum(info.is_cold for info in focus),
        groups=groups,
    )


def format_ranking(ranking: Ranking, errors: bool) -> str:
    """A plain table: the groups that stand out first."""
    what = "failing runs" if errors else "runs"
    if not ranking.runs:
        return "no runs"
    rate = ranking.focus / ranking.runs
    lines = [
        f"{ranking.focus} {what} of {ranking.runs} ({rate:.1%}), {ranking.cold} cold; "
        f"groups ranked by how far they stand above the base rate"
    ]
    header = [*ranking.dimensions, what.split()[-1] if not errors else "failing", "cold"]
    rows = [[*header, "expected", "score"]]
    for group in ranking.groups[:TOP]:
        rows.append(
            [
                *group.key,
                str(group.runs),
                str(group.cold),
                f"{group.expected:.1f}",
                f"{group.score:+.1f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if len(ranking.groups) > TOP:
        lines.append(f"... {len(ranking.groups) - TOP} more groups (--json lists them all)")
    return "\n".join(lines)


def to_json(ranking: Ranking) -> str:
    return json.dumps(ranking.to_dict(), indent=2, ensure_ascii=False)


COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e")


def to_html(ranking: Ranking, store: str) -> str:
    """One self-contained page (inline SVG, no script, nothing fetched): the top groups'
    counts per hour, and the ranking as a table."""
    width, height = CHART_SIZE
    chart, legend = _chart(ranking.groups[:CHART_GROUPS])
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(part)}</td>" for part in group.key)
        + f"<td>{group.runs}</td><td>{group.cold}</td><td>{group.expected:.1f}</td>"
        f"<td>{group.score:+.1f}</td></tr>"
        for group in ranking.groups[:TOP]
    )
    heads = "".join(f"<th>{html.escape(d)}</th>" for d in ranking.dimensions)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>agenttape: where runs cluster in {html.escape(store)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 10px; text-align: left; }}
tr:nth-child(even) {{ background: #f4f4f4; }}
ul {{ list-style: none; padding: 0; }}
.legend span {{ display: inline-block; width: 12px; height: 12px; margin-right: 6px; }}
</style></head><body>
<h1>Where runs cluster</h1>
<p class="base">{ranking.focus} of {ranking.runs} runs counted, {ranking.cold} cold; by
{html.escape(", ".join(ranking.dimensions))}. Top groups per hour:</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"
 viewBox="0 0 {width} {height}" role="img">{chart}</svg>
<ul>{legend}</ul>
<table><thead><tr>{heads}<th>runs</th><th>cold</th><th>expected</th><th>score</th></tr></thead>
<tbody>{rows}</tbody></table>
</body></html>
"""


# The chart's width, height and margin, in pixels.
CHART_SIZE = (760, 260)
CHART_MARGIN = 40


def _chart(top: list[Group]) -> tuple[str, str]:
    """The SVG inside of the chart (axes, hour ticks, a line per group) and its legend."""
    width, height = CHART_SIZE
    margin = CHART_MARGIN
    hours = sorted({hour for group in top for hour in group.hours} - {"-"})
    peak = max((count for group in top for count in group.hours.values()), default=1)
    step = (width - 2 * margin) / max(1, len(hours) - 1)

    def point(position: int, count: int) -> str:
        x = margin + position * step
        y = height - margin - (height - 2 * margin) * count / peak
        return f"{x:.1f},{y:.1f}"

    series = []
    legend = []
    for number, group in enumerate(top):
        color = COLORS[number % len(COLORS)]
        points = " ".join(
            point(position, group.hours.get(hour, 0)) for position, hour in enumerate(hours)
        )
        label = html.escape(" / ".join(group.key))
        series.append(
            f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" '
            f'points="{points}"><title>{label}</title></polyline>'
        )
        legend.append(
            f'<li class="legend"><span style="background:{color}"></span>{label}: '
            f"{group.runs} (expected {group.expected:.1f}, score {group.score:+.1f}, "
            f"{group.cold} cold)</li>"
        )
    ticks = []
    for position, hour in enumerate(hours):
        if len(hours) <= 12 or position % max(1, len(hours) // 12) == 0:
            x = margin + position * step
            ticks.append(
                f'<text x="{x:.1f}" y="{height - margin + 16}" font-size="10" '
                f'text-anchor="middle">{html.escape(hour[5:])}</text>'
            )
    axes = (
        f'<line x1="{margin}" y1="{height - margin}" x2="{width - margin}" '
        f'y2="{height - margin}" stroke="#888"/>'
        f'<line x1="{margin}" y1="{margin}" x2="{margin}" y2="{height - margin}" stroke="#888"/>'
        f'<text x="{margin - 6}" y="{margin + 4}" font-size="10" text-anchor="end">{peak}</text>'
        f'<text x="{margin - 6}" y="{height - margin}" font-size="10" text-anchor="end">0</text>'
    )
    return axes + "".join(ticks) + "".join(series), "".join(legend)
