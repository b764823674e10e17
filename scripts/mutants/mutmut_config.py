"""mutmut hook, copied to the root of the mutation copy by scripts/mutants/run.py.

The driver passes, per file, the lines whose mutants are out of scope (exception and log message text, and for
train/loop.py everything outside the resume path) in ATLAS_MUTANTS_SKIP; their mutants are reported as skipped
instead of costing a test run each.
"""

import json
import os

_SKIP = {name: set(lines) for name, lines in json.loads(os.environ.get("ATLAS_MUTANTS_SKIP", "{}")).items()}


def pre_mutation(context):
    if context.mutation_id.line_number + 1 in _SKIP.get(context.filename, ()):
        context.skip = True
