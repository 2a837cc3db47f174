"""The operator tools: `hyperpod-cdk` (validate, render-job, review, topology, preflight) and
what the review is built from. Nothing in infra/, stacks/, addons/ or manifests/ imports it."""
