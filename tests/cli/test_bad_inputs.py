"""Issue #5: every bad search-space field and command-line value is refused before Ray starts.

Each case runs `tune.py` end to end (`raytune_fl.cli.main`) and expects exit code 2, a message that names
the field and the allowed values, no traceback, and no Ray cluster. (The MLflow and Optuna stores are checked
once the data is, beside the private cluster's start: a case refused there ends that cluster, which
tests/runtime/test_local_cluster.py shows on a real one; here its start is refused too.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import yaml

from raytune_fl.cli import main
from raytune_fl.runtime import cluster
from tests.support import DELETE, changed_space, tiny_space


@dataclass(frozen=True)
class Case:
    id: str
    expected: list[str]  # fragments stderr must contain; "{tmp}" stands for tmp_path
    space: dict | str | bytes = field(default_factory=tiny_space)  # a dict is dumped as YAML, else written as is
    args: list[str] = field(default_factory=list)  # after --space/--storage/--mlflow-uri, so they override them


UNIVARFL_SEARCH = {"mu": {"loguniform": [0.01, 1.0]}}

CASES = [
    # ---------------------------------------------------------------- names
    Case(
        "unknown-method",
        ["variants.full.method", "unknown method 'fedmagic'", "known:", "fedavg", "fedprox", "univarfl"],
        changed_space(("variants.full.method", "fedmagic")),
    ),
    Case(
        "empty-method",
        ["variants.full.method", "unknown method ''", "known:", "univarfl"],
        changed_space(("variants.full.method", "")),
    ),
    Case("missing-method", ["variants.fedavg.method", "Field required"], changed_space(("variants.fedavg", {}))),
    Case(
        "unknown-dataset",
        ["base.dataset", "unknown dataset 'imagenet22k'", "known:", "digits", "mnist5k", "cifar10"],
        changed_space(("base.dataset", "imagenet22k")),
    ),
    Case(
        "unknown-model",
        ["base.model", "unknown model 'vit_huge'", "known:", "simple_cnn", "resnet18"],
        changed_space(("base.model", "vit_huge")),
    ),
    Case(
        "unknown-partition-kind",
        ["base.partition.kind", "unknown partitioner 'shards9'", "known:", "dirichlet", "iid", "shards"],
        changed_space(("base.partition.kind", "shards9")),
    ),
    # ---------------------------------------------------------------- partition and data
    Case("alpha-zero", ["base.partition.alpha", "greater than 0"], changed_space(("base.partition.alpha", 0))),
    Case("alpha-negative", ["base.partition.alpha", "greater than 0"], changed_space(("base.partition.alpha", -0.5))),
    Case(
        "alpha-infinite",
        ["base.partition.alpha", "finite number"],
        changed_space(("base.partition.alpha", float("inf"))),
    ),
    Case(
        "clients-zero",
        ["base.partition.clients", "greater than or equal to 1"],
        changed_space(("base.partition.clients", 0)),
    ),
    Case(
        "more-clients-than-samples",
        ["base.partition.clients", "5000", "'digits'", "at most"],
        changed_space(("base.partition.clients", 5000)),
    ),
    Case(
        "min-size-too-large",
        ["base.partition.min_size", "1000", "'digits'", "at most"],
        changed_space(("base.partition.min_size", 1000)),
    ),
    Case(
        "val-fraction-one",
        ["base.partition.val_fraction", "less than 1"],
        changed_space(("base.partition.val_fraction", 1.0)),
    ),
    Case(
        "partition-seed-negative",
        ["base.partition.seed", "greater than or equal to 0"],
        changed_space(("base.partition.seed", -3)),
    ),
    Case(
        "dataset-root-missing",
        ["base.root", "cifar10", "{tmp}/no-such-folder", "cifar-10-batches-py"],
        changed_space(("base.dataset", "cifar10"), ("base.root", "{tmp}/no-such-folder")),
    ),
    Case(
        "dataset-root-unset", ["base.root", "cifar10", "no root was given"], changed_space(("base.dataset", "cifar10"))
    ),
    Case(
        "domain-partition-without-domains",
        ["base.partition", "'domain' needs a dataset with domains", "iid, dirichlet"],
        changed_space(("base.partition.kind", "domain")),
    ),
    # ---------------------------------------------------------------- experiment
    Case("participation-zero", ["base.participation", "greater than 0"], changed_space(("base.participation", 0))),
    Case(
        "participation-above-one",
        ["base.participation", "less than or equal to 1"],
        changed_space(("base.participation", 1.5)),
    ),
    Case("rounds-not-a-number", ["base.rounds", "valid integer"], changed_space(("base.rounds", "abc"))),
    Case("batch-size-one", ["base.batch_size", "greater than or equal to 2"], changed_space(("base.batch_size", 1))),
    Case("lr-nan", ["base.optimizer.lr", "finite number"], changed_space(("base.optimizer.lr", float("nan")))),
    Case("momentum-one", ["base.optimizer.momentum", "less than 1"], changed_space(("base.optimizer.momentum", 1.0))),
    Case("seed-negative", ["base.seed", "greater than or equal to 0"], changed_space(("base.seed", -1))),
    Case(
        "checkpoint-every-negative",
        ["base.checkpoint_every", "greater than or equal to 0"],
        changed_space(("base.checkpoint_every", -1)),
    ),
    Case(
        "gpus-per-actor-negative",
        ["base.resources.gpus_per_actor", "greater than or equal to 0"],
        changed_space(("base.resources.gpus_per_actor", -1)),
    ),
    Case(
        "gpus-per-actor-below-ray-unit",
        ["base.resources.gpus_per_actor", "at least 0.0001"],
        changed_space(("base.resources.gpus_per_actor", 0.00001)),
    ),
    Case(
        "diagnostics-every-negative",
        ["base.diagnostics.every", "greater than or equal to 0"],
        changed_space(("base.diagnostics.every", -1)),
    ),
    Case("dropout-one", ["base.system.dropout", "less than 1"], changed_space(("base.system.dropout", 1.0))),
    Case(
        "local-steps-reversed",
        ["base.system.local_steps", "1 <= low <= high", "[5, 2]"],
        changed_space(("base.system.local_steps", [5, 2])),
    ),
    Case("deadline-zero", ["base.system.deadline", "greater than 0"], changed_space(("base.system.deadline", 0))),
    Case(
        "retries-negative",
        ["base.faults.retries", "greater than or equal to 0"],
        changed_space(("base.faults.retries", -1)),
    ),
    Case(
        "inject-kill-after-last-round",
        ["base.faults.inject_kills", "round 9", "1..3"],
        changed_space(("base.faults.inject_kills", [[9, 0]])),
    ),
    Case(
        "inject-kill-unknown-client",
        ["base.faults.inject_kills", "client 3", "0..2"],
        changed_space(("base.faults.inject_kills", [[1, 3]])),
    ),
    # ---------------------------------------------------------------- variants and search ranges
    Case("no-variants", ["variants", "at least 1 item"], changed_space(("variants", {}))),
    Case(
        "variant-name-with-space",
        ["variants", "'my variant'", "letters, digits, '_' and '-'"],
        changed_space(("variants.my variant", {"method": "fedavg"})),
    ),
    Case(
        "variant-not-a-mapping", ["variants.fedavg", "valid dictionary"], changed_space(("variants.fedavg", "fedavg"))
    ),
    Case(
        "negative-lambda-fixed",
        ["variants.full.fixed.lambda", "must be a number >= 0", "-1"],
        changed_space(("variants.full", {"method": "univarfl", "fixed": {"lambda": -1.0}, "search": UNIVARFL_SEARCH})),
    ),
    Case(
        "negative-mu-fixed",
        ["variants.prox.fixed.mu", "must be a number >= 0"],
        changed_space(("variants.prox", {"method": "fedprox", "fixed": {"mu": -0.5}})),
    ),
    Case(
        "unknown-hyperparameter",
        ["variants.full.search.gamma", "no hyperparameter gamma;", "its hyperparameters:", "mu", "lambda"],
        changed_space(("variants.full.search.gamma", {"uniform": [0, 1]})),
    ),
    Case(
        "fixed-and-searched",
        ["variants.full.search.mu", "both fixed and searched"],
        changed_space(("variants.full.fixed", {"mu": 0.1})),
    ),
    Case(
        "range-low-above-high",
        ["variants.full.search.mu", "low < high", "[1.0, 0.1]"],
        changed_space(("variants.full.search.mu", {"loguniform": [1.0, 0.1]})),
    ),
    Case(
        "range-low-equals-high",
        ["variants.full.search.lambda", "low < high"],
        changed_space(("variants.full.search.lambda", {"uniform": [1.0, 1.0]})),
    ),
    Case(
        "loguniform-low-zero",
        ["variants.full.search.mu", "low > 0"],
        changed_space(("variants.full.search.mu", {"loguniform": [0.0, 1.0]})),
    ),
    Case(
        "two-distribution-kinds",
        ["variants.full.search.mu", "exactly one of loguniform, uniform, int, choice"],
        changed_space(("variants.full.search.mu", {"uniform": [0, 1], "choice": [0.5]})),
    ),
    Case(
        "empty-choice",
        ["variants.full.search.mu", "at least one value"],
        changed_space(("variants.full.search.mu", {"choice": []})),
    ),
    Case(
        "search-range-outside-allowed",
        ["variants.full.search.lambda", "must be a number >= 0", "-1"],
        changed_space(("variants.full.search.lambda", {"uniform": [-1.0, 1.0]})),
    ),
    Case(
        "search-choice-outside-allowed",
        ["variants.full.search.mu", "must be a number >= 0", "-2"],
        changed_space(("variants.full.search.mu", {"choice": [0.5, -2]})),
    ),
    Case(
        "fixed-nan",
        ["variants.full.fixed.lambda", "finite number", "nan"],
        changed_space(
            ("variants.full", {"method": "univarfl", "fixed": {"lambda": float("nan")}, "search": UNIVARFL_SEARCH})
        ),
    ),
    Case(
        "search-choice-infinite",
        ["variants.full.search.mu", "choice value inf", "finite number"],
        changed_space(("variants.full.search.mu", {"choice": [0.5, float("inf")]})),
    ),
    # ---------------------------------------------------------------- file structure and tune settings
    Case(
        "unknown-top-level-key",
        ["tuning", "Extra inputs are not permitted", "known keys:", "variants"],
        changed_space(("tuning", {"num_samples": 2})),
    ),
    Case(
        "misspelt-base-key",
        ["base.rouns", "Extra inputs are not permitted", "known keys:", "rounds"],
        changed_space(("base.rouns", 5)),
    ),
    Case("empty-name", ["name", "at least 1 character"], changed_space(("name", ""))),
    Case("missing-name", ["name", "Field required"], changed_space(("name", DELETE))),
    Case("tune-on-test", ["tune.metric", "'val_acc' or 'val_loss'"], changed_space(("tune.metric", "test_acc"))),
    Case(
        "num-samples-zero-in-file",
        ["tune.num_samples", "greater than or equal to 1"],
        changed_space(("tune.num_samples", 0)),
    ),
    Case("tune-seed-negative", ["tune.seed", "greater than or equal to 0"], changed_space(("tune.seed", -1))),
    Case(
        "asha-reduction-one",
        ["tune.scheduler.asha.reduction_factor", "greater than 1"],
        changed_space(("tune.scheduler.asha.reduction_factor", 1)),
    ),
    Case("yaml-syntax-error", ["space.yaml", "not valid YAML"], "name: [unclosed\n"),
    Case("yaml-list", ["space.yaml", "expected a mapping", "name, plugins, base, variants, tune"], "- name\n- base\n"),
    Case("yaml-empty", ["space.yaml", "expected a mapping"], ""),
    Case("not-utf8", ["--space", "cannot read", "space.yaml", "utf-8"], b"name: \xff\xfe tiny\n"),
    # ---------------------------------------------------------------- command line
    Case("space-is-a-folder", ["--space", "no such file", "{tmp}"], args=["--space", "{tmp}"]),
    Case("space-missing", ["--space", "no such file", "{tmp}/missing.yaml"], args=["--space", "{tmp}/missing.yaml"]),
    Case("rounds-zero", ["base.rounds", "greater than or equal to 1"], args=["--rounds", "0"]),
    Case("num-samples-zero", ["tune.num_samples", "greater than or equal to 1"], args=["--num-samples", "0"]),
    Case("seed-option-negative", ["base.seed", "greater than or equal to 0"], args=["--seed", "-1"]),
    Case(
        "variants-unknown",
        ["--variants", "unknown variant(s) nope", "the file has: fedavg, full"],
        args=["--variants", "full,nope"],
    ),
    Case("variants-empty", ["--variants", "(none given)", "the file has: fedavg, full"], args=["--variants", ","]),
    Case("set-without-equals", ["--set 'base.rounds'", "expected KEY=VALUE"], args=["--set", "base.rounds"]),
    Case(
        "set-unknown-section",
        ["nosuch.rounds", "no section 'nosuch'", "known:", "base", "tune", "variants"],
        args=["--set", "nosuch.rounds=3"],
    ),
    Case(
        "set-unknown-key",
        ["base.rouns", "Extra inputs are not permitted", "known keys:", "rounds"],
        args=["--set", "base.rouns=3"],
    ),
    Case(
        "set-below-a-value",
        ["base.rounds.x", "'base.rounds' is a value, not a section"],
        args=["--set", "base.rounds.x=3"],
    ),
    Case("set-wrong-type", ["base.rounds", "valid integer", "'abc'"], args=["--set", "base.rounds=abc"]),
    Case("set-invalid-yaml", ["--set base.rounds", "not valid YAML"], args=["--set", "base.rounds=[1"]),
    Case("set-alpha-zero", ["base.partition.alpha", "greater than 0"], args=["--set", "base.partition.alpha=0"]),
    Case(
        "tune-without-validation",
        ["base.partition.val_fraction: 0 leaves no validation split", "'val_acc'", "--ignore-studies"],
        args=["--set", "base.partition.val_fraction=0"],
    ),
    Case("storage-in-proc", ["--storage", "/proc/forbidden", "cannot write"], args=["--storage", "/proc/forbidden"]),
    Case(
        "storage-under-a-file",
        ["--storage", "{tmp}/space.yaml/results", "cannot write"],
        args=["--storage", "{tmp}/space.yaml/results"],
    ),
    Case(
        "address-malformed",
        ["--address", "'not an address'", "auto", "host:port"],
        args=["--address", "not an address"],
    ),
    Case("address-bad-port", ["--address", "'localhost:99999'", "1..65535"], args=["--address", "localhost:99999"]),
    Case(
        "mlflow-uri-unwritable",
        ["--mlflow-uri", "{tmp}/space.yaml/m.db"],
        args=["--mlflow-uri", "sqlite:///{tmp}/space.yaml/m.db"],
    ),
]


@pytest.fixture
def no_ray(monkeypatch):
    """Fails a case loudly (instead of running a study) if main gets as far as joining Ray. A start begun beside
    the last checks (runtime/cluster.py::RayStart) raises this on its thread, where a refused command drops it."""
    import ray

    def refuse(address):
        raise AssertionError("main() went on to start Ray: the bad input was not caught")

    monkeypatch.setattr(cluster, "start_ray", refuse)
    return ray


def _run(tmp_path, case: Case) -> tuple[int, list[str]]:
    path = tmp_path / "space.yaml"
    if isinstance(case.space, bytes):
        path.write_bytes(case.space)
    else:
        text = case.space if isinstance(case.space, str) else yaml.safe_dump(case.space)
        path.write_text(text.replace("{tmp}", str(tmp_path)))
    argv = ["--space", str(path), "--storage", str(tmp_path / "ray"), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    argv += [a.replace("{tmp}", str(tmp_path)) for a in case.args]
    return main(argv), [e.replace("{tmp}", str(tmp_path)) for e in case.expected]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_before_ray(tmp_path, capsys, no_ray, case):
    # True only where another test module already started the session's cluster; start_ray is refused either way
    ray_was_up = no_ray.is_initialized()
    code, expected = _run(tmp_path, case)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("error: "), err
    for fragment in expected:
        assert fragment in err, f"{fragment!r} missing from:\n{err}"
    assert "Traceback" not in out + err
    assert no_ray.is_initialized() is ray_was_up  # run on its own: False


def test_there_are_enough_distinct_cases():
    assert len({c.id for c in CASES}) == len(CASES) >= 35


@pytest.mark.parametrize(
    ("args", "option"),
    [(["--rounds", "abc"], "--rounds"), (["--num-samples", "1.5"], "--num-samples"), (["--seed", "x"], "--seed")],
    ids=["rounds-abc", "num-samples-float", "seed-not-int"],
)
def test_argparse_type_errors_name_the_option(tmp_path, capsys, no_ray, args, option):
    ray_was_up = no_ray.is_initialized()  # True where another test module already started the session's cluster
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(tiny_space()))
    with pytest.raises(SystemExit) as stopped:
        main(["--space", str(path), "--storage", str(tmp_path / "ray"), *args])
    out, err = capsys.readouterr()
    assert stopped.value.code == 2
    assert f"argument {option}: invalid" in err
    assert "Traceback" not in out + err
    assert no_ray.is_initialized() is ray_was_up
