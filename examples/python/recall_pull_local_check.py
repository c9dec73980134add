#!/usr/bin/env python3
"""Mode B: pull the user's filter (GetFilter) and check candidates locally
with the pure-Python decoder; FilterCache revalidates with if_version, so an
unchanged filter is not sent again. Checks twice to show the revalidation.

    PYTHONPATH=clients/python:build/python /usr/bin/python3 \
        examples/python/recall_pull_local_check.py TARGET SURFACE USER_ID ID...
"""

import sys

from exposure_filter.client import ExposureFilterClient, FilterCache, connect


def drop_exposed(cache, surface, user_id, candidates):
    """What a recall server calls before ranking."""
    view = cache.get(surface, user_id)
    return [c for c, keep in zip(candidates, view.keep_mask_ids(candidates))
            if keep]


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: %s TARGET SURFACE USER_ID ID..." % argv[0])
    target, surface, user_id = argv[1:4]
    candidates = [int(a) for a in argv[4:]]
    with connect(target) as channel:
        cache = FilterCache(ExposureFilterClient(channel), max_users=10000)
        for _ in range(2):
            kept = drop_exposed(cache, surface, user_id, candidates)
            print("kept:" + "".join(" %d" % i for i in kept))
    print("full_pulls=%d not_modified=%d" % (cache.full_pulls,
                                             cache.not_modified))


if __name__ == "__main__":
    main(sys.argv)
