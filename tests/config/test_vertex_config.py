"""Vertex AI profiles in the configuration: required keys, the gcp extra, key paths in every error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from turnout.config import load_config_dict
from turnout.core.errors import ConfigError


def load(**profile: Any) -> Any:
    return load_config_dict({"providers": {"models": {"vertex": {"main": profile}}}}, env={})


def test_a_complete_profile_loads_without_a_key() -> None:
    """A Vertex profile needs no api_key: its credential comes from Application Default Credentials."""
    cfg = load(project="my-project", model="claude-sonnet-4-5")
    prof = cfg.profiles()["vertex.main"]
    assert (prof.project, prof.region, prof.credentials_file) == ("my-project", None, None)


def test_project_is_required() -> None:
    """Without a project the URL cannot be built: a config error at its key path."""
    with pytest.raises(ConfigError) as info:
        load(model="claude-sonnet-4-5")
    assert info.value.path == "providers.models.vertex.main.project"


def test_an_unpinned_profile_names_its_publisher() -> None:
    """With no model to tell Claude from Gemini, ``publisher`` must say which wire the profile speaks."""
    with pytest.raises(ConfigError) as info:
        load(project="p")
    assert info.value.path == "providers.models.vertex.main.publisher"
    assert load(project="p", publisher="google").profiles()["vertex.main"].publisher == "google"


def test_a_missing_credentials_file_is_a_config_error(tmp_path: Path) -> None:
    """``credentials_file`` must exist when the config loads (its path is not echoed as a secret would be)."""
    with pytest.raises(ConfigError) as info:
        load(project="p", model="gemini-2.5-pro", credentials_file=str(tmp_path / "absent.json"))
    assert info.value.path == "providers.models.vertex.main.credentials_file"


@pytest.mark.parametrize("region", ["US-EAST5", "us east5", "../x", ""])
def test_a_malformed_region_is_refused(region: str) -> None:
    """A region becomes part of a host name and a URL path: only lowercase letters, digits and dashes."""
    with pytest.raises(ConfigError) as info:
        load(project="p", model="gemini-2.5-pro", region=region)
    assert info.value.path == "providers.models.vertex.main.region"


def test_without_the_gcp_extra_the_profile_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """When google-auth is not installed, the config error says which extra to install."""
    monkeypatch.setitem(sys.modules, "google.auth", None)  # what find_spec reports for a missing module
    with pytest.raises(ConfigError) as info:
        load(project="p", model="claude-sonnet-4-5")
    assert info.value.code == "missing_extra" and info.value.path == "providers.models.vertex.main"
    assert "turnout[gcp]" in str(info.value)
