"""Google service-account files made in the test: a generated RSA key, a token endpoint on loopback."""

from __future__ import annotations

import functools
from pathlib import Path

import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

EMAIL = "turnout-test@sim-project.iam.gserviceaccount.com"


@functools.cache
def private_key_pem() -> str:
    """One generated 2048-bit RSA key per test session, PKCS#8 PEM (what Google's key files hold)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def service_account_file(directory: Path, token_uri: str, *, name: str = "service-account.json") -> Path:
    """A service-account key file whose ``token_uri`` is ``token_uri`` (google-auth refreshes against it)."""
    path = directory / name
    path.write_bytes(
        orjson.dumps(
            {
                "type": "service_account",
                "project_id": "sim-project",
                "private_key_id": "sim-key-0001",
                "private_key": private_key_pem(),
                "client_email": EMAIL,
                "client_id": "100000000000000000001",
                "token_uri": token_uri,
            }
        )
    )
    return path
