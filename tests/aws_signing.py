"""botocore's own SigV4 signer, as the reference the adapter's signer and the simulator's verifier are held to."""

from __future__ import annotations

from datetime import UTC, datetime
from unittest import mock

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
        moment = datetime.fromtimestamp(now, UTC).replace(tzinfo=None)
        with mock.patch("botocore.auth.get_current_datetime", return_value=moment):
            auth.add_auth(request)
    return {name: request.headers[name] for name in SIGNED if name in request.headers}
