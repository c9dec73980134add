#!/usr/bin/env python3
"""Writes tests/testdata/format1_datadir/: a data directory made by the
PREVIOUS release's server (format-1 snapshot user records and WAL), for the
upgrade test tests/persist/format1_upgrade_test.cc.

    # the previous release's server, from its own sources:
    git archive 7116582 | tar -x -C OLD_SRC   # in this repository
    cmake -S OLD_SRC -B OLD_SRC/build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DEF_BUILD_TESTS=OFF -DEF_BUILD_BENCH=OFF
    ninja -C OLD_SRC/build -j2 exposure-filter-server ef_python_proto
    # then, from the repository root:
    EF_E2E_SERVER=OLD_SRC/build/src/server/exposure-filter-server \
    PYTHONPATH=OLD_SRC/build/python:clients/python:tests/e2e \
        /usr/bin/python3 tools/golden/make_format1_datadir.py \
        tests/testdata/format1_datadir

Phase 1 records users on two surfaces and stops the server with SIGTERM, so
it writes its final snapshot; phase 2 restarts it on the same directory,
records more (for some old users and new ones) and kills it with SIGKILL,
so those writes live only in the write-ahead log. manifest.tsv lists every
user's recorded items and fresh candidates with the old server's own
FilterRecalled answer for each, at generated_at_ms.
"""

import os
import random
import shutil
import sys
import time

from exposure.v1 import exposure_filter_pb2 as pb
from exposure_filter.client import ExposureFilterClient, connect

import server_harness as harness

DAY_MS = 24 * 3600 * 1000
SURFACES = ("homefeed", "shorts")


def mask_bit(mask, i):
    return bool(mask[i // 8] >> (i % 8) & 1)


def record(client, surface, user, ids, keys, rng, now, batch):
    items = [("id", i) for i in ids] + [("key", k) for k in keys]
    for start in range(0, len(items), batch):
        chunk = items[start:start + batch]
        t = now - rng.randrange(0, 29 * DAY_MS)
        client.record_exposure(pb.RecordExposureRequest(
            surface=surface,
            exposures=[pb.Exposure(
                user_id=user, event_time_ms=t,
                item_ids=[v for kind, v in chunk if kind == "id"],
                item_keys=[v for kind, v in chunk if kind == "key"])]))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_format1_datadir.py OUT_DIR")
    out = sys.argv[1]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    data_dir = os.path.join(out, "data")
    os.makedirs(data_dir)
    rng = random.Random(20261126)
    now = int(time.time() * 1000)
    recorded = {}  # (surface, user) -> (ids, keys, phase)

    def run_phase(phase, users, final):
        server = harness.ServerProcess("--snapshot_interval=0",
                                       data_dir=data_dir).start()
        channel = connect(server.address)
        client = ExposureFilterClient(channel, timeout_s=30)
        try:
            for surface, user, n, batch in users:
                ids = [rng.getrandbits(64) for _ in range(n - n // 8)]
                keys = ["%s:%d" % (user, rng.getrandbits(32))
                        for _ in range(n // 8)]
                record(client, surface, user, ids, keys, rng, now, batch)
                old = recorded.get((surface, user), ([], [], 0))
                recorded[(surface, user)] = (old[0] + ids, old[1] + keys,
                                             old[2] | phase)
            if final:
                answers = {}
                for (surface, user), (ids, keys, _) in sorted(recorded.items()):
                    fresh = [rng.getrandbits(64) for _ in range(300)]
                    fresh_keys = ["fresh:%d" % rng.getrandbits(40)
                                  for _ in range(30)]
                    cand_ids, cand_keys = ids + fresh, keys + fresh_keys
                    resp = client.filter_recalled(pb.FilterRecalledRequest(
                        surface=surface, user_id=user, candidate_ids=cand_ids,
                        candidate_keys=cand_keys, mode=pb.KEEP_MASK))
                    rows = []
                    for i, c in enumerate(cand_ids + cand_keys):
                        kind = "id" if i < len(cand_ids) else "key"
                        was = (c in ids) if kind == "id" else (c in keys)
                        rows.append((kind, c, was,
                                     not mask_bit(resp.keep_mask, i)))
                    answers[(surface, user)] = rows
                return server, channel, answers
        except BaseException:
            server.kill()
            raise
        server.stop()  # SIGTERM: the final snapshot
        channel.close()
        server.close()
        return None

    # Phase 1: snapshot. Sizes from 1 to 4,000 items; batch 1 grows
    # segments in a slice, big batches open wide ones.
    phase1 = []
    for u, (n, batch) in enumerate([(1, 1), (5, 5), (20, 20), (100, 10),
                                    (400, 1), (1500, 100), (4000, 500),
                                    (60, 60)]):
        phase1.append((SURFACES[u % 2], "user-%d" % u, n, batch))
    run_phase(1, phase1, final=False)
    # Phase 2: log tail only (SIGKILL below). Two old users grow, two new.
    phase2 = [("homefeed", "user-2", 50, 10), ("shorts", "user-5", 300, 30),
              ("homefeed", "wal-only-0", 30, 30),
              ("shorts", "wal-only-1", 200, 20)]
    server, channel, answers = run_phase(2, phase2, final=True)
    server.kill()  # no final snapshot: phase 2 lives in the log
    channel.close()
    server.close()

    with open(os.path.join(out, "manifest.tsv"), "w") as f:
        f.write("# Written by tools/golden/make_format1_datadir.py with the "
                "previous release's server (7116582); see its docstring.\n")
        f.write("# generated_at_ms\t%d\n" % now)
        f.write("# surface\tuser\tphases(1=snapshot,2=log,3=both)\tkind\t"
                "item\trecorded\told_server_claimed\n")
        for (surface, user), rows in sorted(answers.items()):
            phases = recorded[(surface, user)][2]
            for kind, item, was, claimed in rows:
                f.write("%s\t%s\t%d\t%s\t%s\t%d\t%d\n"
                        % (surface, user, phases, kind, item, was, claimed))
    for root, _, files in os.walk(data_dir):
        for name in sorted(files):
            p = os.path.join(root, name)
            print("%s\t%d bytes" % (os.path.relpath(p, out),
                                    os.path.getsize(p)))


if __name__ == "__main__":
    main()
