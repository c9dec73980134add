"""The grpcurl transcripts in README.md and docs/*.md, replayed against the
real server: every fenced block with "$ grpcurl ..." lines is run
in order on a fresh server, each call made through grpcio with messages
built from the server's reflection (as grpcurl builds them), and its
response printed as grpcurl prints it (grpcurl_format.py). The text under
each command in the document must match, so a change of the API or of the
server's answers fails here, not in a reader's terminal.

Conventions in the documents:
  - "$ grpcurl ..." starts a command (continued over lines ending in "\\" or
    inside an open quote); the lines after it, up to the next "$" or "#"
    line or the end of the block, are its output (stdout, or the
    "ERROR: ..." stderr text);
  - "<anything>" in an output matches any value that varies between runs
    (versions, times, filter bytes); in a -d request,
    "<version from above>" stands for the latest response's field of that
    name ("if_version" takes the last "version").
  - `describe` prints grpcurl's reconstruction of the proto; it is not
    reproduced here, so its commands must not show an output.

  EF_E2E_SERVER=build/src/server/exposure-filter-server EF_REPO=$PWD \\
      /usr/bin/python3 -m unittest -v test_grpcurl_outputs  (from tests/e2e/)

Re-capturing (when the server's answers change on purpose): the same command
with EF_GRPCURL_RECAPTURE=1 replays every transcript and rewrites each
output that no longer matches with what the real server printed, keeping
every shown line that still matches (so its "<...>" placeholders stay);
review the diff, put a placeholder on any new line that varies between runs,
and run the test again without the variable.
"""

import glob
import json
import os
import re
import shlex

os.environ.setdefault("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100")

import unittest  # pylint: disable=wrong-import-position

import grpc
from google.protobuf import json_format

import grpcurl_format as fmt
import reflection_client as rc
import server_harness as harness

REPO = os.environ.get("EF_REPO") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOCUMENTS = ["README.md"] + sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs",
                                                             "*.md")))
PLACEHOLDER = re.compile(r"<[^<>\n]+>")


class Command:
    def __init__(self, doc, line, argv, output):
        self.doc, self.line, self.argv, self.output = doc, line, argv, output

    def where(self):
        return "%s:%d: %s" % (self.doc, self.line, " ".join(self.argv))


def transcripts(doc):
    """[[Command]] per fenced block of `doc` that runs grpcurl."""
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, block, fenced = [], None, False
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.startswith("```"):
            fenced = not fenced
            if not fenced and block:
                blocks.append(block)
            block = [] if fenced else None
            i += 1
            continue
        if not (fenced and text.startswith("$ grpcurl")):
            i += 1
            continue
        start = i
        source = text[2:]
        while True:
            try:
                if source.endswith("\\"):
                    raise ValueError("continued")
                argv = shlex.split(source.replace("\\\n", " "))
                break
            except ValueError:
                i += 1
                source += "\n" + lines[i]
        i += 1
        output = []
        while (i < len(lines) and not lines[i].startswith("```")
               and not lines[i].startswith("$") and not lines[i].startswith("#")):
            output.append(lines[i])
            i += 1
        while output and not output[-1].strip():
            output.pop()
        block.append(Command(doc, start + 1, argv, "\n".join(output)))
    return blocks


RECAPTURE = os.environ.get("EF_GRPCURL_RECAPTURE") == "1"
_SHIFT = {}  # doc -> lines added by earlier recaptures (commands run in order)


def recapture(cmd, actual):
    """Replaces `cmd`'s output in its document with `actual`, line by line
    where the line counts agree (a shown line that still matches is kept,
    placeholders and all), else wholesale."""
    shown = cmd.output.split("\n") if cmd.output else []
    printed = actual.split("\n")
    if len(shown) == len(printed):
        printed = [s if matches(s, p) else p for s, p in zip(shown, printed)]
    path = os.path.join(REPO, cmd.doc)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    # The output starts after the command's own lines (it may continue).
    at = cmd.line - 1 + _SHIFT.get(cmd.doc, 0)  # index of "$ grpcurl"
    first = at + 1
    while not _complete("\n".join(lines[at:first])[2:]):
        first += 1
    assert lines[first:first + len(shown)] == shown, cmd.where()
    lines[first:first + len(shown)] = printed
    _SHIFT[cmd.doc] = _SHIFT.get(cmd.doc, 0) + len(printed) - len(shown)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print("recaptured %s" % cmd.where())


