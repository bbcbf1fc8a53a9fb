"""The front door: README.md stays short with its two commands on the first screen, and every relative link in
README.md and docs/*.md points at a file or folder that exists (a moved or renamed file breaks the build, not
the reader)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); an optional "title" after the target is ignored.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def links(page):
    # Examples in code blocks are not links; blanking them keeps the line numbers right.
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # nor are inline code spans
    for line_no, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            yield line_no, target


def test_readme_is_short_with_both_commands_on_the_first_screen():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the manual belongs in docs/"
    first_screen = "\n".join(lines[:40])
    assert "make demo" in first_screen and "make test" in first_screen


def test_docs_exist():
    assert len(PAGES) > 5, "docs/ should hold the guides"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for line_no, target in links(page):
        if re.match(r"(https?|mailto):", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(f"{page.relative_to(ROOT)}: line {line_no}: {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)
