"""Search-space validation: good files load; bad values fail with a message naming the field."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
import yaml

from raytune_fl.cli import main
from raytune_fl.config import (
    ConfigError,
    DuplicateKeyError,
    ExperimentConfig,
    clients_per_round,
    load_space,
    load_yaml,
    override,
    parse_space,
    smallest_participation,
)
from tests.support import REPO, changed_space, tiny_space


@pytest.mark.parametrize("path", sorted((REPO / "search_spaces").rglob("*.yaml")), ids=lambda p: p.name)
def test_shipped_search_spaces_load(path):
    space = load_space(path)
    assert space.variants
    assert not any(o.metric.startswith("test_") for o in space.tune.objectives)  # never selected on the test set


def test_defaults_are_the_papers_setting():
    base = ExperimentConfig()
    assert (base.dataset, base.model, base.partition.kind, base.partition.alpha) == (
        "mnist5k",
        "simple_cnn",
        "dirichlet",
        0.1,
    )
    assert base.resources.gpus_per_actor == 0


BAD = [
    ("variants.full.method", "fedmagic", ["variants.full", "unknown method 'fedmagic'", "fedavg", "univarfl"]),
    ("variants.full.search.mu", {"loguniform": [1.0, 0.1]}, ["variants.full.search.mu", "low < high"]),
    ("variants.full.search.mu", {"loguniform": [0.0, 1.0]}, ["variants.full.search.mu", "low > 0"]),
    ("variants.full.search.mu", {"uniform": [0, 1], "choice": [1]}, ["variants.full.search.mu", "exactly one"]),
    ("variants.full.search.gamma", {"uniform": [0, 1]}, ["search.gamma", "no hyperparameter gamma;", "mu"]),
    ("variants.full.fixed", {"mu": 0.1}, ["both fixed and searched"]),
    ("variants", {}, ["variants"]),
    ("base.partition.alpha", 0, ["base.partition.alpha", "greater than 0"]),
    ("base.partition.alpha", -1.0, ["base.partition.alpha"]),
    ("base.partition.clients", 0, ["base.partition.clients"]),
    ("base.partition.kind", "shards9", ["partition.kind", "unknown partitioner", "dirichlet", "iid"]),
    ("base.dataset", "imagenet22k", ["dataset", "unknown dataset", "mnist5k", "digits"]),
    ("base.model", "vit_huge", ["model", "unknown model", "simple_cnn"]),
    ("base.participation", 1.5, ["base.participation", "less than or equal to 1"]),
    ("base.participation", 0, ["base.participation"]),
    ("base.rounds", 0, ["base.rounds"]),
    ("base.batch_size", 1, ["base.batch_size"]),
    ("base.optimizer.lr", -0.1, ["base.optimizer.lr"]),
    ("base.resources.gpus_per_actor", -1, ["base.resources.gpus_per_actor"]),
    ("base.rouns", 5, ["base.rouns", "Extra inputs are not permitted"]),
    ("tune.metric", "test_acc", ["tune.metric", "val_acc"]),
    ("tune.num_samples", 0, ["tune.num_samples"]),
    ("name", "", ["name"]),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD, ids=[f"{p}={v}" for p, v, _ in BAD])
def test_bad_value_names_the_field(path, value, expected):
    with pytest.raises(ConfigError) as caught:
        parse_space(changed_space((path, value)), "space.yaml")
    message = str(caught.value)
    for fragment in expected:
        assert fragment in message, message


def test_negative_hyperparameter_is_rejected_when_the_method_is_built():
    from raytune_fl.methods import build_method

    with pytest.raises(ValueError, match="mu: must be a number >= 0"):
        build_method("fedprox", {"mu": -1.0}, 10)
    with pytest.raises(ValueError, match="sigma"):
        build_method("feduv", {"sigma": 0}, 10)


def test_override_revalidates():
    space = parse_space(tiny_space())
    assert override(space, {"base.rounds": 7}).base.rounds == 7
    with pytest.raises(ConfigError, match="base.rounds"):
        override(space, {"base.rounds": 0})


def _write(tmp_path, data) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("extra_args", "expected"),
    [
        (["--rounds", "0"], "base.rounds"),
        (["--num-samples", "0"], "tune.num_samples"),
        (["--variants", "full,nope"], "--variants: unknown variant(s) nope; the file has: fedavg, full"),
    ],
)
def test_cli_rejects_bad_values_without_traceback(tmp_path, capsys, extra_args, expected):
    code = main(["--space", _write(tmp_path, tiny_space()), "--storage", str(tmp_path / "r"), *extra_args])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert "Traceback" not in err


def test_cli_missing_file_and_bad_yaml(tmp_path, capsys):
    assert main(["--space", str(tmp_path / "missing.yaml")]) == 2
    assert "--space: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    assert main(["--space", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_cli_unwritable_storage(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["--space", _write(tmp_path, tiny_space()), "--storage", str(blocker / "sub")])
    assert code == 2
    assert "--storage: cannot write" in capsys.readouterr().err


def test_an_integer_range_is_searched_as_integers():
    from optuna.distributions import IntDistribution

    from raytune_fl.tune.space import optuna_space

    data = tiny_space()
    data["variants"] = {"buffered": {"method": "fedbuff", "search": {"buffer_size": {"int": [2, 5]}}}}
    space = optuna_space(parse_space(data).variants["buffered"].search)
    assert space == {"buffer_size": IntDistribution(2, 5)}
    data["variants"]["buffered"]["search"]["buffer_size"] = {"int": [2.5, 5]}
    with pytest.raises(ConfigError, match=r"buffer_size\.int"):
        parse_space(data)


@pytest.mark.parametrize(
    ("method", "name", "dist", "expected"),
    [
        ("fedld", "fraction", {"uniform": [0.5, 1.5]}, "fraction: must be a number in (0, 1] (got 1.5)"),
        ("fedavgm", "server_momentum", {"uniform": [0.5, 1.0]}, "server_momentum: must be a number in [0, 1)"),
        ("fedbuff", "buffer_size", {"uniform": [2, 5]}, "a uniform range draws floats; buffer_size must be an integer"),
        ("fedbuff", "buffer_size", {"int": [0, 5]}, "buffer_size: must be an integer >= 1 (got 0)"),
        ("fedld", "fidelity", {"choice": ["paper", "offical"]}, "fidelity: must be one of 'paper', 'official'"),
        ("fedld", "principal", {"uniform": [0, 1]}, "principal must be true or false (search it with choice)"),
        ("univarfl", "include_diagonal", {"choice": [0, 1]}, "include_diagonal: must be true or false (got 0)"),
    ],
)
def test_a_search_range_the_hyperparameter_does_not_allow_is_refused_at_load(method, name, dist, expected):
    data = tiny_space()
    data["variants"] = {"v": {"method": method, "search": {name: dist}}}
    with pytest.raises(ConfigError) as caught:
        parse_space(data)
    message = str(caught.value)
    assert f"variants.v.search.{name}" in message and expected in message, message


def test_text_numbers_in_fixed_and_search_take_the_hyperparameters_declared_type(tmp_path):
    """YAML 1.1 reads 1e-3 as text; base's float fields took it as 0.001, so fixed: and search: values do too (a
    float hyperparameter: the float; an int one: the integer, where the text is one)."""
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: typed\n"
        "base: {optimizer: {lr: 1e-3}}\n"
        "variants:\n"
        "  prox: {method: fedprox, fixed: {mu: 1e-3}}\n"
        "  full: {method: univarfl, search: {mu: {choice: [1e-3, 0.5]}}}\n"
        "  buffered: {method: fedbuff, fixed: {buffer_size: 1e1}}\n"
        "  ranged: {method: fedbuff, search: {buffer_size: {int: [2, 1e1]}}}\n"
    )
    assert yaml.safe_load(path.read_text())["variants"]["prox"]["fixed"]["mu"] == "1e-3"  # text, as YAML 1.1 has it
    space = load_space(path)
    assert space.base.optimizer.lr == 0.001
    assert space.variants["prox"].fixed == {"mu": 0.001} and type(space.variants["prox"].fixed["mu"]) is float
    assert space.variants["full"].search["mu"].choice == [0.001, 0.5]
    assert space.variants["buffered"].fixed == {"buffer_size": 10}
    assert type(space.variants["buffered"].fixed["buffer_size"]) is int
    assert space.variants["ranged"].search["buffer_size"].int == (2, 10)
    assert override(space, {"variants.prox.fixed.mu": "2e-2"}).variants["prox"].fixed == {"mu": 0.02}


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ({"method": "fedprox", "fixed": {"mu": "small"}}, "variants.v.fixed.mu: must be a number >= 0 (got 'small')"),
        ({"method": "fedbuff", "fixed": {"buffer_size": "2.5"}}, "variants.v.fixed.buffer_size: must be an integer"),
        ({"method": "fedbuff", "fixed": {"buffer_size": "1e400"}}, "variants.v.fixed.buffer_size: must be an integer"),
        ({"method": "fedprox", "fixed": {"mu": "nan"}}, "variants.v.fixed.mu: must be a finite number >= 0"),
        ({"method": "fedld", "fixed": {"fidelity": "1"}}, "variants.v.fixed.fidelity: must be one of"),  # text stays
    ],
)
def test_text_that_is_no_such_number_is_still_refused_naming_the_field(variant, expected):
    with pytest.raises(ConfigError) as caught:
        parse_space({"name": "t", "variants": {"v": variant}})
    assert str(caught.value).startswith(expected), caught.value


@pytest.mark.parametrize(
    ("name", "ok"), [("tiny-study_2", True), ("../a/b", False), ("a/b", False), ("..", False), ("a b", False)]
)
def test_the_space_name_is_a_plain_file_name(name, ok):
    data = {"name": name, "variants": {"v": {"method": "fedavg"}}}
    if ok:
        assert parse_space(data).name == name
        return
    with pytest.raises(ConfigError) as caught:
        parse_space(data)
    assert str(caught.value).startswith(f"name: the space's name {name!r} may use letters, digits, '_' and '-' only")


def test_a_validation_error_names_the_first_field_on_its_first_line_and_the_file_last():
    data = {"name": "t", "base": {"rouns": 3}, "variants": {"v": {"method": "fedprx"}}}
    with pytest.raises(ConfigError) as caught:
        parse_space(data, source="s.yaml")
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("base.rouns: Extra inputs are not permitted; did you mean 'rounds'? known keys:")
    assert lines[-1] == "  (2 problems in s.yaml)" and len(lines) == 3
    assert any(
        line.startswith("  variants.v.method: unknown method 'fedprx'; did you mean 'fedprox'?") for line in lines
    )


# ---------------------------------------------------------------- issue 46: every setting at its edges


SPACE_FILES = sorted((REPO / "search_spaces").rglob("*.yaml")) + sorted((REPO / "examples").glob("*/space.yaml"))


@pytest.mark.parametrize("path", SPACE_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_duplicate_key_check_reads_every_shipped_file_as_yaml_does(path):
    text = path.read_text()
    assert load_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "path", "lines"),
    [
        ("a: 1\nb:\n  c: 2\n  d: 3\n  c: 4\n", "b.c", (3, 5)),
        ("a: 1\na: 2\n", "a", (1, 2)),
        ("runs:\n- {seed: 1, seed: 2}\n", "runs[0].seed", (2, 2)),
        ("x: {y: [{z: 1}, {z: 2, z: 3}]}\n", "x.y[1].z", (1, 1)),
        ("1: a\n1.0: b\n", "1.0", (1, 2)),  # equal keys once read: YAML would keep one
        ("on: 1\ntrue: 2\n", "True", (1, 2)),
    ],
)
def test_a_key_given_twice_is_found_with_its_path_and_lines(text, path, lines):
    with pytest.raises(DuplicateKeyError) as caught:
        load_yaml(text)
    assert (caught.value.path, caught.value.lines) == (path, lines)


def test_merge_keys_aliases_and_equal_keys_in_other_mappings_are_no_duplicates():
    merged = "defaults: &d {lr: 0.1, momentum: 0.9}\nrun:\n  <<: *d\n  lr: 0.5\n"
    assert load_yaml(merged)["run"] == {"lr": 0.5, "momentum": 0.9}  # the key beside `<<` overrides the merged one
    assert load_yaml("a: &x {k: 1}\nb: *x\nc: {k: 2}\n") == {"a": {"k": 1}, "b": {"k": 1}, "c": {"k": 2}}
    looped = load_yaml("a: &x [1, *x]\n")["a"]  # a list that contains itself: checked once
    assert looped[1] is looped


def test_a_duplicate_key_in_a_file_names_the_key_the_file_and_the_second_line(tmp_path):
    path = tmp_path / "s.yaml"
    text = yaml.safe_dump(tiny_space()).replace("  rounds: 3\n", "  rounds: 3\n  seed: 1\n  rounds: 30\n")
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_space(path)
    first = str(caught.value).splitlines()[0]
    assert first == (
        f"base.rounds: given twice, at {path}:15 (first at line 13); YAML would silently keep the last value, so "
        "keep one"
    )


@pytest.mark.parametrize(
    ("participation", "clients", "per_round"),
    [(1.0, 10, 10), (0.1, 10, 1), (0.15, 10, 2), (0.25, 10, 2), (0.5, 3, 2), (0.67, 3, 2), (0.34, 3, 1)],
)
def test_clients_per_round_rounds_participation_times_clients(participation, clients, per_round):
    assert clients_per_round(participation, clients) == per_round
    experiment = ExperimentConfig(dataset="digits", participation=participation, partition={"clients": clients})
    assert experiment.clients_per_round() == per_round


@pytest.mark.parametrize("clients", [*range(1, 40), 64, 99, 100, 128, 333, 1000, 1024, 3000, 30000, 99991])
def test_the_smallest_participation_the_error_gives_is_accepted_and_samples_one_client(clients):
    smallest = smallest_participation(clients)
    experiment = ExperimentConfig(dataset="digits", participation=float(smallest), partition={"clients": clients})
    assert experiment.clients_per_round() == 1
    if clients == 1:
        assert smallest == "1"
        return
    # one less in its 4th significant digit is refused, naming the smallest (0.1 -> 0.0999)
    digits = Decimal(smallest)
    below = float(digits - Decimal(1).scaleb(digits.adjusted() - 3))
    expected = f"participation: .* fewer than one; the smallest that samples one client is {re.escape(smallest)}(?!\\d)"
    with pytest.raises(ValueError, match=expected):
        ExperimentConfig(dataset="digits", participation=below, partition={"clients": clients})
    assert len(smallest.replace("0.", "").lstrip("0")) <= 4  # short enough to type


@pytest.mark.parametrize(
    ("section", "field", "value"),
    [
        ("base", "rounds", True),
        ("base", "participation", True),
        ("base.optimizer", "lr", True),
        ("base.partition", "clients", False),
        ("base.resources", "client_batch", True),
        ("base.system", "local_steps", [1, True]),
        ("tune", "num_samples", True),
        ("tune", "seed", False),
    ],
)
def test_a_yes_no_value_in_a_numbers_field_is_refused(section, field, value):
    with pytest.raises(ConfigError) as caught:
        parse_space(changed_space((f"{section}.{field}", value)))
    assert str(caught.value).startswith(f"{section}.{field}: ")
    assert "is a yes/no value, not a number" in str(caught.value).splitlines()[0]


def test_yes_no_values_stay_where_a_field_takes_them():
    space = parse_space(changed_space(("base.drop_last", True), ("base.augment.horizontal_flip", True)))
    assert space.base.drop_last is True and space.base.augment.horizontal_flip is True
    space = parse_space(changed_space(("variants.full.search.mu", {"choice": [0.1, 0.5]})))
    assert space.variants["full"].search["mu"].choice == [0.1, 0.5]


def test_an_override_keeps_unset_settings_unset():
    """domain_split's alpha means "label skew inside each domain" only when given: an unrelated --set (here the
    rounds) once set every field, and turned an IID-inside-domains split into Dirichlet(0.1) label skew."""
    from raytune_fl.config import SearchSpace
    from raytune_fl.engine.data import partition_kwargs

    data = tiny_space()
    data["base"]["partition"] = {"kind": "domain_split", "clients": 3}
    space = SearchSpace.model_validate(data)
    changed = override(space, {"base.rounds": 2, "base.optimizer.schedule.kind": "cosine"})
    assert (changed.base.rounds, changed.base.optimizer.schedule.kind) == (2, "cosine")
    assert partition_kwargs(changed.base.partition) == partition_kwargs(space.base.partition) == {}
    skewed = override(space, {"base.partition.alpha": 0.5})  # given: used
    assert partition_kwargs(skewed.base.partition) == {"alpha": 0.5}


def test_a_grace_period_that_leaves_asha_nothing_to_stop_warns(tmp_path, capsys):
    from raytune_fl.cli.common import resolve_space
    from raytune_fl.cli.tune import build_parser

    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(tiny_space()))  # grace_period 1, rounds 3
    argv = ["--space", str(path), "--storage", str(tmp_path / "r")]
    resolve_space(build_parser().parse_args(argv))
    assert capsys.readouterr().err == ""
    resolve_space(build_parser().parse_args([*argv, "--set", "tune.scheduler.asha.grace_period=3"]))
    assert capsys.readouterr().err.splitlines() == [
        "WARNING: tune.scheduler.asha.grace_period: 3 is not below base.rounds 3: ASHA stops no trial early (every "
        "trial runs every round)"
    ]


# the examples' spaces import their plugins, which would stay registered for the tests after this one; they run
# end to end in tests/system/test_examples.py
@pytest.mark.parametrize("path", sorted((REPO / "search_spaces").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_client_of_a_shipped_space_takes_a_local_step(path):
    """Every setting a shipped space runs in (a paper table's alphas too) passes the data checks: no client without
    a step under its batch settings (two paper tables had one at alpha 0.1 before they were refused)."""
    from raytune_fl.cli.common import check_data
    from raytune_fl.cli.reproduce import PAPERS

    space = load_space(path)
    table = PAPERS.get(path.stem)
    alphas = [float(a) for a in table.alphas.split(",")] if table else [space.base.partition.alpha]
    for alpha in alphas if space.base.partition.kind == "dirichlet" else [None]:
        changed = space if alpha is None else override(space, {"base.partition.alpha": alpha})
        check_data(changed.base)
