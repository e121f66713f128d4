import time
from pathlib import Path
from tests.system.test_slurm import slurm, _submit, _follow  # noqa
def test_smoke(slurm, tmp_path):
    t = time.time()
    log = tmp_path / "job.log"
    job = _submit(slurm, tmp_path, log)
    state, seen = _follow(slurm, job, log, 240)
    print(state, time.time() - t)
    print(log.read_text())
    assert 0
