"""The docs' worked examples are the output of the real code (scripts/gen_docs.py)."""
from __future__ import annotations

import importlib.util
import re
from repo_paths import REPO

ROOT = REPO


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stage_pages_exist_with_a_generated_example():
    gen = _gen_docs()
    for page in ("parser.md", "passes.md", "emitters.md", "runtime.md"):
        text = (ROOT / "docs" / page).read_text()
        names = [n for n, (p, _) in gen.EXAMPLES.items() if p == page]
        assert names, f"{page} has no worked example"
        for name in names:
            assert f"<!-- BEGIN GENERATED: {name} -->\n```python" in text


def test_docs_are_in_sync_with_the_code():
    gen = _gen_docs()
    stale = [page for page, (old, new) in gen.pages().items() if old != new]
    assert not stale, f"out of date: {stale}; run python scripts/gen_docs.py and review the diff"


def test_regenerate_replaces_only_named_blocks():
    gen = _gen_docs()
    text = ("intro\n<!-- BEGIN GENERATED: a -->\nold a\n<!-- END GENERATED: a -->\n"
            "<!-- BEGIN GENERATED: b -->\nold b\n<!-- END GENERATED: b -->\n")
    out = gen.regenerate(text, {"a": "new a\n"})
    assert "new a\n<!-- END GENERATED: a -->" in out and "old a" not in out and "old b" in out
    block = gen.render_block("\n    print(1)\n", "1  \n")
    assert block == "```python\nprint(1)\n```\n\nOutput:\n\n```text\n1\n```\n"


def test_relative_links_resolve():
    for page in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_readme_picture_is_what_the_tool_draws(tmp_path):
    spec = importlib.util.spec_from_file_location("render_readme_graph", ROOT / "scripts" / "render_readme_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "g.svg"
    assert module.main(["-o", str(out)]) == 0
    committed = ROOT / "docs" / "lstm_cell_fusion.svg"
    assert out.read_text() == committed.read_text(), "run python scripts/render_readme_graph.py"
