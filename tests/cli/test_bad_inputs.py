"""Issues #5 and #35: every bad search-space field and command-line value is refused before Ray starts, and before
anything is written.

Each case runs `tune.py` end to end (`raytune_fl.cli.main`) and expects exit code 2 within a few seconds, the field
or option named on the first line of the message, the allowed values (and, for a misspelt name, the likely one),
no traceback, no Ray cluster, and nothing made: no --storage folder, no MLflow store or experiment, no Optuna
database or study. The other commands (ablate.py, dashboards/build.py, reproduce.py) are run on the options they
share. The address and tracking-server checks probe a closed local port, and a local server that is not Ray's.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field

import pytest
import yaml

from raytune_fl.cli import ablate, dashboard, main, reproduce
from raytune_fl.cli.common import resolve_space
from raytune_fl.cli.tune import build_parser
from raytune_fl.runtime import cluster
from tests.support import DELETE, changed_space, tiny_space
from tests.support.data_files import BAD_DATA

REFUSED_WITHIN_S = 5.0  # generous: a refusal is a file read and a probe or two; Ray's start alone takes longer


@dataclass(frozen=True)
class Case:
    id: str
    # fragments stderr must contain, the first one on its first line; "{tmp}" stands for tmp_path, "{port}" for a
    # closed local port, "{http}" for the port of a local HTTP server (not Ray's, not MLflow's)
    expected: list[str]
    space: dict | str | bytes = field(default_factory=tiny_space)  # a dict is dumped as YAML, else written as is
    args: list[str] = field(default_factory=list)  # after --space/--storage/--mlflow-uri, so they override them
    env: dict[str, str] = field(default_factory=dict)  # environment variables set for the case
    # plugin modules (name -> source) the case's space imports: written to the plugin_dir fixture's folder, whose
    # registries and modules are put back after the case (a name it registers never reaches another test)
    plugins: dict[str, str] = field(default_factory=dict)


UNIVARFL_SEARCH = {"mu": {"loguniform": [0.01, 1.0]}}


def _yaml_text(data: dict | None = None, after: str = "", insert: str = "", replace: tuple[str, str] = ("", "")) -> str:
    """`data` (default: tiny_space()) as the YAML text `_write_space` writes, with the line `insert` put after the
    first line that reads `after` (a key given twice), or one whole line `replace[0]` replaced by `replace[1]`."""
    lines = yaml.safe_dump(tiny_space() if data is None else data).splitlines()
    if after:
        at = lines.index(after) + 1
        lines[at:at] = [insert]
    if replace[0]:
        lines[lines.index(replace[0])] = replace[1]
    return "\n".join(lines) + "\n"


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
        changed_space(("base.partition.kind", "domain"), ("base.partition.alpha", DELETE)),
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
        ["tuning", "Extra inputs are not permitted", "did you mean 'tune'?", "known keys:", "variants"],
        changed_space(("tuning", {"num_samples": 2})),
    ),
    Case(
        "misspelt-base-key",
        ["base.rouns", "Extra inputs are not permitted", "did you mean 'rounds'?", "known keys:", "rounds"],
        changed_space(("base.rouns", 5)),
    ),
    Case("empty-name", ["name", "at least 1 character"], changed_space(("name", ""))),
    Case("missing-name", ["name", "Field required"], changed_space(("name", DELETE))),
    Case(
        "tune-on-test", ["tune.metric", "the test set never steers tuning"], changed_space(("tune.metric", "test_acc"))
    ),
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
        ["base.rouns", "Extra inputs are not permitted", "did you mean 'rounds'?", "known keys:", "rounds"],
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
    # ---------------------------------------------------------------- issue 35: a name that would leave --storage
    Case(
        "space-name-escapes-storage",
        ["name", "'../a/b'", "letters, digits, '_' and '-' only", "--storage"],
        changed_space(("name", "../a/b")),
    ),
    Case("space-name-dot-dot", ["name", "'..'", "letters, digits"], changed_space(("name", ".."))),
    Case("space-name-absolute", ["name", "'/tmp/x'", "letters, digits"], changed_space(("name", "/tmp/x"))),
    # ---------------------------------------------------------------- issue 35: checks that used to wait for Ray
    Case("resume-nothing-to-resume", ["--resume", "no study of 'tiny' to resume under {tmp}/ray"], args=["--resume"]),
    Case(
        "mlflow-uri-unknown-scheme",
        ["--mlflow-uri 'foo://bar'", "no tracking store for scheme 'foo'", "sqlite:///path.db", "http(s)://"],
        args=["--mlflow-uri", "foo://bar"],
    ),
    Case(
        "mlflow-uri-misspelt-scheme",
        ["--mlflow-uri", "scheme 'sqlit'", "did you mean sqlite://?"],
        args=["--mlflow-uri", "sqlit:///{tmp}/m.db"],
    ),
    Case(
        "mlflow-uri-server-unreachable",
        ["--mlflow-uri http://127.0.0.1:{port}", "does not answer", "Connection refused"],
        args=["--mlflow-uri", "http://127.0.0.1:{port}"],
    ),
    Case(
        "mlflow-uri-directory-under-a-file",
        ["--mlflow-uri", "{tmp}/space.yaml", "is a file"],
        args=["--mlflow-uri", "{tmp}/space.yaml/mlruns"],
    ),
    # ---------------------------------------------------------------- issue 59: MLflow's refusals, before Ray
    Case(
        "mlflow-uri-bare-folder",
        ["--mlflow-uri '{tmp}/results': a folder is MLflow's file store", "give sqlite:///{tmp}/results/mlflow.db"],
        args=["--mlflow-uri", "{tmp}/results"],
    ),
    Case(
        "mlflow-variable-unreadable",
        ["MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING='maybe': MLflow reads", "true, false, 1 or 0"],
        env={"MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING": "maybe"},
    ),
    Case(
        "address-unreachable",
        ["--address: cannot join the Ray cluster: nothing answers at 127.0.0.1:{port} within 3 s"],
        args=["--address", "127.0.0.1:{port}"],
    ),
    Case(
        "address-not-a-ray-cluster",
        ["--address: cannot join", "127.0.0.1:{http} answers, but not as a Ray cluster", "6379"],
        args=["--address", "127.0.0.1:{http}"],
    ),
    Case(
        "address-ray-client-unreachable",  # refused for want of ray[client], or for the closed port
        ["--address: cannot join the Ray cluster: "],
        args=["--address", "ray://127.0.0.1:{port}"],
    ),
    Case(
        "address-auto-finds-an-unreachable-one",  # 'auto' follows RAY_ADDRESS, as ray.init does
        ["--address: cannot join", "nothing answers at ", ":{port} within 3 s"],  # at this host's address
        args=["--address", "auto"],
        env={"RAY_ADDRESS": "127.0.0.1:{port}"},
    ),
    Case(
        "ray-address-variable-unreachable",
        ["RAY_ADDRESS: cannot join", "nothing answers at 127.0.0.1:{port}"],
        env={"RAY_ADDRESS": "127.0.0.1:{port}"},
    ),
    Case("ray-address-variable-malformed", ["RAY_ADDRESS 'nowhere'", "host:port"], env={"RAY_ADDRESS": "nowhere"}),
    Case(
        "optuna-storage-unknown-database",
        ["--optuna-storage 'foo://x'", "no database kind 'foo'", "sqlite, postgresql"],
        args=["--optuna-storage", "foo://x"],
    ),
    Case(
        "optuna-storage-misspelt-database",
        ["--optuna-storage", "no database kind 'sqlit'", "did you mean sqlite://?"],
        args=["--optuna-storage", "sqlit:///{tmp}/o.db"],
    ),
    Case(
        "optuna-storage-sqlite-folder-missing",
        ["--optuna-storage", "the folder of the database, {tmp}/nowhere, does not exist"],
        args=["--optuna-storage", "sqlite:///{tmp}/nowhere/o.db"],
    ),
    Case(
        "optuna-storage-not-a-url",
        ["--optuna-storage 'optuna.db'", "expected a SQLAlchemy URL"],
        args=["--optuna-storage", "optuna.db"],
    ),
    # ---------------------------------------------------------------- issue 35: "did you mean", typed values
    Case(
        "misspelt-method",
        ["variants.full.method", "unknown method 'fedprx'; did you mean 'fedprox'? known:"],
        changed_space(("variants.full", {"method": "fedprx"})),
    ),
    Case(
        "misspelt-dataset",
        ["base.dataset", "unknown dataset 'digit'; did you mean 'digits'?"],
        changed_space(("base.dataset", "digit")),
    ),
    Case(
        "misspelt-model",
        ["base.model", "unknown model 'simple_cn'; did you mean 'simple_cnn'?"],
        changed_space(("base.model", "simple_cn")),
    ),
    Case(
        "misspelt-partition-kind",
        ["base.partition.kind", "unknown partitioner 'dirichlt'; did you mean 'dirichlet'?"],
        changed_space(("base.partition.kind", "dirichlt")),
    ),
    Case(
        "misspelt-variant-key",
        ["variants.full.serch", "Extra inputs are not permitted", "did you mean 'search'?"],
        changed_space(("variants.full.serch", {"mu": {"uniform": [0, 1]}})),
    ),
    Case(
        "misspelt-hyperparameter",
        ["variants.full.search.lamda", "no hyperparameter lamda", "did you mean 'lambda'?"],
        changed_space(("variants.full.search.lamda", {"uniform": [0.5, 3.0]})),
    ),
    Case(
        "misspelt-sampler",
        ["tune.sampler", "'tpf'", "did you mean 'tpe'?"],
        changed_space(("tune.sampler", "tpf")),
    ),
    Case(
        "set-misspelt-key",
        ["base.partition.alpah", "did you mean 'alpha'?", "known keys:"],
        args=["--set", "base.partition.alpah=0.5"],
    ),
    Case(
        "set-misspelt-section",
        ["bse.rounds", "no section 'bse'", "did you mean 'base'?"],
        args=["--set", "bse.rounds=3"],
    ),
    Case(
        "set-misspelt-variant",
        ["variants.ful.fixed.mu", "no section 'variants.ful'", "did you mean 'full'?"],
        args=["--set", "variants.ful.fixed.mu=0.1"],
    ),
    Case(
        "variants-misspelt",
        ["--variants", "unknown variant(s) ful", "did you mean 'full'?"],
        args=["--variants", "ful"],
    ),
    Case(
        "fixed-text-that-is-no-number",
        ["variants.prox.fixed.mu", "must be a number >= 0", "'1e-3x'"],
        changed_space(("variants.prox", {"method": "fedprox", "fixed": {"mu": "1e-3x"}})),
    ),
    Case(
        "fixed-int-not-integral",
        ["variants.buf.fixed.buffer_size", "must be an integer >= 1", "'2.5'"],
        changed_space(("variants.buf", {"method": "fedbuff", "fixed": {"buffer_size": "2.5"}})),
    ),
    Case(
        "search-choice-text-that-is-no-number",
        ["variants.full.search.mu", "choice value 'small'", "must be a number >= 0"],
        changed_space(("variants.full.search.mu", {"choice": ["1e-3", "small"]})),
    ),
    # ---------------------------------------------------------------- edges (issue 46)
    # a key given twice: YAML alone would keep the last silently; line numbers are those of tiny_space's dump
    Case(
        "duplicate-top-level-key",
        ["name: given twice, at {tmp}/space.yaml:15 (first at line 14)", "keep one"],
        _yaml_text(after="name: tiny", insert="name: other"),
    ),
    Case(
        "duplicate-top-level-section",
        ["tune: given twice, at {tmp}/space.yaml:16 (first at line 15)"],
        _yaml_text(after="name: tiny", insert="tune: {num_samples: 1}"),
    ),
    Case(
        "duplicate-base-key",
        ["base.rounds: given twice, at {tmp}/space.yaml:14 (first at line 3)", "keep one"],
        _yaml_text(after="  batch_size: 32", insert="  rounds: 5"),
    ),
    Case(
        "duplicate-nested-key",
        ["base.partition.clients: given twice, at {tmp}/space.yaml:7 (first at line 6)"],
        _yaml_text(after="    clients: 3", insert="    clients: 5"),
    ),
    Case(
        "duplicate-variant",
        ["variants.fedavg: given twice, at {tmp}/space.yaml:24 (first at line 23)"],
        _yaml_text(after="variants:", insert="  fedavg: {method: fedprox}"),
    ),
    Case(
        "duplicate-key-in-a-variant",
        ["variants.full.method: given twice, at {tmp}/space.yaml:27 (first at line 26)"],
        _yaml_text(after="    method: univarfl", insert="    method: fedprox"),
    ),
    Case(
        "duplicate-key-in-a-flow-mapping",
        ["variants.fedavg.fixed.mu: given twice, at {tmp}/space.yaml:23 (first at line 23)"],
        _yaml_text(
            changed_space(("variants.fedavg", "FLOW")),
            replace=("  fedavg: FLOW", "  fedavg: {method: fedprox, fixed: {mu: 0.1, mu: 1.0}}"),
        ),
    ),
    Case(
        "set-duplicate-key-in-a-flow-mapping",
        ["variants.fedavg.fixed.mu: given twice in --set variants.fedavg={method: fedprox, fixed: {mu: 0.1, mu: 1}}"],
        args=["--set", "variants.fedavg={method: fedprox, fixed: {mu: 0.1, mu: 1}}"],
    ),
    Case(
        "set-duplicate-key-in-a-section",
        ["base.partition.clients: given twice in --set base.partition="],
        args=["--set", "base.partition={kind: iid, clients: 3, clients: 5}"],
    ),
    # a participation below one client: the rounding would quietly sample one
    Case(
        "participation-below-one-client",
        [
            "base.participation: 0.05 of 10 clients is 0.5 of a client, fewer than one; the smallest that samples one "
            "client is 0.1"
        ],
        changed_space(("base.partition.clients", 10), ("base.participation", 0.05)),
    ),
    Case(
        "participation-that-would-round-up-to-one",
        ["base.participation: 0.2 of 3 clients is 0.6 of a client", "the smallest that samples one client is 0.3334"],
        changed_space(("base.participation", 0.2)),
    ),
    Case(
        "participation-of-many-clients",
        ["base.participation: 0.004 of 100 clients is 0.4 of a client", "is 0.01"],
        changed_space(("base.partition.clients", 100), ("base.partition.min_size", 1), ("base.participation", 0.004)),
    ),
    Case(
        "set-participation-below-one-client",
        ["base.participation: 0.3 of 3 clients is 0.9 of a client", "is 0.3334"],
        args=["--set", "base.participation=0.3"],
    ),
    Case(
        "set-clients-below-the-participation",  # the file's 0.5 of 3 clients is fine; of 1 client it is not
        ["base.participation: 0.5 of 1 client is 0.5 of a client", "the smallest that samples one client is 1"],
        changed_space(("base.participation", 0.5)),
        args=["--set", "base.partition.clients=1"],
    ),
    # yes/no in a number's field: pydantic would read true as 1 (one round, a rate of 1.0)
    Case(
        "rounds-yes",
        ["base.rounds: true is a yes/no value, not a number", "YAML reads yes, no, on, off"],
        _yaml_text(replace=("  rounds: 3", "  rounds: yes")),
    ),
    Case(
        "lr-on",
        ["base.optimizer.lr: true is a yes/no value, not a number"],
        _yaml_text(changed_space(("base.optimizer.lr", 0.1)), replace=("    lr: 0.1", "    lr: on")),
    ),
    Case("participation-true", ["base.participation: true is a yes/no"], changed_space(("base.participation", True))),
    Case("set-num-samples-no", ["tune.num_samples: false is a yes/no"], args=["--set", "tune.num_samples=no"]),
    Case(
        "local-steps-with-a-yes-no-end",
        ["base.system.local_steps: true in [true, 3] is a yes/no value"],
        changed_space(("base.system.local_steps", [True, 3])),
    ),
    Case(
        "int-range-with-a-yes-no-end",
        ["variants.buf.search.buffer_size.int: true in [true, 4] is a yes/no value"],
        changed_space(("variants.buf", {"method": "fedbuff", "search": {"buffer_size": {"int": [True, 4]}}})),
    ),
    # a float where an integer is meant, zeros and negatives
    Case("rounds-fractional", ["base.rounds", "valid integer", "fractional part"], changed_space(("base.rounds", 2.5))),
    Case(
        "local-epochs-fractional",
        ["base.local_epochs", "fractional part"],
        changed_space(("base.local_epochs", 1.5)),
    ),
    Case(
        "client-batch-fractional",
        ["base.resources.client_batch", "fractional part"],
        changed_space(("base.resources.client_batch", 2.5)),
    ),
    Case(
        "client-batch-zero",
        ["base.resources.client_batch", "a positive integer or 'auto'", "got 0"],
        changed_space(("base.resources.client_batch", 0)),
    ),
    Case("lr-zero", ["base.optimizer.lr", "greater than 0"], changed_space(("base.optimizer.lr", 0))),
    Case(
        "weight-decay-negative",
        ["base.optimizer.weight_decay", "greater than or equal to 0"],
        changed_space(("base.optimizer.weight_decay", -1e-4)),
    ),
    Case(
        "local-epochs-zero", ["base.local_epochs", "greater than or equal to 1"], args=["--set", "base.local_epochs=0"]
    ),
    Case(
        "eval-batch-size-zero",
        ["base.eval_batch_size", "greater than or equal to 1"],
        changed_space(("base.eval_batch_size", 0)),
    ),
    Case(
        "cpus-per-actor-zero",
        ["base.resources.cpus_per_actor", "greater than 0"],
        changed_space(("base.resources.cpus_per_actor", 0)),
    ),
    Case(
        "round-timeout-zero",
        ["base.resources.round_timeout_s", "greater than 0"],
        changed_space(("base.resources.round_timeout_s", 0)),
    ),
    Case(
        "max-concurrent-zero",
        ["tune.max_concurrent", "greater than or equal to 1"],
        changed_space(("tune.max_concurrent", 0)),
    ),
    Case(
        "grace-period-zero",
        ["tune.scheduler.asha.grace_period", "greater than or equal to 1"],
        changed_space(("tune.scheduler.asha.grace_period", 0)),
    ),
    # a number with a leading zero: YAML 1.1 reads it as octal
    Case(
        "rounds-octal",
        ["base.rounds: 010 is read by YAML as the octal number 8", "write 10", "{tmp}/space.yaml:"],
        _yaml_text(replace=("  rounds: 3", "  rounds: 010")),
    ),
    Case(
        "set-clients-octal",
        ["base.partition.clients: 012 is read by YAML as the octal number 10", "write 12", "(in --set"],
        args=["--set", "base.partition.clients=012"],
    ),
    # a kind-specific setting beside a kind that ignores it
    Case(
        "alpha-with-iid",
        ["base.partition.alpha: 0.5 is set, but kind 'iid' does not use it", "dirichlet"],
        changed_space(("base.partition.kind", "iid"), ("base.partition.alpha", 0.5)),
    ),
    Case(
        "classes-per-client-with-dirichlet",
        ["base.partition.classes_per_client: 2 is set, but kind 'dirichlet' does not use it", "shards"],
        changed_space(("base.partition.classes_per_client", 2)),
    ),
    # ---------------------------------------------------------------- a plugin's method and import (issue 46)
    Case(
        "plugin-method-build-raises",
        [
            "variants.mine.method: method 'case_boom': build() raised RuntimeError: needs a projection head",
            "plug_boom.py:6)",
        ],
        changed_space(("plugins", ["plug_boom"]), ("variants", {"mine": {"method": "case_boom"}})),
        plugins={
            "plug_boom": "from raytune_fl import MethodSpec, register_method\n\n\n"
            "def build(params, context):\n"
            "    # a researcher's method whose set-up fails\n"
            "    raise RuntimeError('needs a projection head')\n\n\n"
            "register_method(MethodSpec('case_boom', {}, build))\n"
        },
    ),
    Case(
        "plugin-import-env",
        ["plugins: importing 'plug_env' failed: KeyError: 'RAYTUNE_FL_CASE_UNSET'", "plug_env.py:3)"],
        changed_space(("plugins", ["plug_env"])),
        plugins={"plug_env": "import os\n\nHOME = os.environ['RAYTUNE_FL_CASE_UNSET']\n"},
    ),
    # ---------------------------------------------------------------- the data's layout and classes (issue 46)
    Case(
        "drop-last-no-step",
        [
            "base.batch_size",
            "2 of 3 clients would take no local step",
            "client 0: 364, client 1: 318",
            "base.batch_size <= 318",
            "base.drop_last: false",
        ],
        changed_space(("base.batch_size", 500), ("base.drop_last", True)),
    ),
    Case(
        "client-of-one-sample-no-step",
        ["base.partition.min_size", "would take no local step", "at least 2 samples", "base.partition.clients <= 479"],
        changed_space(
            ("base.partition.kind", "iid"),
            ("base.partition.alpha", DELETE),  # iid has no alpha
            ("base.partition.clients", 700),
            ("base.partition.min_size", 1),
        ),
    ),
    Case(
        "npz-ambiguous-layout",
        ["base.dataset_options.layout", "x_train (4, 3, 3, 3) is ambiguous", "nchw or nhwc"],
        changed_space(("base.dataset", "npz"), ("base.dataset_options", {"path": str(BAD_DATA / "ambiguous.npz")})),
    ),
    Case(
        "npz-unknown-layout",
        ["base.dataset_options.layout", "'nchw' or 'nhwc'"],
        changed_space(
            ("base.dataset", "npz"),
            ("base.dataset_options", {"path": str(BAD_DATA / "ambiguous.npz"), "layout": "hwc"}),
        ),
    ),
    Case(
        "npz-test-only-class",
        ["base.dataset_options", "classes without a training sample: 2 (only in y_test)", "0..K-1"],
        changed_space(
            ("base.dataset", "npz"), ("base.dataset_options", {"path": str(BAD_DATA / "test_only_class.npz")})
        ),
    ),
    Case(
        "npz-one-class",
        ["base.dataset_options", "every label is 0: one class", "at least 2 classes"],
        changed_space(("base.dataset", "npz"), ("base.dataset_options", {"path": str(BAD_DATA / "one_class.npz")})),
    ),
    Case(
        "image-folder-one-class",
        ["base.root", "holds one class folder (cat)", "at least 2"],
        changed_space(("base.dataset", "image_folder"), ("base.root", str(BAD_DATA / "one_class_folder"))),
    ),
    # ---------------------------------------------------------------- issue 59: careless inputs, new set
    Case(
        "objective-against-its-sense",
        ["tune.metric: [val_loss: max] maximises a metric that improves as it falls", "tune.against_sense"],
        changed_space(("tune.metric", [{"val_loss": "max"}])),
    ),
    Case(
        "objective-direction-maximize",
        ["tune.metric.0.val_acc: Input should be 'max' or 'min' (got 'maximize'); did you mean 'max'?"],
        changed_space(("tune.metric", [{"val_acc": "maximize"}])),
    ),
    Case(
        "per-setting-one-number-twice",
        ["--per-setting partition.alpha=1e-1: the same setting as partition.alpha=0.1", "give each value once"],
        args=["--per-setting", "alpha=0.1,1e-1"],
    ),
]


@pytest.fixture
def no_ray(monkeypatch):
    """Fails a case loudly (instead of running a study) if main gets as far as joining Ray. A start begun beside
    the last checks (runtime/cluster.py::RayStart) raises this on its thread, where a refused command drops it."""
    import ray

    def refuse(*args):
        raise AssertionError("main() went on to start Ray: the bad input was not caught")

    monkeypatch.setattr(cluster, "start_ray", refuse)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return ray


@pytest.fixture(scope="module", autouse=True)
def warm():
    """What the checks import and load once per process (the data's packages and the digits, MLflow, Optuna, Ray
    Tune for the study record), so that each case's time is its own."""
    from raytune_fl.data import load_dataset
    from raytune_fl.runtime import optuna_storage  # noqa: F401
    from raytune_fl.tracking import store  # noqa: F401
    from raytune_fl.tune import manifest  # noqa: F401

    load_dataset("digits")


