"""The docstring examples are executable specification."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["fairalloc.instance", "fairalloc.result", "fairalloc.api", "fairalloc.metrics"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    res = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted > 0
