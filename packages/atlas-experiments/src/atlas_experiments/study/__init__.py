"""The claims study: the pre-registered claims (`config/study/claims.yaml`, loaded by `claims`) and the decision
rule that turns seed-paired runs into a verdict per claim (`decision`); docs/study.md of this package."""
