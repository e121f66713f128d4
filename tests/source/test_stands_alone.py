"""The repository stands alone: no file in it cites a document kept outside it (the team's notes in a `shared`
folder beside the checkout). What the code relies on is written in the repository's own docs instead: the method
specifications in docs/explanation/methods.md, the benchmark workload in docs/explanation/workload.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO, git_output

# A path out of the checkout into the folder beside it, the outside documents by their names (upper case: the
# repository's own pages are lower case, e.g. docs/explanation/methods.md), and the outside GPU notes' folder.
OUTSIDE = re.compile(
    r"\.\./shared/"
    r"|(?<![\w-])(?:DESIGN|METHODS|METHODS-NEXT|WORKLOAD)\.md\b"
    r"|(?<![\w./-])shared/(?:gpu|hooks)/"
)
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()
OWN_PAGES = ("docs/explanation/methods.md", "docs/explanation/workload.md")


def _files() -> list[str]:
    """The tracked files, and the new ones git does not ignore (so a citation is caught before it is committed)."""
    listed = git_output("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted({name for name in listed.split("\0") if name})


def _citations(text: str) -> list[tuple[int, str]]:
    return [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def test_no_file_cites_a_document_outside_the_repository():
    found = []
    for name in _files():
        path = REPO / name
        if name == THIS_FILE or not path.is_file():  # this file names the patterns; a deleted file cites nothing
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        found += [f"{name}:{number}: {line}" for number, line in _citations(data.decode(errors="replace"))]
    assert not found, "cite the repository's own docs instead (" + ", ".join(OWN_PAGES) + "):\n" + "\n".join(found)


def test_the_pages_that_replace_them_exist_and_are_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    for page in OWN_PAGES:
        assert (REPO / page).is_file(), page
        assert page.removeprefix("docs/") in nav, page


@pytest.mark.parametrize(
    "line",
    [
        "Layer list and names follow ../shared/WORKLOAD.md (161,306 parameters)",
        '"""Principal-gradient aggregation of FedLD. Pure numpy; METHODS.md, "Principal gradient".',
        "    # per METHODS.md: lambda_1 / (lambda_1 + lambda_2)",
        "# see DESIGN.md, Layering",
        "the ideas in METHODS-NEXT.md",
        "(WORKLOAD.md): rounds tile the run",
        "the bundle of shared/gpu/README.md",
        "see ../shared/gpu/build_bundle.sh",
    ],
)
def test_the_pattern_sees_an_outside_citation(line: str):
    assert _citations(line), line


@pytest.mark.parametrize(
    "line",
    [
        "docs/explanation/methods.md#principal-gradient steps 1-5",
        "on the benchmark workload (docs/explanation/workload.md#data)",
        "[Methods](../reference/methods.md#method-fedld)",
        "a filesystem shared with the server, shared storage such as NFS",
        "the cached arrays are shared/copied: never edit them in place",
        "docs/how-to/cluster.md: a shared path on a cluster",
        "shared = sq.where(ties, 0.0).sum() / ties.sum()",
    ],
)
def test_the_pattern_lets_the_repositorys_own_references_through(line: str):
    assert not _citations(line), line
