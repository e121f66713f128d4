"""The documentation site's generated reference: Markdown built from the code, so it cannot go stale.

Each hand-written page under docs/ may hold markers, a line `<!-- generated: NAME -->`; the site's hook
(tools/mkdocs_hooks.py, named in mkdocs.yml's `hooks:`) replaces each by `SECTIONS[NAME]()` while the site is
built. Nothing generated is committed. The sections:

    search-space   every field of a search-space file (raytune_fl/config/'s models): type, default, constraints,
                   description (pydantic's Field(description=...))
    cli            every option of every command (the commands' argparse parsers), with its help
    methods        every registered method's hyperparameters (their Params: type, default, bounds, meaning)
    datasets       the registered datasets: what each loader reads, its dataset_options model
    models         the registered models, by their modules' docstrings
    partitioners   the registered partitioners (partition.kind)
    python-api     the public API (raytune_fl.__all__), each object's first docstring line
    metrics        every metric name a run reports, group by group, with its meaning (raytune_fl/metrics/'s GROUPS)

`python -m tools.docs_reference [NAME ...]` prints sections, to look at one without building the site. Torch is
never imported: the registries declare their names ahead, and the models are described from their modules' source.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.util
import inspect
import io
import re
import sys
import tokenize
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->[ \t]*$", re.MULTILINE)


# --------------------------------------------------------------------------------------------- Markdown helpers


# "(README, 'Your own code')": the code's pointers into the README of before the site; the site is that text now
_README_POINTER = re.compile(r"\s*\((?:see )?README(?:[,:][^)]*)?\)")


def without_readme_pointers(text: str) -> str:
    return _README_POINTER.sub("", text)


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell: one line; outside code spans, pipes escaped and no `<...>` read as
    HTML. Code spans are kept as written (the tables extension ignores pipes in them, and shows `&lt;` as is)."""
    parts = re.split(r"(`[^`]*`)", without_readme_pointers(" ".join(str(text).split())))
    return "".join(
        part if index % 2 else part.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        for index, part in enumerate(parts)
    )


def code(text: object) -> str:
    """An inline code span, on one line."""
    value = " ".join(str(text).split())
    fence = "``" if "`" in value else "`"
    return f"{fence}{value}{fence}" if fence == "`" else f"{fence} {value} {fence}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def first_line(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    if not doc:
        return ""
    paragraph = inspect.cleandoc(doc).split("\n\n")[0]
    return without_readme_pointers(" ".join(paragraph.split()))


def _source_comments(obj: Any) -> dict[str, str]:
    """A class's `# comments` per field: the comment on the field's own lines, else the comment block right above
    it. The fallback where a field declares no description (models outside raytune_fl/config/)."""
    try:
        source = _dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    found: dict[str, str] = {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        own = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments]
        if not own:
            above = node.lineno - 1
            while above in comments and lines[above - 1].lstrip().startswith("#"):
                own.insert(0, comments[above])
                above -= 1
        if own:
            found[node.target.id] = " ".join(own)
    return found


def _dedent(source: str) -> str:
    lines = source.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines) + "\n"


# ------------------------------------------------------------------------------------- types, defaults, bounds

_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}  # annotated_types' Ge, Gt, Le, Lt: their attribute


def _number(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2**20 and value & (value - 1) == 0:
        return f"2^{value.bit_length() - 1}"
    return repr(value) if isinstance(value, float) else str(value)


def constraints(info: FieldInfo) -> str:
    """A field's bounds as `>= 0, < 1`; lengths as `at least N items` (strings: characters)."""
    parts = []
    for item in info.metadata:
        for attribute, sign in _BOUNDS.items():
            if isinstance(item, annotated_types.BaseMetadata) and hasattr(item, attribute):
                parts.append(f"{sign} {_number(getattr(item, attribute))}")
        if isinstance(item, annotated_types.MinLen):
            noun = "character" if info.annotation is str else "entry"
            parts.append(f"at least {item.min_length} {noun}{'' if item.min_length == 1 else 's'}")
        if isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} entries")
    return ", ".join(parts)


