"""A search-space file read: YAML loaded strictly (duplicate keys and YAML 1.1 octals refused), validation errors
formatted to name the field and the line, command-line overrides applied, a config flattened to MLflow params."""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from raytune_fl.config.base import ConfigError, did_you_mean
from raytune_fl.config.space import SearchSpace
from raytune_fl.errors import RaytuneFLError

# a validator message that starts with a field path ("partition.kind: unknown ...") continues the error's location
_FIELD_PREFIX = re.compile(r"([A-Za-z_]\w*(?:\.\w+)*): ")


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class found at `loc` inside a SearchSpace (through dict values and optional sections)."""
    model: Any = SearchSpace
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            model = field.annotation if field else None
        elif get_origin(model) is dict:
            model = get_args(model)[1]
        else:
            return None
        args = [arg for arg in get_args(model) if arg is not type(None)]
        if get_origin(model) is not dict and len(args) == 1:  # `X | None` -> X
            model = args[0]
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrapped(annotation: Any) -> Any:
    """`annotation` without Annotated's metadata and without `| None` (pydantic tags neither in an error's loc)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return _unwrapped(members[0])
    return annotation


def _child(annotation: Any, part: int | str) -> Any:
    """The type found one step into `annotation` (a model's field, a dict's value, a list's item), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        return field.annotation if field else None
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (list, set, frozenset) and args:
        return args[0]
    if origin is tuple and args:
        return args[0] if args[-1] is Ellipsis else args[min(int(part), len(args) - 1)]
    return None


def _tag_names(member: Any) -> tuple[str, ...]:
    """The names pydantic gives a union member in an error's loc (`str`, `list[...]`, `literal[...]`, a model's)."""
    member = _unwrapped(member)
    origin = get_origin(member)
    if origin is not None:
        return ("literal",) if str(origin).endswith("Literal") else (getattr(origin, "__name__", ""),)
    name = getattr(member, "__name__", "")
    return (name, f"constrained-{name}")


def _union_tags(loc: tuple[int | str, ...]) -> list[int]:
    """The positions in `loc` (inside a SearchSpace) that name a union's member rather than a field: pydantic tries
    each member of `str | list[...]` and reports each failure under the member's name."""
    tags: list[int] = []
    annotation: Any = SearchSpace
    for index, part in enumerate(loc):
        annotation = _unwrapped(annotation)
        if get_origin(annotation) in (Union, types.UnionType):
            tag = str(part).split("[")[0]
            member = next((m for m in get_args(annotation) if tag in _tag_names(m)), None)
            tags.append(index)
            annotation = member
        else:
            annotation = _child(annotation, part)
        if annotation is None:
            break
    return tags


# a union member's error that says only that the value is not of that member's type
_MISMATCH = re.compile(r".*_(type|parsing)|literal_error")
_TAG_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false"}


def _tag_word(tag: str, item: Any) -> str:
    """What a union member is, in words: `list[...]` -> a list, `literal['auto']` -> 'auto'."""
    base = tag.split("[")[0].removeprefix("constrained-")
    if base == "literal":
        return str(item.get("ctx", {}).get("expected", tag))
    if base in ("list", "tuple", "set"):
        return "a list"
    return _TAG_WORDS.get(base, "a mapping")


def _readable(items: list[Any]) -> list[Any]:
    """pydantic's errors with each union's members folded into one: the member that got furthest (its own errors),
    or, where every member refused the value's type, one error that lists what the field takes (`expected a
    string or a list`); the members' names left out of every loc."""
    tagged = [(item, _union_tags(item["loc"])) for item in items]
    folded = _fold(tagged)
    return [{**item, "loc": tuple(p for n, p in enumerate(item["loc"]) if n not in tags)} for item, tags in folded]


