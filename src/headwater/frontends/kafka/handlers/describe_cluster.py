"""DescribeCluster (key 60), versions 0-2: the one broker and the cluster id.

v1 adds endpoint_type (brokers only: 1; a request for controllers gets
UNSUPPORTED_ENDPOINT_TYPE); v2 include_fenced_brokers / is_fenced (never). Open to every caller, as in
Kafka; include_cluster_authorized_operations gets the caller's bit set
(else INT32_MIN).
"""

from __future__ import annotations

from .. import authz
from ..registry import ApiKey, Context, kafka_api

UNSUPPORTED_ENDPOINT_TYPE = 119
NO_AUTHORIZED_OPERATIONS = -(2**31)


@kafka_api(ApiKey.DESCRIBE_CLUSTER)
def describe_cluster(ctx: Context, request):
    fe = ctx.frontend
    endpoint_type = getattr(request, "endpoint_type", 1)
    if endpoint_type != 1:
        return ctx.response(
            throttle_time=0,
            error_code=UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints",
            endpoint_type=endpoint_type,
            cluster_id=ctx.broker.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=NO_AUTHORIZED_OPERATIONS,
        )
    operations = NO_AUTHORIZED_OPERATIONS
    if request.include_cluster_authorized_operations:
        operations = authz.cluster_operations(ctx)
    broker = ctx.build("DescribeClusterBroker", broker_id=fe.node_id, host=fe.advertised_host, port=fe.advertised_port, rack=None, is_fenced=False)
    return ctx.response(
        throttle_time=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=ctx.broker.cluster_id,
        controller_id=fe.node_id,
        brokers=(broker,),
        cluster_authorized_operations=operations,
    )
