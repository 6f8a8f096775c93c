"""ApiVersions (key 18), versions 0-4: the API ranges this broker implements.

v1 adds throttle_time_ms; v3 is flexible and adds client_software_name/version
(request) and supported/finalized features (response, left empty); v4 adds
nothing on the wire. The list is derived from the registry, so it is exactly
what is registered. An unsupported ApiVersions version never reaches this
handler: the connection answers it in v0 with UNSUPPORTED_VERSION (server.py).

From v3 the client software name and version must match
``[a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?`` (Kafka's
``ApiVersionsRequest.isValid``); otherwise the answer is INVALID_REQUEST
with no API list, as Kafka's.
"""

from __future__ import annotations

import re

from .. import errors
from ..registry import APIS, ApiKey, Context, kafka_api

SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _valid(ctx: Context, request) -> bool:
    if ctx.version < 3:
        return True
    return all(
        value is not None and SOFTWARE_NAME_VERSION.fullmatch(value) is not None
        for value in (request.client_software_name, request.client_software_version)
    )


@kafka_api(ApiKey.API_VERSIONS)
def api_versions(ctx: Context, request):
    if not _valid(ctx, request):
        return ctx.response(
            error_code=errors.INVALID_REQUEST, api_keys=(), throttle_time=0, finalized_features_epoch=-1
        )
    keys = tuple(
        ctx.build("ApiVersion", api_key=a.key, min_version=a.min_version, max_version=a.max_version)
        for a in sorted(APIS.values(), key=lambda a: a.key)
    )
    return ctx.response(error_code=0, api_keys=keys, throttle_time=0, finalized_features_epoch=-1)