@pytest.fixture(scope="module")
def ports():
    """{port}: a local port nothing listens on (bound, then closed); {http}: a local HTTP server's, which is no Ray
    cluster (and answers the tracking-server probe: it is reachable)."""

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # no lines on stderr
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    yield {"port": str(port), "http": str(server.server_address[1])}
    server.shutdown()


def _fill_all(texts, tmp_path, ports) -> list[str]:
    return [
        text.replace("{tmp}", str(tmp_path)).replace("{port}", ports["port"]).replace("{http}", ports["http"])
        for text in texts
    ]


def _write_space(tmp_path, space: dict | str | bytes):
    path = tmp_path / "space.yaml"
    if isinstance(space, bytes):
        path.write_bytes(space)
    else:
        text = space if isinstance(space, str) else yaml.safe_dump(space)
        path.write_text(text.replace("{tmp}", str(tmp_path)))
    return path


def _refused(run, tmp_path, capsys, no_ray, expected: list[str]) -> str:
    """`run()` exits 2 within REFUSED_WITHIN_S, says `expected` (the first fragment on the first line), starts no
    Ray and leaves nothing but the space file in tmp_path; its stderr."""
    ray_was_up = no_ray.is_initialized()  # True only where another test module already started the session's cluster
    started = time.perf_counter()
    code = run()
    elapsed = time.perf_counter() - started
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("error: "), err
    first = err.splitlines()[0]
    assert expected[0] in first, f"{expected[0]!r} is not on the first line:\n{err}"
    for fragment in expected:
        assert fragment in err, f"{fragment!r} missing from:\n{err}"
    assert "Traceback" not in out + err
    assert no_ray.is_initialized() is ray_was_up  # run on its own: False
    assert elapsed < REFUSED_WITHIN_S, f"refused after {elapsed:.1f} s"
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "plugins")  # the plugin_dir fixture's
    assert made == ["space.yaml"], f"a refused command made {made}"  # no --storage, MLflow or Optuna store
    return err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_before_ray(tmp_path, capsys, monkeypatch, no_ray, ports, plugin_dir, case):
    for name, source in case.plugins.items():
        (plugin_dir / f"{name}.py").write_text(source)
    path = _write_space(tmp_path, case.space)
    for name, value in case.env.items():
        monkeypatch.setenv(name, *_fill_all([value], tmp_path, ports))
    argv = ["--space", str(path), "--storage", str(tmp_path / "ray"), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    argv += _fill_all(case.args, tmp_path, ports)
    _refused(lambda: main(argv), tmp_path, capsys, no_ray, _fill_all(case.expected, tmp_path, ports))


def test_there_are_enough_distinct_cases():
    assert len({c.id for c in CASES}) == len(CASES) >= 159


@pytest.fixture(scope="module")
def earlier_stores(tmp_path_factory):
    """An MLflow store (MLflow's Default experiment only) and an Optuna database (study 'earlier') made once."""
    import optuna
    from mlflow.tracking import MlflowClient

    stores = tmp_path_factory.mktemp("stores")
    MlflowClient(f"sqlite:///{stores}/m.db").search_experiments()
    optuna.create_study(storage=f"sqlite:///{stores}/optuna.db", study_name="earlier")
    return stores


LATE = [  # refused by the last checks, after the tracking and Optuna stores' own checks passed
    (["--address", "127.0.0.1:{port}"], "--address"),
    (["--address", "127.0.0.1:{http}"], "--address"),
    (["--resume"], "--resume"),
    (["--set", "base.partition.clients=5000"], "base.partition.clients"),
]


@pytest.mark.parametrize(("args", "named"), LATE, ids=["address", "not-ray", "resume", "data"])
def test_a_refused_study_adds_nothing_to_existing_stores(tmp_path, capsys, no_ray, ports, earlier_stores, args, named):
    """The MLflow store and the Optuna database exist (earlier studies): no experiment, study or record is added,
    and --storage stays unmade."""
    import optuna
    from mlflow.tracking import MlflowClient

    stores = tmp_path / "stores"
    shutil.copytree(earlier_stores, stores)
    uri, optuna_url = f"sqlite:///{stores}/m.db", f"sqlite:///{stores}/optuna.db"  # the default beside m.db
    before = sorted(p.name for p in stores.iterdir())
    space = _write_space(tmp_path, tiny_space())
    argv = ["--space", str(space), "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri]
    assert main([*argv, *_fill_all(args, tmp_path, ports)]) == 2
    assert named in capsys.readouterr().err.splitlines()[0]
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]
    assert optuna.get_all_study_names(optuna_url) == ["earlier"]
    assert sorted(p.name for p in stores.iterdir()) == before and not (tmp_path / "ray").exists()


OTHER_COMMANDS = [
    ("ablate", ["--address", "127.0.0.1:{port}"], ["--address: cannot join", "nothing answers at 127.0.0.1:{port}"]),
    ("ablate", ["--address", "127.0.0.1:{http}"], ["--address", "not as a Ray cluster"]),
    ("ablate", ["--mlflow-uri", "http://127.0.0.1:{port}"], ["--mlflow-uri", "does not answer"]),
    ("ablate", ["--mlflow-uri", "foo://bar"], ["--mlflow-uri 'foo://bar'", "scheme 'foo'"]),
    ("ablate", ["--resume"], ["--resume", "no ablation with this plan", "experiment 'tiny'"]),
    ("ablate", ["--out", "{tmp}/space.yaml/out"], ["--out", "Not a directory"]),
    ("ablate", ["--set", "variants.full.method=fedprx"], ["variants.full.method", "did you mean 'fedprox'?"]),
    ("dashboard", ["--mlflow-uri", "foo://bar"], ["--mlflow-uri 'foo://bar'", "scheme 'foo'"]),
    ("dashboard", ["--mlflow-uri", "http://127.0.0.1:{port}"], ["--mlflow-uri", "does not answer"]),
    ("dashboard", ["--mlflow-uri", "sqlite:///{tmp}/absent.db"], ["--mlflow-uri", "no MLflow store at"]),
    ("reproduce", ["--address", "127.0.0.1:{port}"], ["--address: cannot join", "nothing answers at 127.0.0.1:{port}"]),
    ("reproduce", ["--set", "base.rouns=3"], ["base.rouns", "did you mean 'rounds'?"]),
    ("reproduce", ["--rounds", "0"], ["base.rounds", "greater than or equal to 1"]),
    ("reproduce", ["--work", "{tmp}/space.yaml/work"], ["--work", "Not a directory"]),
    ("reproduce", ["--out", "{tmp}/space.yaml/results"], ["--out", "Not a directory"]),
    ("reproduce", ["--resume"], ["--resume: no feduv_table4 run in {tmp}/work to resume"]),
]


def _other_argv(command: str, space, tmp_path) -> list[str]:
    if command == "reproduce":  # its own space file; everything it writes under --work and --out
        return ["feduv_table4", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "results")]
    argv = ["--space", str(space), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    if command == "tune":
        return [*argv, "--storage", str(tmp_path / "ray")]
    if command == "ablate":
        return [*argv, "--storage", str(tmp_path / "ray"), "--out", str(tmp_path / "out"), "--seeds", "1"]
    return [*argv, "--out", str(tmp_path / "d.html")]


@pytest.mark.parametrize(
    ("command", "args", "expected"), OTHER_COMMANDS, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(OTHER_COMMANDS)]
)
def test_the_other_commands_refuse_before_ray_and_write_nothing(
    tmp_path, capsys, no_ray, ports, command, args, expected
):
    space = _write_space(tmp_path, tiny_space())
    argv = [*_other_argv(command, space, tmp_path), *_fill_all(args, tmp_path, ports)]
    run = {"ablate": ablate.main, "dashboard": dashboard.main, "reproduce": reproduce.main}[command]
    _refused(lambda: run(argv), tmp_path, capsys, no_ray, _fill_all(expected, tmp_path, ports))


