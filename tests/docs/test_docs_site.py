"""The guides build as a site and cannot go stale: mkdocs in strict mode (every link and anchor
resolves), every example of README.md and docs/ is named and run or checked by a test, every file
and benchmark the pages name exists, and the README stays short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.docs import DOCS, FENCE, MARKED, README, ROOT, examples, pages

TESTS = ROOT / "tests"


def test_mkdocs_builds_the_guides_in_strict_mode(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert built >= {f"{p.stem}/index.html" for p in DOCS.glob("*.md") if p.stem != "index"} | {"index.html"}


def test_the_strict_build_fails_on_a_broken_anchor(tmp_path: Path) -> None:
    """The check above can fail: a link to a missing anchor aborts the strict build."""
    broken = tmp_path / "docs"
    broken.mkdir()
    for page in DOCS.glob("*.md"):
        (broken / page.name).write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    (broken / "img").symlink_to(DOCS / "img")
    (broken / "changelog.md").write_text("# Changelog\n\n[gone](deployment.md#no-such-section)\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("docs_dir: docs", f"docs_dir: {broken}")
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=240)
    assert done.returncode != 0 and "no-such-section" in done.stdout + done.stderr


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_block_is_a_named_example(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    unnamed = len(FENCE.findall(text)) - len(MARKED.findall(text))
    assert unnamed == 0, f"{page.name}: {unnamed} fenced block(s) without '<!-- example: ID -->' before them"


def test_every_example_is_used_by_a_test() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8") for p in TESTS.rglob("*.py")
                        if p.name not in {"docs.py", Path(__file__).name})
    used = set(re.findall(r"""example\(\s*["']([\w-]+)["']""", sources))
    unused = sorted(set(examples()) - used)
    assert not unused, f"examples no test runs or checks: {unused}"
    assert used <= set(examples()), f"tests ask for examples that no page has: {sorted(used - set(examples()))}"


def test_named_files_and_benchmarks_exist() -> None:
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"`((?:deploy|config|tests|benchmarks|daemon|operators|docs)/[\w@./-]*\w)`", text):
            assert (ROOT / path).exists(), f"{page.name} names {path}, which does not exist"
        for script in re.findall(r"(benchmarks/\w+\.py)", text):
            assert (ROOT / script).is_file(), f"{page.name} names {script}"
        for name in re.findall(r"`([\w-]+\.toml)`", text):
            known = {p.name for p in (ROOT / "config" / "examples").glob("*.toml")} | {
                p.name for p in (ROOT / "deploy").rglob("*.toml")} | {"daemon.toml", "pyproject.toml"}
            assert name in known, f"{page.name} names {name}, which is no example config"


def test_readme_links_resolve_and_nothing_cites_outside_the_repository() -> None:
    readme = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links {target}"
    for page in pages():
        assert "../shared" not in page.read_text(encoding="utf-8"), page.name


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300
    assert [e.id for e in examples().values() if e.page == README][:2] == ["demo-command", "test-command"]


def resolves(name: str) -> bool:
    """Whether ``ddflow.a.b`` (or ``ddflow.a:b``) names an importable module or an attribute of one."""
    import importlib

    parts = name.replace(":", ".").split(".")
    for i in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_python_name_the_pages_give_exists() -> None:
    """Prose names modules and functions too (`ddflow.daemon.testing`, `ddflow.config.dataflows:reachability`):
    a module moved or renamed without its guide fails here."""
    assert resolves("ddflow.config.dataflows:reachability") and not resolves("ddflow.daemon.no_such_module")
    stale = [f"{page.name}: {name}" for page in pages() if page.name != "changelog.md"  # names what was
             for name in sorted(set(re.findall(r"`(ddflow\.(?:operators|daemon|config)(?:[.:]\w+)*)",
                                               page.read_text(encoding="utf-8"))))
             if not resolves(name)]
    assert not stale, stale


def test_the_changelog_s_moved_import_paths_are_gone_and_their_new_ones_import() -> None:
    rows = re.findall(r"^\| (`ddflow[^|]*) \| ([^|]*`ddflow[^|]*) \|$", (DOCS / "changelog.md").read_text(), flags=re.M)
    assert len(rows) >= 10
    for was, now in rows:
        old = re.match(r"`(ddflow[\w.]*)`", was).group(1)
        if "(" not in was:  # a "was" with a note names a package that now holds the moved module
            assert not resolves(old), f"{old} still imports: the changelog says it moved to {now}"
        new = re.findall(r"`(ddflow[\w.:]*)`", now)
        assert new and all(resolves(name) for name in new), now
        prefix = new[0].rsplit(".", 1)[0]
        assert all(resolves(f"{prefix}{short}") for short in re.findall(r"`(\.\w+)`", now)), now
