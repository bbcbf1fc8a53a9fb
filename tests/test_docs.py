"""The front door: README.md stays short with its two commands on the first screen; every relative link in
README.md and docs/*.md points at a file or folder that exists, and at a heading of it where it names one (a moved
or renamed file or section breaks the build, not the reader); every figure on the benchmarks page names the commit
it was measured at."""

import functools
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


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation but hyphens and underscores dropped,
    spaces as hyphens, a repeated one suffixed -1, -2... (read once per page, however many links name it)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
    return frozenset(found)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_their_anchors_resolve(page):
    broken = []
    for line_no, target in links(page):
        if re.match(r"(https?|mailto):", target):
            continue
        path, _, anchor = target.partition("#")
        linked = page.parent / path if path else page
        if not linked.exists():
            broken.append(f"{page.relative_to(ROOT)}: line {line_no}: {target}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.resolve()):
            broken.append(
                f"{page.relative_to(ROOT)}: line {line_no}: {target}: no such heading in {path or 'the page'}"
            )
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_anchor_rule_is_githubs():
    page = ROOT / "docs" / "benchmarks.md"
    found = anchors(page)
    assert {"set-up-demo-suite", "on-a-gpu-benchesgpu_smokepy", "the-judge-off-the-critical-path"} <= found


COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def test_every_figure_on_the_benchmarks_page_names_a_commit():
    """A table with a commit column names one in every row; any other table names it in the paragraph before it."""
    lines = FENCE.sub("", (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")).splitlines()
    missing, tables = [], 0
    for i, line in enumerate(lines):
        if not line.startswith("|") or (i and lines[i - 1].startswith("|")):
            continue
        tables += 1
        header = [cell.strip().lower() for cell in line.strip("|").split("|")]
        rows = []
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            rows.append(row)
        if header[-1] == "commit":
            missing += [row for row in rows if not COMMIT.search(row.rsplit("|", 2)[-2])]
        else:
            before = "\n".join(lines[max(0, i - 8) : i]).split("\n\n")[-1]
            if not COMMIT.search(before):
                missing.append(f"the table at line {i + 1} (its paragraph names no commit)")
    assert tables >= 10
    assert not missing, "figures without a commit:\n" + "\n".join(missing)
