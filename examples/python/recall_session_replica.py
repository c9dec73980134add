#!/usr/bin/env python3
"""Mode B+: a local replica of the user's filter kept fresh by the server
over one Session stream (docs/session-stream.md). The first check
subscribes the user and waits for its snapshot; the second is answered
locally, with no call. Prints the survivors of each check and the path.

    PYTHONPATH=clients/python:build/python /usr/bin/python3 \
        examples/python/recall_session_replica.py TARGET SURFACE USER_ID ID...
"""

import sys

from exposure_filter.client import connect
from exposure_filter.filter_replica import FilterReplica


def drop_exposed(replica, surface, user_id, candidates):
    """What a recall server calls before ranking: the survivors, and where
    the answer came from (local, stream or unary)."""
    keep, path = replica.check_path(surface, user_id, candidates)
    return [c for c, k in zip(candidates, keep) if k], path


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: %s TARGET SURFACE USER_ID ID..." % argv[0])
    target, surface, user_id = argv[1:4]
    candidates = [int(a) for a in argv[4:]]
    with connect(target) as channel, FilterReplica(channel) as replica:
        for _ in range(2):
            kept, path = drop_exposed(replica, surface, user_id, candidates)
            print("kept:" + "".join(" %d" % i for i in kept))
            print("path=%s" % path)
        s = replica.stats()
    print("snapshots=%d local_checks=%d" % (s["snapshots"], s["local_checks"]))


if __name__ == "__main__":
    main(sys.argv)
