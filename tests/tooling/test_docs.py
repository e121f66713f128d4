"""The documentation site: `mkdocs build --strict` passes (and fails on a broken link), every page is in the nav, and
the generated reference covers every search-space field, command-line option, method hyperparameter and public
name, each with its description."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raytune_fl.config import SearchSpace
from raytune_fl.methods import METHODS
from tests.support import REPO
from tools import docs_reference, mkdocs_hooks

DOCS = REPO / "docs"
CONFIG = REPO / "mkdocs.yml"
# pages the hook makes (tools/mkdocs_hooks.py), in the nav but not in docs/
GENERATED_PAGES = {mkdocs_hooks.CONTRIBUTING_PAGE}
# models reachable from SearchSpace whose fields are described in comments, not yet Field(description=...): the
# reference falls back to the comments there (raytune_fl/data/synthetic.py)
UNDESCRIBED: set[str] = set()


def _needs_mkdocs() -> None:
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict`. Never with -q: mkdocs 1.6 then drops the warnings before strict mode counts them,
    and a broken link passes."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def _copy_of_the_site(tmp_path: Path, extra_page: str, text: str) -> Path:
    """The docs copied to tmp_path with one more page, in the nav, and a config pointing at them and at the hook."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    (docs / extra_page).write_text(text)
    config = yaml.safe_load(CONFIG.read_text())
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(REPO / hook) for hook in config["hooks"]]
    config["nav"].append({"Extra": extra_page})
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _nav_pages(nav: list) -> list[str]:
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


# ------------------------------------------------------------------------------------------------- the build


def test_the_site_builds_strictly(tmp_path):
    _needs_mkdocs()
    result = _build(CONFIG, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "reference" / "search-space" / "index.html").read_text()
    assert "<!-- generated:" not in page and "client_batch_memory_gb" in page  # the marker was filled
    assert (tmp_path / "site" / "contributing" / "index.html").is_file()


def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path):
    _needs_mkdocs()
    text = "# Extra\n\n[A page that is not there](no-such-page.md), [a heading](install.md#no-such-heading).\n"
    config = _copy_of_the_site(tmp_path, "extra.md", text)
    result = _build(config, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    # each link is reported (the page is in the nav, and the site builds without it: the test above)
    assert "extra.md" in output and "no-such-page.md" in output and "no-such-heading" in output, output


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.safe_load(CONFIG.read_text())
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is listed twice"
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert pages - set(nav) == set(), "pages missing from mkdocs.yml's nav"
    assert set(nav) - pages - GENERATED_PAGES == set(), "nav entries with no page"


def test_the_contributing_page_is_the_root_file_with_its_docs_links_made_relative():
    page = mkdocs_hooks.contributing_page()
    assert page.startswith((REPO / "CONTRIBUTING.md").read_text().splitlines()[0])
    assert "](docs/" not in page and "](how-to/own-method.md)" in page


def test_an_unknown_marker_is_an_error():
    with pytest.raises(docs_reference.UnknownSection, match="no-such-section"):
        docs_reference.fill("# Page\n\n<!-- generated: no-such-section -->\n")


def test_every_marker_in_the_pages_names_a_section():
    names = {name for path in DOCS.rglob("*.md") for name in docs_reference.MARKER.findall(path.read_text())}
    assert names == set(docs_reference.SECTIONS), "a section no page shows, or a marker of no section"


# ------------------------------------------------------------------------------------ the generated reference


def _sections(markdown: str) -> dict[str, str]:
    """`### Title {#id}` sections of generated Markdown, by id."""
    found = {}
    for chunk in markdown.split("\n### ")[1:]:
        heading, _, body = chunk.partition("\n")
        found[heading.rsplit("{#", 1)[-1].rstrip("}").strip()] = body
    return found


def test_every_search_space_field_is_in_the_reference_in_its_section():
    models = docs_reference.config_models()
    assert SearchSpace in models and len(models) >= 17
    sections = _sections("\n" + docs_reference.search_space_reference())
    for model in models:
        body = sections[docs_reference.anchor(model)]
        for name, info in model.model_fields.items():  # as a file writes it (WarmStart's `from`)
            assert f"| `{info.alias or name}` |" in body, f"{model.__name__}.{name}"


def test_every_field_reachable_from_the_search_space_has_a_description():
    missing = []
    for model in docs_reference.config_models():
        if model.__name__ in UNDESCRIBED:
            continue
        missing += [f"{model.__name__}.{name}" for name, info in model.model_fields.items() if not info.description]
    assert missing == [], "give these Field(description=...) in raytune_fl/config/"
    described = {
        m.__name__ for m in docs_reference.config_models() if all(i.description for i in m.model_fields.values())
    }
    assert UNDESCRIBED & described == set(), "now described: remove it from UNDESCRIBED"


def test_every_method_hyperparameter_is_in_the_reference_with_its_meaning():
    sections = _sections("\n" + docs_reference.methods_reference())
    names = docs_reference.method_names()
    assert set(names) == {name for name in METHODS.names() if name not in METHODS.user_names()}
    for name in names:
        body = sections[f"method-{name}"]
        for param_name, param in METHODS.get(name).params.items():
            assert param.meaning.strip(), f"{name}.{param_name} has no meaning"
            assert f"| `{param_name}` |" in body and param.meaning.split()[0] in body, f"{name}.{param_name}"


def test_every_command_line_option_is_in_the_reference():
    text = docs_reference.cli_reference()
    for command in docs_reference.commands():
        section = text.split(f"## raytune-fl {command} ")[1].split("\n## ")[0]
        for action in docs_reference.parser_of(command)._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section, f"raytune-fl {command} {option}"


def test_the_datasets_models_and_partitioners_are_in_the_reference():
    from raytune_fl.data import DATASET_OPTIONS, DATASETS, PARTITIONERS
    from raytune_fl.models.registry import MODELS

    datasets = docs_reference.datasets_reference()
    for name in DATASETS.names():
        assert f"| `{name}` |" in datasets
    for name, options in DATASET_OPTIONS.items():
        assert f"{{#options-{name}}}" in datasets and all(
            f"| `{field}` |" in datasets for field in options.model_fields
        )
    assert all(f"| `{name}` |" in docs_reference.models_reference() for name in MODELS.names())
    assert all(f"| `{name}` |" in docs_reference.partitioners_reference() for name in PARTITIONERS.names())


def test_every_public_name_is_in_the_python_api_reference():
    import raytune_fl

    text = docs_reference.python_api_reference()
    exported = [name for name in raytune_fl.__all__ if name != "__version__"]
    assert list(docs_reference.api_exports()) == exported
    for name in exported:
        assert f"| `{name}" in text, name


def test_the_generator_imports_no_torch():
    code = (
        "import sys; from tools import docs_reference as d; [f() for f in d.SECTIONS.values()]; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