def type_name(annotation: Any, link: Callable[[type[BaseModel]], str] | None = None) -> str:
    """An annotation as a reader of YAML sees it: `int`, `float or null`, `one of: a, b`, `[int, int]`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return link(annotation) if link else annotation.__name__
    if origin is Annotated:
        return type_name(args[0], link)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        named = [type_name(a, link) for a in args if a is not type(None)]
        text = " or ".join(named)
        return text + " or null" if type(None) in args else text
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"[{type_name(args[0], link)}, ...]"
        return "[" + ", ".join(type_name(a, link) for a in args) + "]"
    if origin is list:
        return f"list of {type_name(args[0], link)}" if args else "list"
    if origin is dict:
        if not args or args[1] is Any:
            return "mapping"
        return f"mapping of name to {type_name(args[1], link)}"
    if isinstance(annotation, type):
        return {"str": "string", "bool": "boolean"}.get(annotation.__name__, annotation.__name__)
    return str(annotation).replace("typing.", "")


def default_text(info: FieldInfo) -> str:
    """A field's default as written in YAML; a section's default as `(section)`; `required` where there is none."""
    if info.default_factory is not None:
        made = info.default_factory()  # type: ignore[call-arg]
        return "(section)" if isinstance(made, BaseModel) else code(_yaml(made))
    if info.default is PydanticUndefined:
        return "**required**"
    if isinstance(info.default, BaseModel):
        return "(section)"
    if info.default is None:
        return "unset"
    return code(_yaml(info.default))


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e5 else repr(value)
    return str(value)


# --------------------------------------------------------------------------------------------- search space


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in get_args(annotation):
        yield from _models_in(arg)


def _path_step(annotation: Any, name: str) -> str:
    """The YAML path step of a field whose value (or a mapping's values) is a section."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _path_step(inner[0], name) if len(inner) == 1 else name
    if origin is dict:
        return f"{name}.<{'param' if name == 'search' else 'name'}>"
    return name


def config_models() -> dict[type[BaseModel], list[str]]:
    """Every model reachable from SearchSpace, in the order a file reads them, with the YAML paths it sits at."""
    from raytune_fl.config import SearchSpace

    found: dict[type[BaseModel], list[str]] = {}

    def walk(model: type[BaseModel], path: str) -> None:  # the models nest without cycles
        found.setdefault(model, []).append(path or "(the file)")
        for name, info in model.model_fields.items():
            for inner in _models_in(info.annotation):
                step = _path_step(info.annotation, name)
                walk(inner, f"{path}.{step}" if path else step)

    walk(SearchSpace, "")
    return found


def model_fields_table(model: type[BaseModel], link: Callable[[type[BaseModel]], str] | None = None) -> str:
    """A model's fields: name, type, default, constraints, description (a source comment where it has none)."""
    comments = _source_comments(model)
    rows = []
    for name, info in model.model_fields.items():
        text = info.description or comments.get(name, "")
        rows.append(
            [
                f"`{info.alias or name}`",  # as a file writes it: `from` is a Python keyword, its field `source`
                cell(type_name(info.annotation, link)),
                default_text(info),
                cell(constraints(info)),
                cell(text),
            ]
        )
    return table(["field", "type", "default", "constraints", "description"], rows)


def anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def search_space_reference() -> str:
    """Every section of a search-space file, in reading order: where it sits, what each of its fields takes."""
    models = config_models()

    def link(model: type[BaseModel]) -> str:
        return f"[{model.__name__}](#{anchor(model)})" if model in models else model.__name__

    parts = []
    for model, paths in models.items():
        where = ", ".join(f"`{p}`" for p in paths)
        parts.append(f"### {model.__name__} {{#{anchor(model)}}}\n")
        parts.append(f"At {where}.")
        doc = model.__doc__ if "__doc__" in vars(model) else None
        if first_line(doc):
            parts[-1] += " " + first_line(doc)
        parts.append("")
        parts.append(model_fields_table(model, link))
        parts.append("")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- command lines

_COMMANDS = {  # the console script's commands (raytune_fl/cli/console.py), where that module is absent
    "tune": "raytune_fl.cli.tune",
    "ablate": "raytune_fl.cli.ablate",
    "dashboard": "raytune_fl.cli.dashboard",
    "reproduce": "raytune_fl.cli.reproduce",
}
SCRIPTS = {
    "tune": "python scripts/tune.py",
    "ablate": "python scripts/ablate.py",
    "dashboard": "python dashboards/build.py",
    "reproduce": "python scripts/reproduce.py",
}


def commands() -> dict[str, str]:
    """command -> the module whose build_parser() builds its parser."""
    try:
        from raytune_fl.cli.console import COMMANDS
    except ImportError:
        return dict(_COMMANDS)
    return {name: module for name, (module, _summary) in COMMANDS.items()}


def parser_of(command: str) -> argparse.ArgumentParser:
    parser = importlib.import_module(commands()[command]).build_parser()
    parser.prog = f"raytune-fl {command}"
    # a fixed width: the usage lines must not depend on the terminal (COLUMNS) that builds the site
    parser.formatter_class = functools.partial(argparse.HelpFormatter, width=100)
    return parser


def options_table(parser: argparse.ArgumentParser) -> str:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = ", ".join(action.option_strings) or action.dest
        if action.option_strings and action.nargs != 0:
            metavar = action.metavar or (action.dest.upper() if not action.choices else None)
            name += f" {metavar}" if metavar else " {" + ",".join(map(str, action.choices)) + "}"
        elif not action.option_strings and action.choices:
            name = "{" + ",".join(map(str, action.choices)) + "}"
        help_text = formatter._expand_help(action) if action.help else ""
        notes = []
        if action.required or not action.option_strings:
            notes.append("required")
        if isinstance(action, argparse._AppendAction):
            notes.append("repeatable")
        default = action.default
        shown = default not in (None, False, [], argparse.SUPPRESS) and "default" not in (action.help or "")
        rows.append(
            [
                code(name),
                cell(help_text + (f" (default: {default})" if shown else "")),
                ", ".join(notes),
            ]
        )
    return table(["option", "what it does", ""], rows)


def cli_reference() -> str:
    parts = []
    for command in commands():
        parser = parser_of(command)
        parts.append(f"## raytune-fl {command} {{#{command}}}\n")
        same = SCRIPTS.get(command)
        if same:
            parts.append(f"The same as `{same}`. {cell(parser.description or '')}\n")
        else:
            parts.append(f"{cell(parser.description or '')}\n")
        usage = parser.format_usage().strip()
        parts.append("```text\n" + usage + "\n```\n")
        parts.append(options_table(parser))
        parts.append("")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------ methods, data, models


def method_names() -> list[str]:
    """The built-in methods, in the registry's order (plugins' methods are not the package's reference)."""
    from raytune_fl.methods.registry import NAMES

    return list(NAMES)


def _allowed(param: Any) -> str:
    return param.allowed().removeprefix("a number ").removeprefix("an integer ")


def methods_reference() -> str:
    """Every built-in method: its summary, then each hyperparameter with type, default, allowed values, meaning."""
    from raytune_fl.methods import METHODS

    specs = [METHODS.get(name) for name in method_names()]
    overview = [
        [
            f"[`{spec.name}`](#method-{spec.name})",
            ", ".join(f"`{p}`" for p in spec.params) or "—",
            cell(spec.summary),
        ]
        for spec in specs
    ]
    parts = [table(["method", "hyperparameters", "what it does"], overview), ""]
    for spec in specs:
        parts.append(f"### {spec.name} {{#method-{spec.name}}}\n")
        parts.append(cell(spec.summary) + "\n")
        if spec.params:
            rows = []
            for name, param in spec.params.items():
                default = param.default
                default_cell = f"derived: {cell(spec.derived[name])}" if default is None else code(_yaml(default))
                rows.append(
                    [
                        f"`{name}`",
                        {"str": "string", "bool": "boolean"}.get(param.type.__name__, param.type.__name__),
                        default_cell,
                        cell(param.allowed()),
                        cell(param.meaning),
                    ]
                )
            parts.append(table(["hyperparameter", "type", "default", "allowed", "meaning"], rows))
        else:
            parts.append("No hyperparameters.")
        notes = []
        if spec.as_fedavg is None:
            notes.append("No setting reduces it to FedAvg (`as_fedavg` is None).")
        elif spec.as_fedavg:
            setting = ", ".join(f"`{k}: {_yaml(v)}`" for k, v in spec.as_fedavg.items())
            notes.append(f"Reduces to FedAvg's round (`as_fedavg`) at {setting}.")
        elif spec.name != "fedavg":
            notes.append("One round from a fresh state is FedAvg's at its defaults (`as_fedavg`).")
        if spec.sequential:
            notes.append(
                f"With `resources.client_batch` above 1 it trains one client at a time: {cell(spec.sequential)}."
            )
        if spec.asynchronous:
            notes.append("Asynchronous: no round deadline (`base.system.deadline` is refused).")
        if notes:
            parts.append("\n" + " ".join(notes))
        parts.append("")
    return "\n".join(parts)


def _module_doc(module: str) -> str:
    """A module's docstring, read from its source (nothing imported: the models' modules import torch)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return ""
    return ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""


def loader_summary(loader: Any, name: str) -> str:
    """What a dataset loader reads: its docstring's first line; for a loader made by `functools.partial` (the
    file-backed vision datasets) the folder and files its module declares for that name."""
    if isinstance(loader, functools.partial):
        sources = getattr(sys.modules.get(loader.func.__module__), "_SOURCES", {})  # name -> (folder, layout, reader)
        if name in sources:
            folder, layout = sources[name][:2]
            return f"files in `<root>/{folder}/`: {layout}"
        loader = loader.func
    return first_line(loader.__doc__)


def datasets_reference() -> str:
    """The registered datasets: what each loader reads (its docstring), and the model of its `dataset_options`."""
    from raytune_fl.data import DATASET_OPTIONS, DATASETS

    rows = []
    for name in DATASETS.names():
        options = DATASET_OPTIONS.get(name)
        settings = f"[`dataset_options`](#options-{name})" if options else ""
        if name == "synthetic":
            settings = "the [`synthetic`](search-space.md#syntheticconfig) section"
        rows.append([f"`{name}`", cell(loader_summary(DATASETS.get(name), name)), settings])
    parts = [table(["dataset", "what it loads", "settings"], rows), ""]
    for name, options in DATASET_OPTIONS.items():
        parts.append(f"#### `dataset_options` of `{name}` {{#options-{name}}}\n")
        parts.append(model_fields_table(options))
        parts.append("")
    return "\n".join(parts)


def models_reference() -> str:
    """The registered models, described by their modules' docstrings (read from source: they import torch)."""
    from raytune_fl.models.registry import MODELS

    homes: dict[str, str] = dict(getattr(MODELS, "_homes", {}))  # name -> module, declared without torch
    rows = [[f"`{name}`", f"`{homes[name]}`", cell(first_line(_module_doc(homes[name])))]
            for name in MODELS.names() if name in homes]  # fmt: skip
    return table(["model", "module", "what it is"], rows)


