#!/usr/bin/env python3
"""Checks Kafka's DumpLogSegments reading of a bootstrap snapshot, field by field.

usage: check_bootstrap_dump.py DUMP --kraft-version K [--voters ID=DIR@HOST:PORT,...]
                               [--same-as OTHER_DUMP]

DUMP is the output of `DumpLogSegments --deep-iteration --cluster-metadata-decoder --files
<dir>/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`. It must show snapshot
0-0 and exactly three valid batches at epoch 0 (docs/membership.md §9, docs/records.md §5):
  control {SnapshotHeader, KRaftVersion(K) if K >= 1, KRaftVoters(--voters, in that order,
           each with one CONTROLLER endpoint and kraft.version 0..1) if given},
  data    {FeatureLevelRecord x6: Kafka 4.4.0's defaults at metadata.version 4.4-IV2 (33)},
  control {SnapshotFooter},
with offsets counting up from 0. With --same-as, the other dump (Kafka's own file, formatted with
the same flags) must read the same everywhere but in timestamps, CRCs and the dumped path.
"""
import argparse
import json
import re
import sys

FEATURES = [("metadata.version", 33), ("eligible.leader.replicas.version", 1),
            ("group.version", 1), ("share.version", 2), ("streams.version", 1),
            ("transaction.version", 2)]
BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*partitionLeaderEpoch: (-?\d+) "
    r"isTransactional: false isControl: (\w+) .*position: (\d+) CreateTime: \d+ size: (\d+) "
    r"magic: 2 compresscodec: none crc: \d+ isvalid: (\w+)$")
RECORD = re.compile(r"^\| offset: (\d+) CreateTime: \d+ keySize: (-?\d+) valueSize: (\d+) "
                    r"sequence: -1 headerKeys: \[\] (.*)$")


def fail(why):
    sys.exit(f"check_bootstrap_dump: {why}")


def parse(path):
    """[(batch fields, [record, ...]), ...] with timestamps and CRCs left out."""
    text = open(path).read()
    if "Exception" in text or "Error" in text:
        fail(f"Kafka's tool reported an error:\n{text[-2000:]}")
    if "Snapshot end offset: 0, epoch: 0" not in text:
        fail(f"{path}: snapshot id 0-0 not read")
    batches = []
    for line in text.splitlines():
        m = BATCH.match(line)
        if m:
            base, last, count, epoch, control, position, size, valid = m.groups()
            if valid != "true":
                fail(f"Kafka says a batch is invalid: {line}")
            batches.append(((int(base), int(last), int(count), int(epoch), control == "true",
                             int(position), int(size)), []))
            continue
        m = RECORD.match(line)
        if m:
            offset, key_size, value_size, rest = m.groups()
            if rest.startswith("payload: "):
                kind, body = "payload", json.loads(rest[len("payload: "):])
            else:
                kind, body = rest.split(" ", 1)
                body = json.loads(body)
                body.pop("lastContainedLogTimestamp", None)
            batches[-1][1].append((int(offset), int(key_size), int(value_size), kind, body))
        elif line.startswith("|"):
            fail(f"unrecognised record line: {line}")
    return batches


def expected_header(kraft_version, voters):
    records = [("SnapshotHeader", {"version": 0})]
    if kraft_version >= 1:
        records.append(("KRaftVersion", {"version": 0, "kRaftVersion": kraft_version}))
        if voters:
            records.append(("KRaftVoters", {"version": 0, "voters": [
                {"voterId": vid, "voterDirectoryId": directory,
                 "endpoints": [{"name": "CONTROLLER", "host": host, "port": port}],
                 "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}}
                for vid, directory, host, port in voters]}))
    return records


def voters_arg(text):
    out = []
    for item in filter(None, text.split(",")):
        vid, rest = item.split("=", 1)
        directory, hostport = rest.split("@", 1)
        host, port = hostport.rsplit(":", 1)
        out.append((int(vid), directory, host, int(port)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--kraft-version", type=int, required=True)
    ap.add_argument("--voters", type=voters_arg, default=[])
    ap.add_argument("--same-as")
    args = ap.parse_args()
    batches = parse(args.dump)
    if len(batches) != 3:
        fail(f"{len(batches)} batches, want header, data, footer")
    header, data, footer = batches
    want_header = expected_header(args.kraft_version, args.voters)
    want = [
        (True, [(kind, body) for kind, body in want_header]),
        (False, [("payload", {"type": "FEATURE_LEVEL_RECORD", "version": 0,
                              "data": {"name": n, "featureLevel": lvl}}) for n, lvl in FEATURES]),
        (True, [("SnapshotFooter", {"version": 0})]),
    ]
    offset = 0
    for i, ((fields, records), (control, want_records)) in enumerate(zip(batches, want)):
        base, last, count, epoch, is_control, _, _ = fields
        if (base, last, count, epoch, is_control) != (offset, offset + len(want_records) - 1,
                                                      len(want_records), 0, control):
            fail(f"batch #{i}: {fields}, want base {offset}, {len(want_records)} records, "
                 f"epoch 0, control {control}")
        got = [(kind, body) for _, _, _, kind, body in records]
        if got != want_records:
            fail(f"batch #{i} records:\n  got  {got}\n  want {want_records}")
        offsets = [o for o, _, _, _, _ in records]
        if offsets != list(range(offset, offset + len(want_records))):
            fail(f"batch #{i} record offsets {offsets}")
        key_sizes = {k for _, k, _, _, _ in records}
        if key_sizes != ({4} if control else {-1}):
            fail(f"batch #{i} key sizes {key_sizes}")
        offset += len(want_records)
        print(f"batch {base}: {'control' if control else 'data'}, "
              f"{[kind if kind != 'payload' else body['data']['name'] for kind, body in got]}")
    if args.same_as:
        theirs = parse(args.same_as)
        if theirs != batches:
            fail(f"Kafka's own file reads differently:\n  theirs {theirs}\n  ours   {batches}")
        print("Kafka's own file reads the same, batch positions and sizes included")


if __name__ == "__main__":
    main()
