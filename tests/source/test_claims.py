"""What the prose says about the search-space files matches the files: every "`X.yaml` (N variants" in the README,
the docs and the files' own header comments, and every row of the README's table of search spaces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raytune_fl.config import load_space
from tests.support import REPO

SPACES = REPO / "search_spaces"
WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
PROSE = re.compile(r"`?(?:search_spaces/)?(?P<file>[\w/]+\.yaml)`?,?\s*\((?P<count>\w+) variants")
TABLE_ROW = re.compile(r"^\|\s*`(?P<file>[\w/]+\.yaml)`\s*\|\s*(?P<count>\d+)\s*\|", re.MULTILINE)


def _count(text: str) -> int:
    return int(text) if text.isdigit() else WORDS.index(text.lower())


def _claims(path: Path) -> list[tuple[str, int, str]]:
    """(space file, claimed variant count, where) for every claim in one text file."""
    text = path.read_text()
    if path.suffix == ".yaml":  # only the comments speak about files
        text = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    found = []
    for pattern in (PROSE, TABLE_ROW):
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((match["file"], _count(match["count"]), f"{path.relative_to(REPO)}:{line}"))
    return found


def _all_claims() -> list[tuple[str, int, str]]:
    texts = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted(SPACES.rglob("*.yaml"))]
    return [claim for path in texts for claim in _claims(path)]


def test_the_readme_table_names_every_top_level_search_space():
    named = {file for file, _, where in _claims(REPO / "README.md")}
    assert {p.name for p in SPACES.glob("*.yaml")} <= named | {"fedprox.yaml", "moon.yaml"}  # those two share a row
    assert {"quickstart.yaml", "univarfl.yaml"} <= named


@pytest.mark.parametrize("file,count,where", _all_claims(), ids=lambda v: str(v))
def test_a_claimed_variant_count_is_the_files(file: str, count: int, where: str):
    path = SPACES / file
    assert path.exists(), f"{where}: no search_spaces/{file}"
    actual = len(load_space(path).variants)
    assert actual == count, f"{where}: says {file} has {count} variants; it has {actual}"


def test_the_patterns_see_a_stale_claim():
    stale = REPO / "search_spaces" / "univarfl.yaml"
    assert PROSE.search(f"the full example is `{stale.name}` (seven variants, about 11 minutes)")["count"] == "seven"
    assert TABLE_ROW.search("| `univarfl.yaml` | 7 | ...")["count"] == "7"


LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md"])
def test_every_relative_link_of_the_front_pages_exists(page: str):
    targets = [m["target"] for m in LINK.finditer((REPO / page).read_text()) if "://" not in m["target"]]
    assert targets, f"{page} links nothing: the pattern is wrong"
    missing = [t for t in targets if not (REPO / t).exists()]
    assert missing == [], f"{page} links to missing files: {missing}"


def test_the_readme_stays_a_front_door():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move the detail to docs/"
