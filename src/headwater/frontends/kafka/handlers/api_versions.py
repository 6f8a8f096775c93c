"""ApiVersions (key 18), versions 0-4: the API ranges this broker implements.

v1 adds throttle_time_ms; v3 is flexible and adds client_software_name/version
(request) and supported/finalized features (response, left empty); v4 adds
nothing on the wire. The list is derived from the registry, so it is exactly
what is registered. An unsupported ApiVersions version never reaches this
handler: the connection answers it in v0 with UNSUPPORTED_VERSION (server.py).
"""

from __future__ import annotations

from ..registry import APIS, ApiKey, Context, kafka_api


@kafka_api(ApiKey.API_VERSIONS, versions=(0, 4))
def api_versions(ctx: Context, request):
    keys = tuple(
        ctx.build("ApiVersion", api_key=a.key, min_version=a.min_version, max_version=a.max_version)
        for a in sorted(APIS.values(), key=lambda a: a.key)
    )
    return ctx.response(error_code=0, api_keys=keys, throttle_time=0, finalized_features_epoch=-1)
