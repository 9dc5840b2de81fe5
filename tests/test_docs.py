"""The docs site builds with warnings as errors, and the README's commands name real files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT


def test_docs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_readme_blocks_match_ci():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for line in ('pip install -e ".[all]"', "fairalloc solve examples/psdsf-fig1.yaml -m drfh",
                 "python -m pytest"):
        assert line in readme and line in ci
    assert (ROOT / "examples" / "psdsf-fig1.yaml").exists()
