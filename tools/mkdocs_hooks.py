"""MkDocs hooks of the documentation site (mkdocs.yml's `hooks:`): what the site has that docs/ does not hold.

- `contributing.md`: the repository's CONTRIBUTING.md, the single source, served as a page of the site (its links
  into docs/ rewritten to the site's own pages).
- the generated reference: every `<!-- generated: NAME -->` line of a page is replaced by that section of
  tools/docs_reference.py, built from the code while the site is built (nothing generated is committed).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # mkdocs loads this file by its path: the repository's packages by theirs
    sys.path.insert(0, str(REPO))

from tools import docs_reference  # noqa: E402

CONTRIBUTING = REPO / "CONTRIBUTING.md"
CONTRIBUTING_PAGE = "contributing.md"
# CONTRIBUTING.md links to docs pages as the repository holds them: docs/how-to/own-method.md
_DOCS_LINK = re.compile(r"\]\(docs/")


def contributing_page() -> str:
    """CONTRIBUTING.md as the site's page: links into docs/ made relative to the site's root."""
    return _DOCS_LINK.sub("](", CONTRIBUTING.read_text(encoding="utf-8"))


# mkdocs is imported by the hooks only: the rest of this module (and its tests) runs without it


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, CONTRIBUTING_PAGE, content=contributing_page()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return docs_reference.fill(markdown, where=page.file.src_uri)
    except docs_reference.UnknownSection as error:
        raise PluginError(str(error)) from None


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    """`mkdocs serve` rebuilds when CONTRIBUTING.md changes too."""
    server.watch(str(CONTRIBUTING))
    return server
