"""Ctrl-C and SIGTERM (tune/interrupt.py): real signals to this process, and a real Tune run they stop gracefully
and `Tuner.restore` continues to the uninterrupted result."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import pytest
from ray import tune

from raytune_fl.tune import interrupt
from raytune_fl.tune.callbacks import ForwardInterrupt
from raytune_fl.tune.interrupt import StudyInterrupted


def _send(signum: int) -> None:
    os.kill(os.getpid(), signum)  # delivered to the main thread, which runs the handler before its next bytecode


def test_guarded_installs_its_handlers_and_puts_back_the_previous_ones():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    with interrupt.guarded("raytune-fl tune --space s.yaml --resume"):
        assert signal.getsignal(signal.SIGINT) is signal.getsignal(signal.SIGTERM) is interrupt._handle
        assert os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"  # Tune leaves SIGINT to us
        assert interrupt.resume_command() == "raytune-fl tune --space s.yaml --resume"
        with interrupt.guarded("the inner command's"):  # reproduce runs tune: the outer command owns the stop
            assert interrupt.resume_command() == "raytune-fl tune --space s.yaml --resume"
    assert {s: signal.getsignal(s) for s in before} == before
    assert os.environ.get("TUNE_DISABLE_SIGINT_HANDLER") == env
    assert interrupt.requested() is None


@pytest.mark.parametrize(("signum", "code", "name"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_outside_a_tune_run_the_first_signal_stops_at_once(signum, code, name):
    with interrupt.guarded(), pytest.raises(StudyInterrupted) as stopped:
        _send(signum)
        pytest.fail("the handler did not raise")
    assert (stopped.value.exit_code, stopped.value.name, stopped.value.forced) == (code, name, False)
    assert isinstance(stopped.value, KeyboardInterrupt)  # MLflow's parent run closes KILLED, not FAILED


def test_a_second_signal_forces_the_stop_wherever_the_driver_is():
    with interrupt.guarded(), pytest.raises(StudyInterrupted) as stopped:
        with interrupt.tune_run():  # no Tune listening: the first stop is only recorded
            _send(signal.SIGINT)
            assert interrupt.requested() == signal.SIGINT
            _send(signal.SIGINT)
            pytest.fail("the second signal did not raise")
    assert stopped.value.forced and stopped.value.exit_code == 130


def test_a_stop_whose_cluster_stops_answering_is_forced_within_a_second():
    # a SIGTERM to a whole Slurm job reaches the cluster's own processes too: the graceful stop would wait on them
    server = socket.create_server(("127.0.0.1", 0))  # stands for the GCS's port: a real listening socket
    address = f"127.0.0.1:{server.getsockname()[1]}"
    with interrupt.guarded(), pytest.raises(StudyInterrupted) as stopped:
        with interrupt.tune_run():
            _send(signal.SIGTERM)  # no Tune listening: the first stop is only recorded
            interrupt._watch_cluster(address)
            time.sleep(0.8)
            assert interrupt._answers(address)  # alive: the graceful stop goes on
            server.close()
            time.sleep(5)
            pytest.fail("the watcher did not force the stop")
    assert stopped.value.forced and stopped.value.exit_code == 143
    assert not interrupt._answers(address)


def test_a_stop_bounds_tracking_requests_and_the_command_end_puts_the_users_limits_back(monkeypatch):
    # a scancel ends the job's MLflow server too: MLflow's default retries (a doubling backoff) would wait minutes
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")  # the user's own
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with interrupt.guarded():
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"  # no stop yet: the user's limits hold
        with pytest.raises(StudyInterrupted):
            _send(signal.SIGTERM)
        assert (os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) == ("0", "3")
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def test_a_stop_takes_rays_excepthook_out_and_the_command_end_puts_it_back(monkeypatch):
    from ray._private import worker

    # Ray's hook reports an uncaught error to the GCS with no timeout: after a scancel the driver hung in it
    monkeypatch.setattr(sys, "excepthook", worker.custom_excepthook)
    with interrupt.guarded():
        with pytest.raises(StudyInterrupted):
            _send(signal.SIGTERM)
        assert sys.excepthook is sys.__excepthook__
    assert sys.excepthook is worker.custom_excepthook


def test_a_stop_that_ray_turned_into_a_plain_keyboard_interrupt_is_still_the_stop():
    # Ray's C++ (ray.wait in Tune's clean-up) replaces the handler's StudyInterrupted by its own KeyboardInterrupt
    with interrupt.guarded(), pytest.raises(StudyInterrupted) as stopped:
        with interrupt.tune_run():
            _send(signal.SIGTERM)  # no Tune listening: the first stop is only recorded
            raise KeyboardInterrupt
    assert stopped.value.exit_code == 143 and not stopped.value.forced


def test_a_stop_asked_for_before_a_tune_run_starts_none():
    with interrupt.guarded(), pytest.raises(StudyInterrupted):
        interrupt._STATE.signum = signal.SIGTERM  # as the handler records it when Tune is running
        with interrupt.tune_run():
            pytest.fail("a tune run began after the stop")


def test_unguarded_nothing_changes():
    before = signal.getsignal(signal.SIGINT)
    with interrupt.tune_run():
        pass
    interrupt.raise_if_requested()
    assert signal.getsignal(signal.SIGINT) is before


# ------------------------------------------------------------------------------------------- a real Tune run


ITERATIONS = 6


def _counting(config: dict) -> None:
    """A trial that checkpoints every step and resumes from its checkpoint, as a federated trial does."""
    import json
    import tempfile
    import time

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            start = json.load(f)["step"]
    for step in range(start + 1, ITERATIONS + 1):
        time.sleep(0.2)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune.report({"step": step, "score": config["x"] * step}, checkpoint=tune.Checkpoint.from_directory(folder))


class _CtrlCAt(tune.Callback):
    """Presses Ctrl-C once the first trial reported `step` (a real SIGINT to this process)."""

    def __init__(self, step: int) -> None:
        self.step, self.sent = step, False

    def __getstate__(self) -> dict:  # Tune pickles its callbacks with the experiment: the restored run is not cut
        return {**self.__dict__, "sent": True}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not self.sent and result["step"] == self.step:
            self.sent = True
            _send(signal.SIGINT)


def _tuner(path, callbacks):
    return tune.Tuner(
        _counting,
        param_space={"x": tune.grid_search([1, 2])},
        tune_config=tune.TuneConfig(max_concurrent_trials=1),
        run_config=tune.RunConfig(name="counting", storage_path=str(path), callbacks=callbacks, verbose=0),
    )


def test_a_ctrl_c_during_fit_stops_the_trials_gracefully_and_restore_finishes_them(ray_cluster, tmp_path):
    with interrupt.guarded(), pytest.raises(StudyInterrupted) as stopped:
        with interrupt.tune_run():
            _tuner(tmp_path, [_CtrlCAt(2), ForwardInterrupt()]).fit()
        pytest.fail("fit() returned without the stop")  # pragma: no cover
    assert stopped.value.exit_code == 130 and not stopped.value.forced
    experiment = tmp_path / "counting"
    assert tune.Tuner.can_restore(str(experiment))
    cut = tune.Tuner.restore(str(experiment), _counting).get_results()
    assert sorted(r.metrics.get("step", 0) for r in cut) != [ITERATIONS, ITERATIONS]  # stopped before the end

    results = tune.Tuner.restore(str(experiment), _counting, resume_unfinished=True).fit()
    scores = sorted((r.config["x"], r.metrics["step"], r.metrics["score"]) for r in results)
    assert scores == [(1, ITERATIONS, ITERATIONS), (2, ITERATIONS, 2 * ITERATIONS)]
    # the cut trial went on from its last checkpoint, not from its start (a step whose checkpoint Tune had not
    # registered yet runs again); the other ran all its steps in the restored run
    since_restore = sorted(r.metrics["iterations_since_restore"] for r in results)
    assert since_restore[0] < ITERATIONS and since_restore[1] == ITERATIONS


# ------------------------------------------------------------------------------ the records a stop leaves


def test_the_study_record_says_what_resume_does_with_each_variant(tmp_path):
    from raytune_fl.config import SearchSpace
    from raytune_fl.tune.manifest import StudyManifest
    from raytune_fl.tune.outcome import VariantOutcome
    from raytune_fl.tune.study import VariantRun
    from tests.support import tiny_space

    space = SearchSpace.model_validate(tiny_space())
    manifest = StudyManifest.start(tmp_path, space, "sqlite:///m.db")
    run = VariantRun(str(tmp_path / "exp"), "parent1")
    manifest.started("fedavg", run)
    manifest.finished("fedavg", VariantOutcome("fedavg", "fedavg", {}, {"val_acc": 0.5}, {}, "parent1", "", 1.0))
    manifest.started("full", run)
    manifest.interrupted("full", "Ctrl-C")
    manifest.interrupted("fedavg", "Ctrl-C")  # a finished variant stays finished
    manifest.interrupted("never", "Ctrl-C")  # one that never started has nothing to record

    loaded = StudyManifest.load(tmp_path, space, "sqlite:///m.db")  # what --resume reads
    assert [loaded.state(v) for v in ("fedavg", "full", "never")] == ["finished", "interrupted", "new"]
    assert loaded.outcome("full") is None and loaded.run("full") == run  # restored in its runs, never "kept"
    loaded.variants["full"].pop("interrupted")
    assert loaded.state("full") == "killed"  # started, its driver gone without a word: restored the same way
    loaded.refused("full", "base.precision: bf16 on a CPU without it\n  (found by a trial of variant full ...)")
    loaded.refused("fedavg", "no")  # a finished variant stays finished
    again = StudyManifest.load(tmp_path, space, "sqlite:///m.db")
    assert [again.state(v) for v in ("fedavg", "full")] == ["finished", "refused"]  # full: started afresh
    assert again.variants["full"]["refused"]["why"] == "base.precision: bf16 on a CPU without it"


def test_ablate_refuses_a_variant_whose_newest_study_was_interrupted(tmp_path):
    from mlflow.tracking import MlflowClient

    from raytune_fl.ablation.sources import variant_source
    from raytune_fl.config import ConfigError, SearchSpace
    from raytune_fl.tracking.store import latest_study
    from tests.support import tiny_space

    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    experiment = client.create_experiment("tiny")

    def parent(status: str, **tags: str) -> str:
        run = client.create_run(experiment, tags={"stage": "tune", "variant": "full", "method": "univarfl", **tags})
        client.log_metric(run.info.run_id, "best_val_acc", 0.5)
        client.set_tag(run.info.run_id, "best.mu", "0.2")
        client.set_terminated(run.info.run_id, status)
        return run.info.run_id

    finished = parent("FINISHED")
    assert latest_study(client, experiment, "full").run_id == finished
    command = "raytune-fl tune --space s.yaml --resume"
    cut = parent("KILLED", interrupted="true", resume_command=command)
    study = latest_study(client, experiment, "full")
    assert (study.run_id, study.stopped, study.resume_command) == (cut, "interrupted", command)
    with pytest.raises(ConfigError) as refused:
        variant_source(SearchSpace.model_validate(tiny_space()), "full", study)
    message = str(refused.value)
    assert message.startswith(f"variants.full: its newest tune study (MLflow run {cut}) was interrupted")
    assert f"finish it with: {command}" in message and "--ignore-studies" in message

    client.set_terminated(parent("FAILED"), "FAILED")  # a failed study is passed over, as before
    assert latest_study(client, experiment, "full").run_id == cut


def test_a_resume_prints_no_traceback_for_a_checkpoint_already_deleted(tmp_path):
    """After a kill, the restored experiment may list a checkpoint the killed run had already deleted; Tune's second
    deletion (Ray's own _delete_fs_path) fails with FileNotFoundError, which Tune logs as an ERROR with a traceback:
    left out. Any other error in handling a checkpoint still shows."""
    import logging

    import pyarrow.fs
    from ray.train._internal.storage import _delete_fs_path

    from raytune_fl.tune.tuner import quiet_tune

    quiet_tune()
    logger = logging.getLogger("ray.tune.execution.tune_controller")
    shown: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = shown.append  # Ray's loggers do not propagate to the root logger (pytest's caplog)
    logger.addHandler(handler)
    try:
        for deletion in (lambda: _delete_fs_path(pyarrow.fs.LocalFileSystem(), str(tmp_path / "gone")), _disk_full):
            try:
                deletion()
            except Exception:  # as tune_controller.py handles a trial's save
                logger.exception("Trial %s: Error handling checkpoint %s", "t1", "checkpoint_000001")
    finally:
        logger.removeHandler(handler)
    assert [r.exc_info[0] for r in shown] == [OSError]


def _disk_full() -> None:
    raise OSError("disk full")