def partitioners_reference() -> str:
    """The registered partitioners (`partition.kind`), by their docstrings."""
    from raytune_fl.data import PARTITIONERS

    rows = [[f"`{name}`", cell(first_line(PARTITIONERS.get(name).__doc__))] for name in PARTITIONERS.names()]
    return table(["`kind`", "clients get"], rows)


def flwr_partitioners_reference() -> str:
    """Flower Datasets' horizontal partitioners (`kind: flwr`) and the options each takes, read off its class."""
    import inspect

    from raytune_fl.data.flwr import horizontal_partitioners

    def options(cls: type) -> str:
        params = inspect.signature(cls.__init__).parameters
        shown = [
            f"`{name}`" if p.default is inspect.Parameter.empty else f"`{name}={p.default!r}`"
            for name, p in params.items()
            if name not in ("self", "num_partitions", "seed")
        ]
        return ", ".join(shown) or "—"

    found = horizontal_partitioners()
    rows = [[f"`{name}`", "data" if "num_partitions" not in inspect.signature(cls.__init__).parameters
             else "`clients`", cell(options(cls))] for name, cls in sorted(found.items())]  # fmt: skip
    return table(
        ["`partitioner`", "clients from", "`options` (required without a default; partition_by defaults to label)"],
        rows,
    )


