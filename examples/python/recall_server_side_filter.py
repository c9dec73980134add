#!/usr/bin/env python3
"""Mode A: send the user's candidates to FilterRecalled, keep what comes back.

    PYTHONPATH=clients/python:build/python /usr/bin/python3 \
        examples/python/recall_server_side_filter.py TARGET SURFACE USER_ID ID...
prints the candidates the user has not seen, in order.
"""

import sys

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.client import ExposureFilterClient, connect


def drop_exposed(client, surface, user_id, candidates):
    """What a recall server calls before ranking."""
    resp = client.filter_recalled(pb.FilterRecalledRequest(
        surface=surface, user_id=user_id, candidate_ids=candidates))
    return list(resp.kept_ids)


def main(argv):
    if len(argv) < 4:
        sys.exit("usage: %s TARGET SURFACE USER_ID ID..." % argv[0])
    target, surface, user_id = argv[1:4]
    candidates = [int(a) for a in argv[4:]]
    with connect(target) as channel:
        kept = drop_exposed(ExposureFilterClient(channel), surface, user_id,
                            candidates)
    print("kept:" + "".join(" %d" % i for i in kept))


if __name__ == "__main__":
    main(sys.argv)
