"""Python client pieces for exposure-filter.

filter_view: an independent decoder of the portable filter format
(docs/filter-format.md) using only the standard library and xxhash.
"""
