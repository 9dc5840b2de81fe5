"""docs/tutorial.md runs as a doctest, and the mechanism it shows is the shipped example file."""

from __future__ import annotations

import doctest
import re

from conftest import ROOT

TUTORIAL = ROOT / "docs" / "tutorial.md"
EXAMPLE = ROOT / "examples" / "user_mechanism.py"


def test_tutorial_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    res = doctest.testfile(str(TUTORIAL), module_relative=False,
                           optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 20


def test_tutorial_shows_the_example_file_and_it_is_short():
    blocks = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.S)
    text = EXAMPLE.read_text()
    assert text in blocks
    assert len(text.splitlines()) < 30


def test_tutorial_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    assert "tutorial.md" in nav and "customize.md" in nav
