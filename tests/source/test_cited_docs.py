"""Every document the repository cites exists. A `*.md` path named anywhere in the files git tracks (or would track:
new files it does not ignore) — a docstring, a comment, a test, a YAML comment, a help string, a markdown page — is
a file of the repository:

- a markdown link in a page, `[text](path.md#anchor)`, from the page's folder (as MkDocs and GitHub read it);
- a bare path with a folder, `docs/explanation/methods.md`, from the repository's root, the citing file's folder, or
  docs/ (MkDocs' docs_dir: mkdocs.yml's nav and the pages the tools generate name pages from there);
- a bare file name, `CONTRIBUTING.md`, wherever a file of that name is.

What is not a citation (a glob, a template, a path outside the checkout, a run's output) is let through by the few
rules in IGNORED, each with its reason."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

import pytest

from tests.support import REPO, git_output

# A markdown link's target, in a page: `](target)` up to a space (a title may follow) or the closing bracket. The
# link's text is not needed, and wrapping may have put it on the line before.
LINK = re.compile(r"\]\((?P<target>[^)\s]+)")
# A bare path: a run of path characters ending in `.md` (not `.md5`). The characters of globs and templates
# (`*`, `<>`, `{}`, `$`) are part of the run, so that IGNORED sees them and lets the whole of it go.
BARE = re.compile(r"(?<![\w./<>{}*$-])(?P<path>[\w./<>{}*$-]*\.md)(?!\w)")
IGNORED = (
    # a glob (`DOCS.rglob("*.md")`): a pattern, not a file
    re.compile(r"\*"),
    # a template filled in at run time: `<out>/<NAME>.md`, an f-string's `{name}.md`, `docs/results/NAME.md`
    re.compile(r"[<>{}]|(?:^|/)NAME\.md$"),
    # outside the checkout: an environment variable's path ($OUT/...), an absolute one (/tmp/...), a URL's (//host/)
    re.compile(r"^[$/]"),
    # what an ablation writes (raytune_fl/ablation/run.py): the MLflow artifact ablation/table.md, --out's
    # ablation_table.md; outputs of a run, named where they are written or read
    re.compile(r"(?:^|/)(?:ablation_)?table\.md$"),
)
# Pages the site makes rather than the repository holding them: tools/mkdocs_hooks.py serves CONTRIBUTING.md as
# contributing.md, so the pages link to it there.
SERVED = {"docs/contributing.md": "CONTRIBUTING.md"}
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()
# The tests of citation checks name missing documents on purpose: this file's samples, test_stands_alone.py's
# outside documents, and test_docs.py's site with a broken link (no-such-page.md on an extra.md page).
ON_PURPOSE = {THIS_FILE, "tests/source/test_stands_alone.py", "tests/tooling/test_docs.py"}


def _files() -> list[str]:
    """The tracked files, and the new ones git does not ignore (so a citation is caught before it is committed)."""
    listed = git_output("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted({name for name in listed.split("\0") if name and (REPO / name).is_file()})


def _ignored(path: str) -> bool:
    return any(rule.search(path) for rule in IGNORED)


def _citations(text: str, markdown: bool) -> list[tuple[int, str, bool]]:
    """(line, cited path without its anchor, whether a markdown link) for every citation in `text`; links are read
    as links in a markdown page only (elsewhere `](x.md)` is a bare path in a string)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if markdown:
            for match in LINK.finditer(line):
                target = match["target"].split("#")[0]
                if target.endswith(".md") and not target.startswith(("http://", "https://")) and not _ignored(target):
                    found.append((number, target, True))
            line = LINK.sub(lambda match: " " * len(match[0]), line)  # a link's target is not a bare path as well
        found += [(number, match["path"], False) for match in BARE.finditer(line) if not _ignored(match["path"])]
    return found


