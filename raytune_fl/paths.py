"""A leading `~` in a path or a URI the user typed, expanded as the shell would: one rule for the commands'
options, MLFLOW_TRACKING_URI and a dataset's `download_url` (a layer below the CLI, so the data layer can use it)."""

from __future__ import annotations

import os
import re

# `~` at the start of a path inside a URI: sqlite:///~/m.db, file:~/x, file://~/x
_HOME_IN_URI = re.compile(r"(sqlite:///|file://|file:)(~[^/]*)")


def expand_home(text: str) -> str:
    """A path option's value with a leading `~` expanded as the shell would: `~/x`, and inside a URI `sqlite:///~/x.db`
    or `file:~/x`. The shell leaves it as typed when it is quoted or follows `--option=`, and a folder named `~`
    would be made; an argparse `type` of every option that names a path or a store."""
    if text.startswith("~"):
        return os.path.expanduser(text)
    match = _HOME_IN_URI.match(text)
    if match is None or (home := os.path.expanduser(match[2])) == match[2]:
        return text
    return f"{match[1]}{home}{text[match.end() :]}"