@pytest.mark.parametrize("command", ["tune", "ablate"])
def test_a_trial_too_big_for_the_private_cluster_is_refused_before_it_starts(tmp_path, capsys, no_ray, command):
    if no_ray.is_initialized():  # this process's cluster is joined, and checked once joined
        pytest.skip("another test module started this process's Ray cluster")
    space = _write_space(tmp_path, changed_space(("base.resources.actors", 100_000)))
    argv = _other_argv(command, space, tmp_path)
    run = ablate.main if command == "ablate" else main
    expected = ["base.resources", "one trial needs 100000 CPU", "(this machine's private Ray cluster)"]
    _refused(lambda: run(argv), tmp_path, capsys, no_ray, expected)


@pytest.mark.parametrize("command", ["ablate", "dashboard"])
def test_a_space_name_that_leaves_its_folders_is_refused_by_every_command(tmp_path, capsys, no_ray, command):
    space = _write_space(tmp_path, changed_space(("name", "../a/b")))
    run = {"ablate": ablate.main, "dashboard": dashboard.main}[command]
    _refused(lambda: run(_other_argv(command, space, tmp_path)), tmp_path, capsys, no_ray, ["name", "'../a/b'"])


# ------------------------------------------------------------------------------- one field given twice: a warning


def _resolved(tmp_path, *args):
    space = _write_space(tmp_path, tiny_space())
    return resolve_space(build_parser().parse_args(["--space", str(space), "--storage", str(tmp_path / "r"), *args]))


