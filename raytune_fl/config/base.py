"""What every section of a search-space file shares: the error a bad value raises (ConfigError), the strict
model base (a misspelt key, a NaN or a yes/no number is an error that names its field), the seed type, and the
"did you mean" hint."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from raytune_fl.errors import RaytuneFLError


class ConfigError(ValueError, RaytuneFLError):
    """A search-space file or command-line value that cannot be used; the message names the field."""


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """The hint `did you mean 'x'? ` for a misspelt `name` (a dotted name it is the last part of, as `lr` of
    `optimizer.lr`, else the closest of `known` by difflib), else ""."""
    if not isinstance(name, str) or not name:
        return ""
    close = [k for k in known if k.rpartition(".")[2] == name and "." in k]
    close = close or difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


# a name that becomes a folder or file name (the space's: the MLflow experiment, <storage>/<name>.study.json,
# reports/<name>/; a variant's: Tune's experiment folder): no separators, no "..", nothing a shell would quote
def _check_file_name(what: str, name: str) -> None:
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        raise ValueError(f"{what} {name!r} may use letters, digits, '_' and '-' only")


def _numeric(annotation: Any) -> bool:
    """Whether a field's type takes numbers (int, float, `int | None`, `int | Literal["auto"]`, ...), not bool."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    return any(_numeric(arg) for arg in get_args(annotation) if get_origin(annotation) is not Literal)


class _Strict(BaseModel):
    # extra="forbid": a misspelt key is an error that names it, never a silently ignored setting.
    # allow_inf_nan=False: a NaN or infinite rate, weight or timeout would only fail (or silently poison) a trial.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yes_no_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 in a number's field, and YAML 1.1 reads yes/no/on/off as booleans: `rounds: yes`
        # would be one round, `lr: on` a rate of 1.0
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _numeric(field.annotation) and (found := _yes_no_in(value)) is not None:
            within = "" if isinstance(value, bool) else f" in {json.dumps(value, default=str):.60}"  # as YAML says it
            raise ValueError(
                f"{str(found).lower()}{within} is a yes/no value, not a number (YAML reads yes, no, on, off, true and "
                "false so); give a number"
            )
        return value


def _yes_no_in(value: Any) -> bool | None:
    """The first boolean in `value` or in its lists and tuples (a range's ends, [round, client] pairs), else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return next((found for item in value if (found := _yes_no_in(item)) is not None), None)
    return None


# Seeds: numpy's default_rng/SeedSequence refuse negative seeds, and its legacy RandomState (Optuna's TPE
# sampler) anything from 2**32 on.
Seed = Annotated[int, Field(ge=0, lt=2**32)]
