"""A seeded study logs what it logged before the study driver was split into parts (issue 49): the real tune.py in a
frozen copy of the commit before that refactor and in this tree, their MLflow runs compared by
tools/frozen_compare.py. Every trial's params, tags and metric histories equal, every parent's tags and metrics
equal; a parent's params are its trials' params minus the searched names (the one change, made on purpose). Since
issue 50 the rounds also log the clients' 10th-percentile accuracy and variance (and their best_ copies on the
parent), and the bytes uploaded (a "bytes" metric: frozen_compare leaves such out); since issue 48 two new settings,
eval_every and precision, are params of every trial (at their defaults: the rounds are unchanged), and
resources.partial_sums (off by default: a delta per client, as before); since issue 58 the chance bounds, the
collapsed flag and count, and the parent's tuning_seeds, edges, sampler and scheduler tags; since issue 63 the
privacy setting (unset: None); since issue 60 the partition's Flower partitioner (unset: None) and its options;
since issue 61 the per-client test fraction and fine-tuning at evaluation (each 0: off), and personal_val_acc (a
global model's: its val_acc). All allowed as added keys only."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO, git_output

BEFORE_RECORDS = "12bd35b"  # the last commit before tracking/records.py built every record


def test_a_seeded_study_logs_what_it_logged_before_the_record_builder(tmp_path):
    git_output("cat-file", "-t", BEFORE_RECORDS)  # skipped where git or the commit (a shallow clone) is missing
    command = [sys.executable, "tools/frozen_compare.py", "--base", BEFORE_RECORDS, "--with-tune", "--cases", "tune"]
    command += ["--parent-params-from-trials", "--out", str(tmp_path / "out")]
    added = "client_acc_bottom10,client_acc_var,best_client_acc_bottom10,best_client_acc_var,eval_every,precision"
    added += ",resources.partial_sums"
    added += ",val_chance,test_chance,collapsed,trials_collapsed"  # the chance bounds and the collapsed count
    added += ",tuning_seeds,edges"  # issue 58: the seed the trials trained with; selected values at a range's edge
    added += ",sampler,scheduler"  # issue 62: the search's sampler and scheduler, tagged on the parent
    added += ",privacy"  # issue 63: base.privacy, a param of every trial (None: no privacy, as before)
    added += ",partition.partitioner,partition.options"  # issue 60: kind flwr's settings (None: another kind)
    added += ",partition.test_fraction,personalise.finetune_steps"  # issue 61: each 0 (off) unless set
    added += ",personal_val_acc,best_personal_val_acc"  # issue 61: a global model's is its val_acc
    command += ["--allow-added-keys", added]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "ALL EQUAL" in done.stdout
    for case in ("tune:full(parent) params", "tune:full(parent)", "tune:full-000", "tune:fedavg-000"):
        assert any(line.startswith(case + " ") and line.endswith("ok") for line in done.stdout.splitlines()), case
