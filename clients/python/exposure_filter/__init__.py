"""Python client pieces for exposure-filter.

filter_view: an independent decoder of the portable filter format
(docs/filter-format.md) using only the standard library and xxhash.
client: the RPCs, routing with failover, FilterCache (pull mode).
filter_replica: FilterReplica, a local replica kept fresh over the Session
stream (mode B+, docs/session-stream.md).
"""