def _complete(source):
    try:
        shlex.split(source.replace("\\\n", " "))
        return not source.endswith("\\")
    except ValueError:
        return False


def matches(expected, actual):
    """`actual` equals `expected` with each <placeholder> matching a value."""
    parts = PLACEHOLDER.split(expected)
    pattern = r'[^"\n,]+'.join(re.escape(p) for p in parts)
    return re.fullmatch(pattern, actual) is not None


class GrpcurlTranscriptTest(unittest.TestCase):
    maxDiff = None

    def test_documents_have_transcripts(self):
        found = {doc: sum(len(b) for b in transcripts(doc))
                 for doc in DOCUMENTS}
        self.assertGreaterEqual(found["README.md"], 8, found)
        self.assertGreaterEqual(found["docs/debugging.md"], 4, found)

    def test_transcripts_print_what_grpcurl_prints(self):
        for doc in DOCUMENTS:
            for block in transcripts(doc):
                with self.subTest(doc=doc, line=block[0].line):
                    self.replay(block)

    def replay(self, block):
        with harness.ServerProcess() as server:
            with server.channel() as channel:
                with rc.ReflectionClient(channel) as refl:
                    services = refl.list_services()
                    pool = refl.pool_for_symbols(
                        [s for s in services if "reflection" not in s])
                    files = list(refl._files.values())  # pylint: disable=protected-access
                # Why grpcurl prints proto field names (grpcurl_format.py).
                for fdp in files:
                    for msg in fdp.message_type:
                        for field in msg.field:
                            self.assertFalse(field.HasField("json_name"),
                                             "%s.%s" % (msg.name, field.name))
                last = {}
                for cmd in block:
                    actual = self.run_command(cmd, channel, pool, services,
                                              last)
                    if actual is None:
                        self.assertEqual(cmd.output, "",
                                         cmd.where() + ": output not checked")
                        continue
                    if RECAPTURE and not matches(cmd.output, actual):
                        recapture(cmd, actual)
                        continue
                    self.assertTrue(matches(cmd.output, actual),
                                    "%s\n--- shown:\n%s\n--- printed:\n%s"
                                    % (cmd.where(), cmd.output, actual))

    def run_command(self, cmd, channel, pool, services, last):
        args = cmd.argv[1:]
        data = None
        rest = []
        while args:
            a = args.pop(0)
            if a == "-d":
                data = args.pop(0)
            elif a.startswith("-"):
                self.assertIn(a, ("-plaintext",), cmd.where())
            else:
                rest.append(a)
        self.assertEqual(rest[0], "localhost:50051", cmd.where())
        verb = rest[1:]
        if verb == ["list"]:
            return "\n".join(sorted(services))
        if verb[0] == "describe":
            return None
        service_name, method_name = verb[0].split("/")
        method = pool.FindServiceByName(service_name).methods_by_name[
            method_name]
        dyn = rc.DynamicService(channel, pool, service_name)
        request = dyn.message_class(method.input_type.full_name)()
        if data is not None:
            fields = json.loads(data)
            for key, v in fields.items():
                if isinstance(v, str) and PLACEHOLDER.fullmatch(v):
                    fields[key] = last[key[3:] if key.startswith("if_")
                                      else key]
            json_format.ParseDict(fields, request)
        try:
            response = dyn.call(method_name, request)
        except grpc.RpcError as e:
            return fmt.error_text(e.code(), e.details())
        for field, v in response.ListFields():
            last[field.name] = v
        return fmt.message_json(response)


if __name__ == "__main__":
    unittest.main()
