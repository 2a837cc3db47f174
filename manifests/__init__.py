"""Kubernetes objects as plain data builders: nothing they reach imports CDK
(tests/test_layout.py), so the CLI renders them without a synth."""