def test_a_key_set_twice_warns_once_on_one_line_and_the_last_value_is_used(tmp_path, capsys):
    space, _ = _resolved(tmp_path, "--set", "base.rounds=2", "--set", " base.rounds =4", "--set", "tune.seed=1")
    assert space.base.rounds == 4
    assert capsys.readouterr().err.splitlines() == [
        "WARNING: --set base.rounds is given twice (2, then 4): the last, 4, is used"
    ]


def test_seed_and_a_set_seed_that_disagree_warn_and_the_set_one_is_used(tmp_path, capsys):
    space, _ = _resolved(tmp_path, "--seed", "3", "--set", "base.seed=5")
    assert (space.base.seed, space.tune.seed) == (5, 3)  # --set is applied after the other options
    assert capsys.readouterr().err.splitlines() == [
        "WARNING: base.seed: --set base.seed=5 and --seed 3 disagree: 5 is used (--set is applied after the other "
        "options); tune.seed stays 3 from --seed"
    ]
    space, _ = _resolved(tmp_path, "--rounds", "2", "--set", "base.rounds=6", "--seed", "3", "--set", "tune.seed=3")
    assert (space.base.rounds, space.base.seed, space.tune.seed) == (6, 3, 3)  # tune.seed: the same value, no word
    assert capsys.readouterr().err.splitlines() == [
        "WARNING: base.rounds: --set base.rounds=6 and --rounds 2 disagree: 6 is used (--set is applied after the "
        "other options)"
    ]


