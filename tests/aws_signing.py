"""botocore's own SigV4 signer, as the reference the adapter's signer and the simulator's verifier are held to."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from unittest import mock

import botocore.auth
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials

SIGNED = ("Content-Type", "X-Amz-Content-SHA256", "X-Amz-Date", "X-Amz-Security-Token", "Authorization")


def botocore_sign(
    credentials: ReadOnlyCredentials,
    region: str,
    url: str,
    body: bytes,
    *,
    service: str = "bedrock",
    content_type: str = "application/json",
    now: float | None = None,
) -> dict[str, str]:
    """The headers botocore's ``SigV4Auth`` adds to a ``POST`` of ``body`` to ``url`` (at ``now``, if given).

    botocore works the ``Host`` out of the URL and the body's hash out of the body itself, as it does for its own
    ``bedrock-runtime`` client (which sends no ``X-Amz-Content-SHA256``).
    """
    headers = {"Content-Type": content_type}
    request = AWSRequest(method="POST", url=url, data=body, headers=headers)
    auth = SigV4Auth(credentials, service, region)
    if now is None:
        auth.add_auth(request)
    else:
        with _clock_at(datetime.fromtimestamp(now, UTC).replace(tzinfo=None)):
            auth.add_auth(request)
    return {name: request.headers[name] for name in SIGNED if name in request.headers}


def _clock_at(moment: datetime) -> Any:
    """Botocore's signing clock stopped at ``moment``: ``get_current_datetime`` from botocore 1.35 on, before that
    the ``datetime.datetime.utcnow()`` its ``auth`` module reads.
    """
    if hasattr(botocore.auth, "get_current_datetime"):
        return mock.patch("botocore.auth.get_current_datetime", return_value=moment)

    class _Stopped(datetime):
        @classmethod
        def utcnow(cls) -> datetime:  # type: ignore[override]
            return moment

    return mock.patch("botocore.auth.datetime", SimpleNamespace(datetime=_Stopped))
