"""Shared fixtures. Tests needing torch are marked `torch` and skip themselves when it is absent."""

import pytest
from typer.testing import CliRunner


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()
