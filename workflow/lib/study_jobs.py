"""The claims study's jobs as the workflow sees them: the registered plan's job names, the language-model
protocols and the one prepared corpus they train on, and the command-line arguments every study rule shares.

Plain Python, no snakemake (tests/test_run_configs.py imports it); the study itself is `atlas_experiments.study`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StudyJobs:
    settings: Mapping[str, Any]  # the config's `study` section (config/study.yaml)
    root: str  # where job results go: <results>/study
    results: str
    jobs: Sequence[str]  # "<protocol>/<arm>/seed<n>" of every planned job
    lm_protocols: Mapping[str, str]  # protocol name -> the dataset (a `data` key) it trains on

    @classmethod
    def plan(cls, settings: Mapping[str, Any], repo: Path, results: str) -> StudyJobs:
        from atlas_experiments.study.claims import load_claims
        from atlas_experiments.study.plan import plan_jobs

        planned = plan_jobs(load_claims(repo / settings["claims"]), settings["scale"].split(","))
        lm = {job.protocol.name: job.protocol.args["data"] for job in planned if job.protocol.task == "lm"}
        if len(set(lm.values())) > 1:
            raise ValueError(f"study: the lm protocols use several corpora {sorted(set(lm.values()))}; one at a time")
        return cls(settings, f"{results}/study", results, tuple(job.name for job in planned), lm)

    @property
    def args(self) -> str:
        """The arguments every `atlas study` command of the rules takes."""
        s = self.settings
        return f"--claims {s['claims']} --scale {s['scale']} --root {self.root}"

    @property
    def data(self) -> str | None:
        return next(iter(self.lm_protocols.values()), None)

    @property
    def manifest(self) -> list[str]:
        """The prepared corpus the language-model protocols need (none without such a protocol)."""
        return [f"{self.results}/data/{self.data}/manifest.json"] if self.data else []

    @property
    def data_arg(self) -> str:
        return f"--data {self.results}/data/{self.data}" if self.data else ""

    def job_inputs(self, protocol: str) -> dict[str, str]:
        """What one job reads: the plan, the parent record and, for a language-model protocol, its corpus."""
        inputs = {"plan": f"{self.root}/plan.json", "parent": f"{self.root}/parent.json"}
        if protocol in self.lm_protocols:
            inputs["manifest"] = self.manifest[0]
        return inputs

    def results_files(self) -> list[str]:
        return [f"{self.root}/{job}.json" for job in self.jobs]
