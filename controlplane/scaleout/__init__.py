"""Scale-out over PL/Proxy (docs/scale-out.md): which databases a DSN means
(:mod:`~controlplane.scaleout.shards`), the proxy script generated from a
shard's catalog (:mod:`~controlplane.scaleout.proxy`, with its routing table
:mod:`~controlplane.scaleout.proxy_routes` and wrapper SQL
:mod:`~controlplane.scaleout.proxy_wrappers`), setting up a cluster
(:mod:`~controlplane.scaleout.cluster`) and moving a partition between shards
(:mod:`~controlplane.scaleout.partition_move` and its fence,
:mod:`~controlplane.scaleout.partition_fence`)."""