# -------------------------------------------------------------------------------------------------- public API

API_GROUPS = {  # module -> the heading its exports are listed under
    "raytune_fl.register": "Registering your datasets, models and methods",
    "raytune_fl.methods.base": "A method's building blocks",
    "raytune_fl.aggregators.fedavg": "Server rules' pure functions",
    "raytune_fl.types": "Records",
    "raytune_fl.data.datasets": "What a dataset loader may return",
    "raytune_fl.errors": "Errors",
}


def api_summary(name: str, obj: Any, module: str) -> str:
    """An export's first docstring line; a dataclass's generated signature or an alias's missing one falls back to
    the comment above its definition."""
    doc = inspect.getdoc(obj) if inspect.isclass(obj) or inspect.isroutine(obj) else None
    if doc and not doc.startswith(f"{name}("):
        return first_line(doc)
    source = _module_source(module)
    comment = _comment_above(source, name) if source else ""
    return comment


def _module_source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""


def _comment_above(source: str, name: str) -> str:
    lines = source.splitlines()
    pattern = re.compile(rf"^(class|def)\s+{re.escape(name)}\b|^{re.escape(name)}\s*(:|=)")
    for index, line in enumerate(lines):
        if pattern.match(line):
            above = []
            j = index - 1
            while j >= 0 and (lines[j].startswith("#") or lines[j].startswith("@")):
                if lines[j].startswith("#"):
                    above.insert(0, lines[j].lstrip("#").strip())
                j -= 1
            return " ".join(above)
    return ""


