"""The operator tools, the top floor: `hyperpod-cdk` (validate, render-job, team, review,
topology, preflight, upgrade-plan, accept, dashboards) and what they are built from (the
review's readers of a synthesized assembly, the preflight checks, accept's readers of NCCL and
DCGM). Nothing in infra/, stacks/, addons/, manifests/ or training/ imports it
(tests/test_layout.py)."""
