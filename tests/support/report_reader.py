"""Reads an eval/demo report.md as a user sees it: the results table, the pictures it shows, the settings table.

Written apart from sim/report.py (Markdown parsed back, PNGs decoded), so a report that renders wrong fails here."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class OpenedReport:
    title: str
    rows: dict[str, dict[str, str]]  # task (or "**overall**") -> column -> cell
    pictures: dict[str, Path]  # alt text -> file
    settings: dict[str, str]


def _tables(md: str) -> list[list[list[str]]]:
    tables, current = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return [[row for row in t if not set("".join(row)) <= set("-")] for t in tables]


def open_report(path: Path) -> OpenedReport:
    md = path.read_text()
    tables = _tables(md)
    results, settings = tables[0], next(t for t in tables if t[0] == ["setting", "value"])
    header = results[0]
    rows = {row[0]: dict(zip(header[1:], row[1:])) for row in results[1:]}
    pictures = {alt: path.parent / name for alt, name in re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", md)}
    return OpenedReport(md.splitlines()[0].lstrip("# "), rows, pictures,
                        {k: v.strip("`") for k, v in settings[1:]})


def picture_shows_something(path: Path) -> bool:
    """A decodable PNG of a plausible size whose pixels are not all one colour."""
    import matplotlib.image as mpimg  # optional: test-only, matplotlib ships with the sim extra

    img = mpimg.imread(path)
    return img.shape[0] >= 100 and img.shape[1] >= 100 and float(np.ptp(img[..., :3])) > 0.1
