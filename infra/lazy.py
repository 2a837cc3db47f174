"""Modules imported on first use. The add-ons import aws_cdk (and so start jsii) only when
they build something: config validation (`hyperpod-cdk validate`, and app.py before it
composes anything) reads their requirements without it."""

from __future__ import annotations

import importlib
from types import ModuleType


class _LazyModule:
    def __init__(self, name: str):
        self.__dict__["_name"] = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self.__dict__["_name"]), attr)


def module(name: str) -> ModuleType:
    return _LazyModule(name)  # type: ignore[return-value]
