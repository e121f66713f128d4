"""CONTRIBUTING.md's module map (tools/module_map.py): the committed map is the one the module docstrings give, every
module has a docstring, and the generator's layout and first sentences checked by hand on a small tree."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support import REPO
from tools import module_map

# ------------------------------------------------------------------------------------------- the repository


def test_every_module_of_the_package_has_a_docstring():
    assert module_map.undocumented() == [], "give these modules a docstring: its first sentence is their map line"


def test_the_committed_map_is_the_generated_one():
    committed = module_map.committed((REPO / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    assert committed == module_map.generate(), (
        "CONTRIBUTING.md's module map is stale: python -m tools.module_map --write"
    )


def test_the_map_has_a_line_for_every_module_and_folder_of_the_package():
    lines = module_map.generate().splitlines()[1:-1]  # inside the fence
    labels = [line.split()[0] for line in lines if line.strip() and not line.startswith(" " * module_map.NAME_COLUMN)]
    package = REPO / module_map.PACKAGE
    folders = [p for p in package.rglob("*") if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))]
    without_init = [p for p in folders if not (p / "__init__.py").exists()]  # a header line, but no module
    data = [p for p in package.iterdir() if p.is_dir() and p not in folders and p.name != "__pycache__"]
    assert len(labels) == len(module_map.modules()) + len(without_init) + len(data)
    for name in module_map.modules():
        leaf = name.rsplit(".", 1)[-1]
        assert f"{leaf}/" in labels or any(label.endswith(f"{leaf}.py") for label in labels), name


# ------------------------------------------------------------------------------------------- by hand


@pytest.mark.parametrize(
    ("doc", "sentence"),
    [
        (
            "FedAvgM, server momentum (Hsu, Qi & Brown, 2019). Numpy only.",
            "FedAvgM, server momentum (Hsu, Qi & Brown, 2019).",
        ),
        ("FedProx (Li et al. 2020): adds a term. More.", "FedProx (Li et al. 2020): adds a term."),
        ("Defaults, e.g. FedAvg's. The rest.", "Defaults, e.g. FedAvg's."),
        ("A step (one. Two) and `x. Y` too. Next.", "A step (one. Two) and `x. Y` too."),
        ("The one loop.\n\nSecond paragraph.", "The one loop."),
        ("Wrapped over\n  two lines. Then more.", "Wrapped over two lines."),
        ("No full stop at all", "No full stop at all"),
        ("Adaptive (Reddi et al., ICLR 2021, Alg. 2). Numpy only.", "Adaptive (Reddi et al., ICLR 2021, Alg. 2)."),
    ],
)
def test_a_modules_line_is_its_docstrings_first_sentence(doc: str, sentence: str):
    assert module_map.first_sentence(doc) == sentence


def _tree(root: Path, files: dict[str, str | None]) -> None:
    """Files under `root`: a module's docstring (None: a module without one), or any text for a data file."""
    (root / "tests" / "source").mkdir(parents=True)
    (root / "tests" / "source" / "test_layering.py").write_text(
        'RANKS: list[tuple[str, ...]] = [\n    ("raytune_fl", "raytune_fl.engine.names"),\n'
        '    ("raytune_fl.data",),\n    ("raytune_fl.engine",),\n]\n'
    )
    for path, text in files.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text if path.endswith(".yaml") else (f'"""{text}"""\n' if text is not None else "x = 1\n"))


SMALL = {
    "raytune_fl/__init__.py": "The package. More.",
    "raytune_fl/registry.py": "Name -> factory.",
    "raytune_fl/engine/names.py": "The names, declared once.",
    "raytune_fl/engine/run.py": "One run.",
    "raytune_fl/data/__init__.py": "The data.",
    "raytune_fl/data/split.py": "A split.",
    "raytune_fl/data/impl/__init__.py": "The code.",
    "raytune_fl/data/impl/deep.py": "A module deeper down.",
    "raytune_fl/data/zeta.py": "Listed before impl/.",
    "raytune_fl/spaces/papers/a.yaml": "a: 1",
}


def test_the_map_of_a_small_tree_by_hand(tmp_path):
    _tree(tmp_path, SMALL)
    expected = """\
        ```text
        raytune_fl/               The package.
          registry.py             Name -> factory.
          engine/names.py         The names, declared once.

          data/                   The data.
            split.py              A split.
            zeta.py               Listed before impl/.
            impl/                 The code.
              deep.py             A module deeper down.

          engine/
            run.py                One run.

          spaces/                 package data, no modules: papers/*.yaml
        ```
        """
    assert module_map.generate(tmp_path) == textwrap.dedent(expected)


def test_a_new_module_is_picked_up_and_one_without_a_docstring_refused(tmp_path):
    _tree(tmp_path, {**SMALL, "raytune_fl/data/new.py": "A module added later.", "raytune_fl/engine/bare.py": None})
    assert module_map.undocumented(tmp_path) == ["raytune_fl/engine/bare.py"]
    with pytest.raises(ValueError, match="raytune_fl/engine/bare.py"):
        module_map.generate(tmp_path)
    (tmp_path / "raytune_fl" / "engine" / "bare.py").write_text('"""Now documented."""\n')
    text = module_map.generate(tmp_path)
    assert (
        "    new.py                A module added later.\n" in text
        and "    bare.py               Now documented.\n" in text
    )


def test_a_long_line_wraps_under_its_column():
    long = "word " * 40
    lines = module_map._line("  name.py", long.strip())
    assert all(len(line) <= module_map.WIDTH for line in lines) and len(lines) == 3
    assert all(line.startswith(" " * module_map.NAME_COLUMN + "word") for line in lines[1:])


def test_write_replaces_only_the_text_between_the_markers():
    text = f"# Title\n\nbefore\n\n{module_map.START}\n\nold map\n\n{module_map.END}\n\nafter\n"
    updated = module_map.replace_map(text, "```text\nnew\n```\n")
    assert updated == f"# Title\n\nbefore\n\n{module_map.START}\n\n```text\nnew\n```\n\n{module_map.END}\n\nafter\n"
    assert module_map.committed(updated) == "```text\nnew\n```\n"
    with pytest.raises(ValueError, match="markers"):
        module_map.committed("no markers here")
