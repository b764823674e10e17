"""The commit a study result and report name: dirty only for changes outside the report's own directory."""

from __future__ import annotations

import subprocess

import pytest

from atlas_experiments.provenance import commit_label as _commit
from atlas_experiments.provenance import git_state


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.org")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "verdicts.md").write_text("old\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_clean_checkout_names_the_bare_commit(repo):
    assert "local changes" not in _commit(repo / "reports")


def test_deleted_report_does_not_mark_the_commit_dirty(repo):
    (repo / "reports" / "verdicts.md").unlink()
    assert "local changes" not in _commit(repo / "reports")
    assert _commit().endswith(" + local changes")


def test_change_outside_the_report_marks_it_dirty(repo):
    (repo / "code.py").write_text("x = 2\n")
    assert _commit(repo / "reports").endswith(" + local changes")


def test_outside_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert _commit(tmp_path).startswith("unknown")


def test_git_state_ignores_the_same_directory(repo):
    (repo / "reports" / "verdicts.md").write_text("new\n")
    commit, dirty = git_state(repo)
    assert len(commit) == 40 and dirty
    assert git_state(repo, ignore=repo / "reports") == (commit, False)
    assert _commit(repo / "reports", cwd=repo) == _commit(repo / "reports")
