"""Ctrl-C and SIGTERM (tune/interrupt.py): real signals to this process, and a real Tune run they stop gracefully
and `Tuner.restore` continues to the uninterrupted result."""

from __future__ import annotations

import os
import signal

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
    for result in results:  # the cut trial went on from its last checkpoint, not from the start (a step whose
        steps = result.metrics_dataframe["step"].tolist()  # checkpoint Tune had not registered is run again)
        assert sorted(set(steps)) == list(range(1, ITERATIONS + 1)) and len(steps) <= ITERATIONS + 1
