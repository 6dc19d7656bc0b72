"""results/ holds only the figures of record: few files, each named in docs/results.md, every results/ path
the docs cite exists, every plotted JSON has its PNG; and the plotting code draws what the data says."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
MAX_FILES = 40
# a results/ path in backticks or prose; not one after "<commit>:" (git show 81df598:results/..., in history only)
CITED = re.compile(r"(?<![\w:/.-])results/[\w./{},*-]*")


def _plots():
    return load_script("benchmarks/plots/make_plots.py", "make_plots")


def _files() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*") if p.is_file())


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in _expand(path[:m.start()] + alt + path[m.end():])]


def _exists(cited: str) -> bool:
    cited = cited.rstrip(".,")
    return all(any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists() for p in _expand(cited))


def test_results_has_at_most_40_files():
    files = _files()
    assert len(files) <= MAX_FILES, f"{len(files)} files under results/: {[str(p) for p in files]}"


def test_every_file_under_results_is_named_in_docs_results_md():
    table = (ROOT / "docs" / "results.md").read_text()
    named = {p.removeprefix("results/") for cell in re.findall(r"`([^`]+)`", table) for p in _expand(cell)}
    missing = [str(p.relative_to(RESULTS)) for p in _files() if str(p.relative_to(RESULTS)) not in named]
    assert not missing, f"under results/ but not named in docs/results.md: {missing}"


def test_every_results_path_cited_in_readme_and_docs_exists():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    dangling = []
    for doc in docs:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in CITED.finditer(line):
                cited = m.group(0)
                if cited.rstrip(".,") == "results/" or line[:m.start()].endswith("--out "):
                    continue  # the folder itself; where a command wrote its raw output
                if not _exists(cited):
                    dangling.append(f"{doc.relative_to(ROOT)}:{n}: {cited}")
    assert not dangling, "cited but missing:\n" + "\n".join(dangling)


def test_every_plotted_json_has_its_png():
    mod = _plots()
    missing = []
    for rel in mod.PLOTS:
        src = RESULTS / rel
        assert src.is_file(), f"make_plots.PLOTS names {rel}, which is not under results/"
        png = mod.png_for(src)
        if not png.is_file() or png.stat().st_size == 0:
            missing.append(str(png.relative_to(ROOT)))
    assert not missing, f"plots missing (python benchmarks/plots/make_plots.py): {missing}"


def _fuzz(violations: int, steps: int) -> dict:
    rows = [{"robot": r, "joints": j, "rate_hz": hz, "steps": steps, "episodes": 1, "violations": violations,
             "steps_per_s": 1000} for r, j in (("panda", 8), ("ur5e", 6)) for hz in (100.0, 1000.0)]
    return {"fuzz": rows, "total_steps": steps * len(rows), "total_violations": violations * len(rows)}


def _pixels(path: Path):
    import matplotlib.image as mpimg
    return mpimg.imread(path)


def test_plots_draw_the_data(tmp_path):
    mod = _plots()
    runs_hi = {"what": "test", "runs": [{"name": "a", "successes": 95, "episodes": 100,
                                         "per_task": {"pick_red": [48, 50], "touch_yellow": [47, 50]}}]}
    runs_lo = {"what": "test", "runs": [{"name": "a", "successes": 20, "episodes": 100,
                                         "per_task": {"pick_red": [10, 50], "touch_yellow": [10, 50]}}]}
    images = {}
    for name, data, fn in (("hi", runs_hi, mod.plot_reported_seeds), ("lo", runs_lo, mod.plot_reported_seeds),
                           ("fuzz_a", _fuzz(0, 1000), mod.plot_fuzz), ("fuzz_b", _fuzz(0, 50), mod.plot_fuzz)):
        src = tmp_path / f"{name}.json"
        src.write_text(json.dumps(data))
        fn(json.loads(src.read_text()), mod.png_for(src))
        png = mod.png_for(src)
        assert png.is_file() and png.stat().st_size > 1000
        images[name] = _pixels(png)
    assert images["hi"].shape == images["lo"].shape
    # the bars are drawn from the data: different success rates, different pixels (and more ink for the higher bars)
    assert (images["hi"] != images["lo"]).any()
    ink = {k: (images[k][..., :3].mean(axis=-1) < 0.9).sum() for k in ("hi", "lo")}
    assert ink["hi"] > ink["lo"]
    assert (images["fuzz_a"] != images["fuzz_b"]).any()


def test_wilson_interval():
    mod = _plots()
    lo, hi = mod.wilson(197, 200)
    assert lo == pytest.approx(0.9568, abs=1e-4) and hi == pytest.approx(0.9949, abs=1e-4)  # as omni-vla eval reports
    assert mod.wilson(0, 50)[0] == pytest.approx(0.0, abs=1e-12) and mod.wilson(50, 50)[1] == 1.0