def _fold(tagged: list[tuple[Any, list[int]]], level: int = 0) -> list[tuple[Any, list[int]]]:
    """`_readable` for the unions at `level` (the first, second, ... union along each error's loc)."""
    groups: dict[tuple[Any, ...], list[tuple[Any, list[int]]]] = {}
    order: list[tuple[Any, list[int]] | tuple[Any, ...]] = []  # an error as it is, or a group's key in its place
    for item, tags in tagged:
        if len(tags) <= level:
            order.append((item, tags))
            continue
        key = (level, *item["loc"][: tags[level]])
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append((item, tags))
    out: list[tuple[Any, list[int]]] = []
    for entry in order:
        if isinstance(entry[0], dict):
            out.append(entry)
            continue
        group = groups[entry]
        at = group[0][1][level]
        score = [(len(i["loc"]), not _MISMATCH.fullmatch(i["type"])) for i, _ in group]
        best, tags = group[score.index(max(score))]
        if len(best["loc"]) == at + 1 and _MISMATCH.fullmatch(best["type"]):  # no member took the value's type
            words = list(dict.fromkeys(_tag_word(str(i["loc"][at]), i) for i, _ in group))
            said = ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]
            folded = {**best, "loc": best["loc"][:at], "msg": f"expected {said}", "type": "union"}
            out.append(({**folded, "choices": re.findall(r"'([^']*)'", said)}, tags[:level]))
            continue
        out += _fold([(i, t) for i, t in group if i["loc"][at] == best["loc"][at]], level + 1)
    return out


def _choice_hint(value: Any, choices: list[str]) -> str:
    """`did you mean 'max'?` for a misspelt choice: the closest by difflib, else the one `value` starts with
    (maximize -> max)."""
    hint = did_you_mean(value, choices)
    if not hint and isinstance(value, str):
        hint = next((f"did you mean {c!r}? " for c in choices if c and value.lower().startswith(c.lower())), "")
    return f"; {hint.rstrip()}" if hint else ""


def format_validation_error(error: ValidationError, source: str) -> str:
    """One line per problem, each starting with the full dotted path of the field, then what is allowed; the first
    problem on the first line, the file (or what was checked) on the last. A union's members are folded into one
    problem (`_readable`)."""
    lines: list[str] = []
    items = _readable(error.errors())
    for item in items:
        parts = [str(part) for part in item["loc"]]
        message = item["msg"].removeprefix("Value error, ")
        while match := _FIELD_PREFIX.match(message):
            parts.append(match[1])
            message = message[match.end() :]
        if item["type"] == "extra_forbidden":
            parent = _model_at(item["loc"][:-1])
            if parent is not None:
                hint = did_you_mean(item["loc"][-1], parent.model_fields)
                message += f"; {hint}known keys: {', '.join(parent.model_fields)}"
        elif item["type"] not in ("missing", "value_error", "model_type", "dict_type"):
            message += f" (got {item['input']!r:.80})"  # pydantic's own messages omit the value
            if item["type"] == "literal_error":  # expected: "'tpe' or 'random'"
                message += _choice_hint(item["input"], re.findall(r"'([^']*)'", str(item["ctx"]["expected"])))
            elif item["type"] == "union":
                message += _choice_hint(item["input"], item["choices"])
        lines.append(f"{'  ' if lines else ''}{'.'.join(parts) or '(top level)'}: {message}")
    count = len(items)
    lines.append(f"  ({'the only problem' if count == 1 else f'{count} problems'} in {source})")
    return "\n".join(lines)


