"""Google service-account files made in the test: a generated RSA key, a token endpoint on loopback."""

from __future__ import annotations

import functools
from pathlib import Path

import orjson

from turnout.sim.google import service_account_info


@functools.cache
def _key_file() -> tuple[tuple[str, str], ...]:
    """One service-account key per test session (generating an RSA key takes a while)."""
    return tuple(service_account_info("http://127.0.0.1:9/unused").items())


def service_account_file(directory: Path, token_uri: str, *, name: str = "service-account.json") -> Path:
    """A service-account key file whose ``token_uri`` is ``token_uri`` (google-auth refreshes against it)."""
    path = directory / name
    path.write_bytes(orjson.dumps({**dict(_key_file()), "token_uri": token_uri}))
    return path
