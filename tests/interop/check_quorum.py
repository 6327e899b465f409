#!/usr/bin/env python3
"""Checks `kafka-metadata-quorum describe` output against what the ringraft quorum must show.

    check_quorum.py status OUT --cluster-id ID --voters 1=DIR@PORT,2=DIR@PORT,... [--observers 3=DIR,...]
    check_quorum.py replication OUT --voters ... [--observers ...]

A voter given as ID=*@PORT is checked without its directory id (what a Kafka controller shows
for the voters of a kraft.version 0 quorum: none, or the zero id).

Field by field (docs/tools.md §2.2): the cluster id, a leader among the voters, epoch and high
watermark, every voter with its directory id and CONTROLLER endpoint, exactly the observers
given (none by default); for --replication the leader row first, then every other voter, then
the observers, sane lags and real timestamps.
Exits 1 with the reason on the first mismatch.
"""
import argparse
import json
import sys


def fail(why):
    sys.exit(f"check_quorum: {why}")


def voters_arg(text):
    out = {}
    for item in text.split(","):
        node, rest = item.split("=", 1)
        directory, port = rest.rsplit("@", 1)
        out[int(node)] = (directory, int(port))
    return out


def observers_arg(text):
    out = {}
    for item in filter(None, text.split(",")):
        node, directory = item.split("=", 1)
        out[int(node)] = directory
    return out


def status(lines, args, voters):
    fields = {}
    for line in lines:
        if ":" in line:
            label, value = line.split(":", 1)
            fields[label.strip()] = value.strip()
    for label in ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                  "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]:
        if label not in fields:
            fail(f"no {label} line in {lines}")
    if fields["ClusterId"] != args.cluster_id:
        fail(f"ClusterId {fields['ClusterId']} != {args.cluster_id}")
    leader = int(fields["LeaderId"])
    if leader not in voters:
        fail(f"LeaderId {leader} is not a voter")
    if int(fields["LeaderEpoch"]) < 1:
        fail(f"LeaderEpoch {fields['LeaderEpoch']}")
    if int(fields["HighWatermark"]) < 1:
        fail(f"HighWatermark {fields['HighWatermark']}: the LeaderChange batch is committed")
    if int(fields["MaxFollowerLag"]) < 0:
        fail(f"MaxFollowerLag {fields['MaxFollowerLag']}")
    int(fields["MaxFollowerLagTimeMs"])
    current = json.loads(fields["CurrentVoters"])
    if sorted(v["id"] for v in current) != sorted(voters):
        fail(f"CurrentVoters {current}")
    for v in current:
        directory, port = voters[v["id"]]
        if directory != "*" and v.get("directoryId") != directory:
            fail(f"voter {v['id']} directoryId {v.get('directoryId')} != {directory}")
        if v.get("endpoints") != [f"CONTROLLER://127.0.0.1:{port}"]:
            fail(f"voter {v['id']} endpoints {v.get('endpoints')}")
    observers = {o["id"]: o.get("directoryId") for o in json.loads(fields["CurrentObservers"])}
    if observers != args.observers:
        fail(f"CurrentObservers {fields['CurrentObservers']}, expected {args.observers}")
    print(f"status: leader {leader}, epoch {fields['LeaderEpoch']}, "
          f"high watermark {fields['HighWatermark']}, {len(current)} voters")


def replication(lines, voters, observers):
    rows = [line.split() for line in lines if line.strip()]
    header = rows[0]
    want = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
            "LastCaughtUpTimestamp", "Status"]
    if header != want:
        fail(f"header {header}")
    body = [dict(zip(header, r)) for r in rows[1:]]
    if len(body) != len(voters) + len(observers):
        fail(f"{len(body)} rows for {len(voters)} voters and {len(observers)} observers: {body}")
    statuses = [r["Status"] for r in body]
    want = ["Leader"] + ["Follower"] * (len(voters) - 1) + ["Observer"] * len(observers)
    if statuses != want:
        fail(f"statuses {statuses}, expected {want}")
    if sorted(int(r["NodeId"]) for r in body[:len(voters)]) != sorted(voters):
        fail(f"voter ids {[r['NodeId'] for r in body]}")
    if sorted(int(r["NodeId"]) for r in body[len(voters):]) != sorted(observers):
        fail(f"observer ids {[r['NodeId'] for r in body]}")
    leader_end = int(body[0]["LogEndOffset"])
    for i, r in enumerate(body):
        node = int(r["NodeId"])
        directory = voters[node][0] if i < len(voters) else observers[node]
        if directory != "*" and r["DirectoryId"] != directory:
            fail(f"node {node} DirectoryId {r['DirectoryId']} != {directory}")
        end, lag = int(r["LogEndOffset"]), int(r["Lag"])
        if end < 1 or lag != leader_end - end or lag < 0:
            fail(f"node {node}: LogEndOffset {end}, Lag {lag}, leader at {leader_end}")
        for column in ["LastFetchTimestamp", "LastCaughtUpTimestamp"]:
            if int(r[column]) < 1_000_000_000_000:
                fail(f"node {node}: {column} {r[column]} is not a recent epoch-ms time")
    print(f"replication: {len(body)} rows, leader {body[0]['NodeId']} at {leader_end}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["status", "replication"])
    p.add_argument("output")
    p.add_argument("--cluster-id")
    p.add_argument("--voters", required=True, type=voters_arg)
    p.add_argument("--observers", default={}, type=observers_arg)
    args = p.parse_args()
    lines = [line.rstrip("\n") for line in open(args.output) if not line.startswith("SLF4J")]
    if args.mode == "status":
        status(lines, args, args.voters)
    else:
        replication(lines, args.voters, args.observers)


if __name__ == "__main__":
    main()
