"""The review of a synthesized assembly (`hyperpod-cdk review`, `make synth`), one module per part:
`report` (every section as data, review-<env>.md/.json/.sarif, the verdict), `assembly` (the
assembly's stacks, exports and validation report), `changes` (what a change does against a
baseline, its callouts and `cdk diff`), `replacement` (what a change replaces: create-only
properties, and what each instance-group property does to running nodes), `deltas` (each
section as a delta), `people` (teams, access, admission), `cluster_wide` (chart, add-ons, the
cluster's modes, its Kubernetes version and network), `config_diff` (the config fields a change
touches), `diff_text` (cdk diff folded), `cost` with `prices`, `exposure`, `iam_audit`,
`deploy_plan` and `sarif`. Import the part you need: `from cli.review import report`.
"""
