"""What the stacks build on: the config model (infra.config: cdk.json context -> one validated
Settings), the rules that span fields (admission, identity, prerequisites, grammars), naming,
the instance catalogue, versions, the chart's data (hyperpod_chart) and the tool that prepares
the chart (chart), the tool that makes and checks the dependency locks (lock), the compliance
packs, and the readiness gates with their limits and their Lambda handlers (handlers/). It
imports nothing from the floors above it (tests/test_layout.py).
"""
