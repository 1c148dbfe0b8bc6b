"""The source a run records: the vidtx checkout it runs from (commit, branch, remote) and the `vidtx`
command, in the tags MLflow's UI shows as a run's Source and Version.

MLflow sets them itself only for runs it starts (`mlflow.start_run`, `mlflow run`); vidtx creates its
runs with the client, so it sets them as an MLflow Project run has them. Nothing in them is a secret: a
remote's URL is recorded without the credentials it may carry.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mlflow.entities import SourceType
from mlflow.utils.mlflow_tags import (
    MLFLOW_GIT_BRANCH,
    MLFLOW_GIT_COMMIT,
    MLFLOW_GIT_REPO_URL,
    MLFLOW_PROJECT_ENTRY_POINT,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
)


def _git(*args: str) -> str | None:
    """What `git ARGS` prints in the vidtx checkout, or None (not a checkout, no git, an error)."""
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def git_commit() -> str | None:
    """The commit of the vidtx checkout, when it runs from one."""
    return _git("rev-parse", "HEAD")


def without_credentials(url: str) -> str:
    """A remote's URL without the user and password (or token) a `scheme://user:password@host/...`
    URL carries: a run's tags are shown to everyone who reads the store. An scp-like SSH remote
    (`git@host:org/repo.git`) names an account, not a secret, and is kept as it is."""
    parts = urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def git_remote_url() -> str | None:
    """The URL of the checkout's remote `origin` (else of its first remote), without credentials."""
    remotes = (_git("remote") or "").split()
    if not remotes:
        return None
    url = _git("remote", "get-url", "origin" if "origin" in remotes else remotes[0])
    return without_credentials(url) if url else None


def source_tags(entry_point: str) -> dict[str, str]:
    """The tags MLflow's UI reads a run's Source and Version from, as an MLflow Project run has them
    (`mlflow run`): type PROJECT, the `vidtx` command that ran it as the entry point, and as the source
    the checkout's remote (else the checkout's folder, else `vidtx` when it runs from an installed
    package), with the commit, the branch and the remote. The UI then shows e.g. `vidtx:train` (a
    link to the repository where the remote is on GitHub, GitLab or Bitbucket) and the commit."""
    commit, remote = git_commit(), git_remote_url()
    checkout = _git("rev-parse", "--show-toplevel") if commit else None
    tags = {
        MLFLOW_SOURCE_TYPE: SourceType.to_string(SourceType.PROJECT),
        MLFLOW_SOURCE_NAME: remote or (Path(checkout).as_uri() if checkout else "vidtx"),
        MLFLOW_PROJECT_ENTRY_POINT: entry_point,
    }
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
        if branch := _git("symbolic-ref", "--short", "-q", "HEAD"):  # none on a detached HEAD
            tags[MLFLOW_GIT_BRANCH] = branch
        if remote:
            tags[MLFLOW_GIT_REPO_URL] = remote
    return tags