def _signature(obj: Any) -> str:
    if not inspect.isroutine(obj):
        return ""
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    # postponed annotations are strings: shown without their quotes
    return re.sub(r"(: |-> )'([^']*)'", r"\1\2", text)


def api_exports() -> dict[str, str]:
    """name -> module, as raytune_fl/__init__.py exports them (its `_EXPORTS`, in `__all__`'s order)."""
    import raytune_fl

    exports: dict[str, str] = raytune_fl._EXPORTS
    return {name: exports[name] for name in raytune_fl.__all__ if name in exports}


def python_api_reference() -> str:
    """`from raytune_fl import ...`: every export by group, its signature (functions) and first docstring line."""
    import raytune_fl

    groups: dict[str, list[list[str]]] = {}
    for name, module in api_exports().items():
        obj = getattr(raytune_fl, name)
        kind = "class" if inspect.isclass(obj) else "function" if inspect.isroutine(obj) else "type"
        shown = f"{name}{_signature(obj)}"
        groups.setdefault(module, []).append([code(shown), kind, cell(api_summary(name, obj, module))])
    parts = []
    for module, rows in groups.items():
        parts.append(f"### {API_GROUPS.get(module, module)}\n")
        parts.append(f"Defined in `{module}`.\n")
        parts.append(table(["name", "kind", "what it is"], rows))
        parts.append("")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------------- metrics

# a name that ends so is a prefix: the meaning says what follows it (term_<name>, system/<name>)
_PREFIX_ENDS = ("_", "/")


def metric_label(name: str) -> str:
    return code(f"{name}*" if name.endswith(_PREFIX_ENDS) else name)


def metrics_reference() -> str:
    """Every declared metric name, by group, with its meaning: first what a round reports (raytune_fl.metrics.round),
    then what the readers derive from the rounds (raytune_fl.metrics.study)."""
    from raytune_fl.metrics import round as round_names
    from raytune_fl.metrics import study as study_names

    parts = []
    for title, groups in (
        ("What a round reports", round_names.GROUPS),
        ("What the readers derive", study_names.GROUPS),
    ):
        parts.append(f"## {title}\n")
        for group, meanings in groups.items():
            parts.append(f"### {cell(group[:1].upper() + group[1:])}\n")
            rows = [[metric_label(name), cell(meaning)] for name, meaning in meanings.items()]
            parts.append(table(["metric", "meaning"], rows))
            parts.append("")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------- the markers

SECTIONS: dict[str, Callable[[], str]] = {
    "search-space": search_space_reference,
    "cli": cli_reference,
    "methods": methods_reference,
    "datasets": datasets_reference,
    "models": models_reference,
    "partitioners": partitioners_reference,
    "flwr-partitioners": flwr_partitioners_reference,
    "python-api": python_api_reference,
    "metrics": metrics_reference,
}


class UnknownSection(ValueError):
    """A marker that names no section."""


def fill(markdown: str, where: str = "page") -> str:
    """`markdown` with every marker replaced by its generated section."""

    def replace(match: re.Match[str]) -> str:
        name = match[1]
        if name not in SECTIONS:
            raise UnknownSection(f"{where}: unknown generated section {name!r}; known: {', '.join(SECTIONS)}")
        return SECTIONS[name]().rstrip() + "\n"

    return MARKER.sub(replace, markdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docs_reference", description=__doc__.split("\n")[0])
    parser.add_argument("sections", nargs="*", metavar="NAME", help=f"{', '.join(SECTIONS)} (default: all)")
    args = parser.parse_args(argv)
    if unknown := [name for name in args.sections if name not in SECTIONS]:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    for name in args.sections or SECTIONS:
        print(f"<!-- {name} -->\n{SECTIONS[name]()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
