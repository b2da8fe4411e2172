"""Shared fixtures: the `agui` CLI binary, the generated corpus, store URLs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, List

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


def _binary(name: str) -> Path:
    explicit = os.environ.get("AGUI_BIN" if name == "agui" else "AGUI_GEN_BIN")
    if explicit:
        return Path(explicit)
    return _target_dir() / "debug" / name


@pytest.fixture(scope="session")
def agui_bin() -> Path:
    path = _binary("agui")
    if not path.exists():
        subprocess.run(["cargo", "build", "--locked", "-p", "agui-cli"], cwd=ROOT, check=True)
    return path


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> List[Path]:
    """Every generator profile (and invalid streams, chunk soups) for a few
    seeds, written by `agui-gen` (crates/agui-testkit)."""
    seeds = os.environ.get("AGUI_PY_CORPUS_SEEDS", "3")
    gen = _binary("agui-gen")
    if not gen.exists():
        subprocess.run(["cargo", "build", "--locked", "-p", "agui-testkit", "--bins"], cwd=ROOT, check=True)
    out = tmp_path_factory.mktemp("corpus")
    subprocess.run([str(gen), "corpus", str(out), seeds], check=True, capture_output=True)
    files = sorted(out.glob("*.ndjson"))
    assert files, "agui-gen wrote no stream"
    return files


def postgres_url() -> str:
    return os.environ.get("AGUI_TEST_POSTGRES_URL", "")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL store URL on a schema of its own, dropped afterwards."""
    base = postgres_url()
    if not base:
        pytest.skip("AGUI_TEST_POSTGRES_URL is not set (scripts/test sets it)")
    import uuid

    schema = "agui_py_" + uuid.uuid4().hex[:12]
    psql = shutil.which("psql")
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}schema={schema}"
    if psql:
        subprocess.run([psql, base, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                       capture_output=True)
