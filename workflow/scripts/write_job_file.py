"""`script:` of the rules that write a job's settings file (train_config, cost_jobs): the resolved settings arrive
as `snakemake.params.text` (passed by Snakemake, never through a shell string) and go to the rule's output
atomically (workflow/lib/job_files.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from job_files import write_job_file  # noqa: E402  (the workflow's own module, not a package)

snakemake = globals()["snakemake"]  # injected by Snakemake's script preamble
write_job_file(snakemake.output[0], snakemake.params.text, log=snakemake.log[0])
