"""The files the package reads at run time are package data, so a wheel holds them (tools/fresh_install.sh runs
`raytune-fl reproduce` from one): the paper and protocol spaces under raytune_fl/spaces/. The repository's
search_spaces/papers/ and protocols/ are links to them, so every documented `--space search_spaces/...` works."""

from __future__ import annotations

import fnmatch

import pytest

from raytune_fl.cli.reproduce import PAPERS
from tests.support import REPO

SPACES = REPO / "raytune_fl" / "spaces"
KINDS = ("papers", "protocols")


def _package_data() -> list[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the fresh-install venv may be older
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return config["tool"]["setuptools"]["package-data"]["raytune_fl"]


def test_every_packaged_space_is_declared_package_data_and_every_paper_table_has_its_file():
    patterns = _package_data()
    files = sorted(p.relative_to(REPO / "raytune_fl").as_posix() for p in SPACES.rglob("*") if p.is_file())
    assert files, "raytune_fl/spaces/ holds no file"
    undeclared = [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in patterns)]
    assert not undeclared, f"not in pyproject.toml's [tool.setuptools.package-data]: {undeclared}"
    for name in PAPERS:
        assert f"spaces/papers/{name}.yaml" in files, f"PAPERS[{name!r}] has no packaged file"


@pytest.mark.parametrize("kind", KINDS)
def test_the_repositorys_paper_and_protocol_folders_link_to_the_packaged_files_one_each(kind):
    packaged = {p.name for p in (SPACES / kind).glob("*.yaml")}
    links = {p.name: p for p in (REPO / "search_spaces" / kind).iterdir()}
    assert set(links) == packaged, f"search_spaces/{kind}/ needs a link per file of raytune_fl/spaces/{kind}/"
    for name, link in links.items():
        # relative, so a clone anywhere resolves it; a copy instead would drift from what the wheel ships
        assert link.is_symlink() and link.readlink().as_posix() == f"../../raytune_fl/spaces/{kind}/{name}", link
        assert link.resolve() == (SPACES / kind / name).resolve()