def _resolves(path: str, citing: str, link: bool, files: set[str]) -> bool:
    """Whether `path`, cited in the file `citing`, names one of `files` (repository-relative posix paths)."""
    files = files | set(SERVED)
    folder = PurePosixPath(citing).parent
    if link:
        bases = [folder]
    elif "/" in path:
        bases = [PurePosixPath(), folder, PurePosixPath("docs")]
    else:
        return path in {PurePosixPath(name).name for name in files}
    return any(os.path.normpath(base / path) in files for base in bases)


def test_every_cited_document_exists():
    files = _files()
    listed = set(files)
    missing = []
    for name in files:
        if name in ON_PURPOSE:
            continue
        data = (REPO / name).read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        for number, path, link in _citations(data.decode(errors="replace"), markdown=name.endswith(".md")):
            if not _resolves(path, name, link, listed):
                missing.append(f"{name}:{number}: {path}")
    assert not missing, "cited documents that are not in the repository:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    "line,markdown,cited",
    [
        ("[Methods](../reference/methods.md#method-fedld)", True, [("../reference/methods.md", True)]),
        ("rison](../results/univarfl_comparison.md), FedLD's", True, [("../results/univarfl_comparison.md", True)]),
        ("[CONTRIBUTING.md](CONTRIBUTING.md).", True, [("CONTRIBUTING.md", True), ("CONTRIBUTING.md", False)]),
        ("`dashboards/README.md` in the repository", True, [("dashboards/README.md", False)]),
        (
            "on the benchmark workload (docs/explanation/workload.md#data)",
            False,
            [("docs/explanation/workload.md", False)],
        ),
        (
            "the wide intervals (see docs/explanation/statistics.md).",
            False,
            [("docs/explanation/statistics.md", False)],
        ),
        ("# CI: run the commands README.md's Development gives", False, [("README.md", False)]),
        ('CONTRACT = "docs/how-to/own-method.md#state-across-a-resume"', False, [("docs/how-to/own-method.md", False)]),
        ('"](docs/" not in page and "](how-to/own-method.md)" in page', False, [("how-to/own-method.md", False)]),
    ],
)
def test_the_extractor_finds_a_citation(line: str, markdown: bool, cited: list[tuple[str, bool]]):
    assert [(path, link) for _, path, link in _citations(line, markdown)] == cited


@pytest.mark.parametrize(
    "line",
    [
        'pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}',
        "`<out>/<NAME>.md`: the protocol (the space file's header), the tuned values",
        'page = assets.parent / f"{name}.md"',
        "It then writes `docs/results/NAME.md` (or `--out`):",
        "`reports/<space name>/ablation_table.md` and `.csv`, printed",
        "the report lands in $OUT/report.md, its log in /tmp/run/notes.md",
        "[MkDocs](https://www.mkdocs.org/user-guide/writing-your-docs.md)",
        'files["table.md"].write_text(to_markdown(summary))',
        "The table (ablation/table.md) reports test accuracy",
        "digest = hashlib.md5(usedforsecurity=False); resource.md5",
    ],
)
def test_the_extractor_lets_a_non_citation_through(line: str):
    assert not _citations(line, markdown=True) and not _citations(line, markdown=False), line


@pytest.mark.parametrize(
    "path,citing,link,resolves",
    [
        ("cluster.md", "docs/how-to/jobs.md", True, True),  # a link: from the page's folder
        ("how-to/cluster.md", "docs/how-to/jobs.md", True, False),  # ... and from nowhere else
        ("../contributing.md", "docs/how-to/own-method.md", True, True),  # the page the site serves
        ("docs/how-to/troubleshooting.md", "raytune_fl/devices.py", False, True),  # a bare path: from the root
        ("how-to/jobs.md", "mkdocs.yml", False, True),  # ... or from docs/ (the nav)
        ("CONTRIBUTING.md", "tools/module_map.py", False, True),  # a bare name: anywhere
        ("docs/explanation/no-such-page.md", "raytune_fl/devices.py", False, False),
        ("no-such-page.md", "README.md", False, False),
    ],
)
def test_a_citation_resolves_as_its_reader_would_read_it(path: str, citing: str, link: bool, resolves: bool):
    assert _resolves(path, citing, link, set(_files())) is resolves
