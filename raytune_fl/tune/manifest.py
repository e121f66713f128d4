"""The study manifest: which variant studies a `tune.py` run started, where, and how they ended.

Written to `<storage>/<space name>.study.json` (beside the Tune results: a directory or a bucket prefix) before
each variant starts, after it ends and when a signal cuts it, so that `tune.py ... --resume` after a stopped or killed
driver knows what finished (skipped), what was running (restored with Tuner.restore, same MLflow runs and Optuna
study) and what never started (run afresh). A variant cut by Ctrl-C or SIGTERM never gets an outcome. Each started
variant's entry names its Optuna study and storage (password masked), if it has one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from raytune_fl.config import ConfigError, SearchSpace
from raytune_fl.runtime.storage import Storage, resolve_storage
from raytune_fl.tune.outcome import FrontTrial, VariantOutcome
from raytune_fl.tune.study import VariantRun


def space_digest(space: SearchSpace) -> str:
    """Resuming needs the same study: same file, same overrides (the searcher and seeds depend on them)."""
    text = json.dumps(space.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class StudyManifest:
    def __init__(
        self, storage: Storage, path: str, digest: str, mlflow_uri: str, variants: dict[str, dict[str, Any]]
    ) -> None:
        self.storage, self.path = storage, path  # `path` is within the storage's filesystem
        self.digest, self.mlflow_uri, self.variants = digest, mlflow_uri, variants

    @staticmethod
    def location_name(space: SearchSpace) -> str:
        return f"{space.name}.study.json"

    @classmethod
    def location(cls, storage: Storage, space: SearchSpace) -> str:
        return storage.join(cls.location_name(space))

    @classmethod
    def start(cls, storage: str | Path | Storage, space: SearchSpace, mlflow_uri: str) -> StudyManifest:
        storage = resolve_storage(storage)
        path = cls.location(storage, space)
        if storage.is_file(path):  # an earlier study of this space: kept under its start time, resumable by hand
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(storage.mtime(path)))
            storage.move(path, storage.join(f"{space.name}.study.{stamp}.json"))
        manifest = cls(storage, path, space_digest(space), mlflow_uri, {})
        manifest.save()
        return manifest

    @classmethod
    def load(cls, storage: str | Path | Storage, space: SearchSpace, mlflow_uri: str) -> StudyManifest:
        storage = resolve_storage(storage)
        path = cls.location(storage, space)
        if not storage.is_file(path):
            name = path.rsplit("/", 1)[-1]
            raise ConfigError(f"--resume: no study of {space.name!r} to resume under {storage.uri} (no {name})")
        try:
            data = json.loads(storage.read_text(path))
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"--resume: cannot read {storage.show(path)}: {error}") from None
        if data.get("digest") != space_digest(space):
            raise ConfigError(
                f"--resume: {space.name!r} changed since the study started (file or --set/--rounds/--seed "
                "overrides differ); resume with the same command line, or start afresh without --resume"
            )
        if data.get("mlflow_uri") != mlflow_uri:
            raise ConfigError(
                f"--mlflow-uri: the study logged to {data.get('mlflow_uri')}; resume it with the same tracking URI"
            )
        return cls(storage, path, data["digest"], data["mlflow_uri"], data.get("variants", {}))

    def save(self) -> None:
        data = {"digest": self.digest, "mlflow_uri": self.mlflow_uri, "variants": self.variants}
        self.storage.write_text(self.path, json.dumps(data, indent=2, default=str))  # whole or not at all

    def started(self, variant: str, run: VariantRun) -> None:
        self.variants[variant] = {**dataclasses.asdict(run), "outcome": None}
        self.save()

    def finished(self, variant: str, outcome: VariantOutcome) -> None:
        self.variants.setdefault(variant, {})["outcome"] = dataclasses.asdict(outcome)
        self.save()

    def interrupted(self, variant: str, by: str) -> None:
        """`variant` was cut by a signal (`by`: Ctrl-C, SIGTERM): it has no outcome, and --resume continues it.
        A variant that never started has nothing to record: --resume starts it."""
        entry = self.variants.get(variant)
        if entry is None or entry.get("outcome"):
            return
        entry["interrupted"] = {"by": by, "at": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.save()

    def refused(self, variant: str, why: str) -> None:
        """`variant`'s study was stopped by a configuration error (a trial's, tune/refusal.py): no outcome, its
        parent FAILED. --resume starts it afresh: the same settings resumed would fail the same way."""
        entry = self.variants.get(variant)
        if entry is None or entry.get("outcome"):
            return
        first = (why.strip().splitlines() or [""])[0][:300]
        entry["refused"] = {"why": first, "at": time.strftime("%Y-%m-%d %H:%M:%S")}
        self.save()

    def state(self, variant: str) -> str:
        """What --resume does with `variant`: 'finished' (kept), 'interrupted' (cut by a signal: its trials resume
        from their checkpoints), 'killed' (started, its driver gone without a word: the same), 'refused' (a
        configuration error stopped it: started afresh), or 'new'."""
        entry = self.variants.get(variant)
        if not entry:
            return "new"
        if entry.get("outcome"):
            return "finished"
        if entry.get("refused"):
            return "refused"
        return "interrupted" if entry.get("interrupted") else "killed"

    def outcome(self, variant: str) -> VariantOutcome | None:
        saved = self.variants.get(variant, {}).get("outcome")
        if not saved:
            return None
        front = [FrontTrial(**trial) for trial in saved.get("front", [])]  # a record from before fronts: none
        return VariantOutcome(**{**saved, "front": front})

    def run(self, variant: str) -> VariantRun | None:
        entry = self.variants.get(variant)
        if not entry:
            return None
        return VariantRun(
            entry["experiment_path"], entry["parent_run_id"], entry.get("optuna_study"), entry.get("optuna_storage")
        )

    def check_optuna_storage(self, shown: str) -> None:
        """A resume writes to the Optuna storage its interrupted variants started in (`shown`: the URL as
        optuna_storage.masked prints it)."""
        for name, entry in self.variants.items():
            recorded = entry.get("optuna_storage")
            if recorded and not entry.get("outcome") and recorded != shown:
                raise ConfigError(
                    f"--optuna-storage: variant {name!r} of the study keeps its Optuna study {entry['optuna_study']!r} "
                    f"in {recorded}, not {shown}; resume with --optuna-storage {recorded}"
                )
