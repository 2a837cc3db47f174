"""Kubernetes objects as plain data builders (no CDK import)."""
