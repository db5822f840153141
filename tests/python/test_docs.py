"""The repository's map stays inside the repository, and every Go package
says what it is (``go doc ./<package>``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_stay_in_the_repository(doc):
    links = re.findall(r"\]\(([^)\s]+)\)", doc.read_text())
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue  # a web address or an anchor
        target = (doc.parent / link.split("#")[0]).resolve()
        assert target.is_relative_to(REPO), f"{doc.name} links {link}, outside the repository"
        assert target.exists(), f"{doc.name} links {link}, which does not exist"


def test_every_go_package_has_a_doc_comment():
    go = shutil.which("go")
    if go is None:
        pytest.skip("no go command on PATH")
    out = subprocess.run([go, "list", "-f", "{{.ImportPath}}\t{{.Doc}}", "./..."], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    rows = [line.split("\t", 1) for line in out.splitlines()]
    assert len(rows) > 10
    undocumented = [path for path, doc in rows if not doc.strip()]
    assert not undocumented, f"Go packages without a package comment (add a doc.go): {undocumented}"