def test_options_that_agree_say_nothing(tmp_path, capsys):
    space, _ = _resolved(tmp_path, "--seed", "3", "--set", "base.seed=3", "--rounds", "2", "--set", "base.rounds=2")
    assert (space.base.seed, space.tune.seed, space.base.rounds) == (3, 3, 2)
    assert capsys.readouterr().err == ""
    assert not (tmp_path / "r").exists()  # resolve_space checks --storage; it does not make it


def test_a_client_batch_above_the_clients_a_round_trains_is_capped_with_one_warning(tmp_path, capsys):
    """Issue 46: 8 at once where a round trains 2 of 3 clients: one WARNING line, before Ray starts; the engine trains
    2 at once (tests/engine/test_client_batch_cap.py), which is the same training."""
    space, _ = _resolved(tmp_path, "--set", "base.resources.client_batch=8", "--set", "base.participation=0.67")
    assert space.base.resources.client_batch == 8  # the setting as given (MLflow logs it so); the engine caps it
    assert capsys.readouterr().err.splitlines() == [
        "WARNING: base.resources.client_batch: 8 is more than the 2 clients a round trains (participation 0.67 of 3 "
        "clients); 2 is used"
    ]
    for fine in ("2", "auto"):
        _resolved(tmp_path, "--set", f"base.resources.client_batch={fine}", "--set", "base.participation=0.67")
        assert capsys.readouterr().err == ""


def test_a_set_hyperparameter_in_yaml_float_text_is_the_float(tmp_path):
    """--set reads values as YAML 1.1 (`1e-3` is text there), as a file's fixed: block does."""
    space, _ = _resolved(tmp_path, "--set", "variants.fedavg={method: fedprox, fixed: {mu: 1e-3}}")
    assert space.variants["fedavg"].fixed == {"mu": 0.001} and isinstance(space.variants["fedavg"].fixed["mu"], float)


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
