"""One module per Kafka API; importing this package registers them all (``registry.APIS``)."""

from . import (  # noqa: F401
    api_versions,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    alter_configs,
    incremental_alter_configs,
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
)