def parse_space(
    data: Any, source: str = "search space", plugins: Sequence[str] = (), folder: Path | None = None
) -> SearchSpace:
    """The validated space; `plugins` (e.g. --plugin's) are added to the file's own; `folder` (the file's) is
    searched for plugin modules after sys.path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with keys name, plugins, base, variants, tune")
    if plugins:
        listed = data.get("plugins") or []
        data = {**data, "plugins": [*listed, *plugins] if isinstance(listed, list) else listed}
    try:
        return SearchSpace.model_validate(data, context={"folder": folder})
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source)) from None


class DuplicateKeyError(ValueError, RaytuneFLError):
    """A YAML mapping gives a key twice: `path` is the key's dotted path, `lines` the (1-based) lines of its first
    and second occurrence."""

    def __init__(self, path: str, lines: tuple[int, int]) -> None:
        super().__init__(f"{path}: given twice (lines {lines[0]} and {lines[1]})")
        self.path, self.lines = path, lines


class OctalNumberError(ValueError, RaytuneFLError):
    """A number written with a leading zero (`rounds: 010`): YAML 1.1 reads it as octal (8), which nobody means."""

    def __init__(self, path: str, line: int, text: str, value: int) -> None:
        decimal = text.lstrip("+-").lstrip("0_") or "0"
        self.detail = (
            f"{text} is read by YAML as the octal number {value}; write {decimal} (the decimal number) or {value}"
        )
        super().__init__(f"{path or 'the value'}: {self.detail}")
        self.path, self.line = path, line


_YAML_INT = "tag:yaml.org,2002:int"
_OCTAL = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1's octal ints (0o17 is YAML 1.2's and explicit; "010" quoted is text)


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml's SafeLoader, except that a mapping that gives a key twice raises DuplicateKeyError: PyYAML keeps the
    last value silently, so a second `rounds:` further down a section would quietly replace the first."""

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_keys(node, "", set())  # the whole tree, with paths, before anything is built from it
        return super().construct_document(node)

    def _check_keys(self, node: yaml.Node, path: str, seen: set[int]) -> None:
        if id(node) in seen:  # an alias of a node already checked (or of one that contains itself)
            return
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode) and node.tag == _YAML_INT and _OCTAL.fullmatch(node.value):
            raise OctalNumberError(path, node.start_mark.line + 1, node.value, self.construct_object(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._check_keys(item, f"{path}[{index}]", seen)
        if not isinstance(node, yaml.MappingNode):
            return
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: the keys given beside it override it
                continue
            scalar = isinstance(key_node, yaml.ScalarNode)  # a list or mapping as a key: rare, and unhashable
            key = self.construct_object(key_node) if scalar else key_node.start_mark
            name = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            if scalar and key in first:
                raise DuplicateKeyError(name, (first[key], line))
            if scalar:
                first[key] = line
            self._check_keys(value_node, name, seen)


def load_yaml(text: str) -> Any:
    """YAML text as Python (yaml.safe_load's), refusing a key given twice in a mapping (DuplicateKeyError)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no Python objects built from tags


def load_space(path: str | Path, plugins: Sequence[str] = ()) -> SearchSpace:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--space: no such file: {path}")
    try:
        data = load_yaml(path.read_text())
    except DuplicateKeyError as error:
        raise ConfigError(
            f"{error.path}: given twice, at {path}:{error.lines[1]} (first at line {error.lines[0]}); YAML would "
            "silently keep the last value, so keep one"
        ) from None
    except OctalNumberError as error:
        raise ConfigError(f"{error} (at {path}:{error.line})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--space {path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--space {path}: expected a mapping with keys name, plugins, base, variants, tune")
    return parse_space(data, str(path), plugins, folder=path.parent)


def override(space: SearchSpace, changes: dict[str, Any], source: str = "command line") -> SearchSpace:
    """A copy of `space` with dotted-path values replaced (e.g. {"base.rounds": 3}), re-validated.

    Only what the file set, and the changes, are set in the copy: a setting whose meaning depends on whether it was
    given (domain_split's alpha: unset = IID inside each domain) keeps that meaning after an unrelated --set."""
    full = space.model_dump(mode="python", exclude_unset=False)  # every section, for the paths' checks
    data = space.model_dump(mode="python", exclude_unset=True)
    for dotted, value in changes.items():
        node, given = full, data
        *parents, leaf = dotted.split(".")
        for depth, part in enumerate(parents):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parents[: depth + 1])
                known = f"; {did_you_mean(part, node)}known: {', '.join(node)}" if isinstance(node, dict) else ""
                raise ConfigError(f"{dotted}: {source}: there is no section {where!r}{known}")
            node = node[part]
            given = given.setdefault(part, {})  # a section the file left to its defaults: set from here
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {source}: {'.'.join(parents)!r} is a value, not a section")
        given[leaf] = value
    return parse_space(data, source)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {"partition.alpha": 0.1, ...}: the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
