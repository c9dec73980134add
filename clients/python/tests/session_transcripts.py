"""Reads the golden Session transcripts (tests/testdata/session/*.transcript,
docs/session-stream.md "Golden transcripts") into steps:
("send", SessionRequest), ("receive", SessionResponse) and
("action", [words]) for the out-of-band `!` lines."""

import os
import shlex

from google.protobuf import text_format

from exposure.v1 import exposure_filter_pb2 as pb


def transcript_dir():
    return os.path.join(os.environ["EF_TESTDATA_DIR"], "session")


def read_transcript(name):
    steps = []
    with open(os.path.join(transcript_dir(), name), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            tag, rest = line[0], line[1:].strip()
            if tag == ">":
                steps.append(("send", text_format.Parse(rest, pb.SessionRequest())))
            elif tag == "<":
                steps.append(("receive",
                              text_format.Parse(rest, pb.SessionResponse())))
            elif tag == "!":
                steps.append(("action", shlex.split(rest)))
            else:
                raise ValueError("%s: unknown line %r" % (name, line))
    return steps


def snapshots(name):
    """The snapshots a transcript's server sent, in order."""
    return [m.snapshot for kind, m in read_transcript(name)
            if kind == "receive" and m.WhichOneof("kind") == "snapshot"]
