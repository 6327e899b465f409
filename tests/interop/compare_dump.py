#!/usr/bin/env python3
"""Compares Kafka's DumpLogSegments output with `ringraft debug read-log` output, batch by batch.

usage: compare_dump.py KAFKA_DUMP RINGRAFT_READ [--snapshot END EPOCH]

Every batch of the segments must appear in both with the same base offset, last offset,
partition leader epoch, control flag, record count and CRC, and Kafka must call each valid.
With --snapshot, Kafka's dump of that snapshot file must show its id, a valid header batch
starting with SnapshotHeader, and a final SnapshotFooter.
"""
import re
import sys

BATCH = re.compile(
    r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*partitionLeaderEpoch: (-?\d+) "
    r"isTransactional: \w+ isControl: (\w+) .* crc: (\d+) isvalid: (\w+)")


def kafka_batches(text, section_filter):
    batches, section = [], None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            section = line.split(" ", 1)[1]
            continue
        m = BATCH.search(line)
        if m and section_filter(section):
            base, last, count, epoch, control, crc, valid = m.groups()
            if valid != "true":
                sys.exit(f"Kafka says batch {base} in {section} is invalid: {line}")
            kind = "control" if control == "true" else "data"
            batches.append((int(base), int(last), int(epoch), kind, int(count), int(crc)))
    return batches


def main():
    kafka_text = open(sys.argv[1]).read()
    ours = []
    for line in open(sys.argv[2]):
        if line.startswith("batch "):
            _, base, last, epoch, kind, count, crc = line.split()[:7]
            ours.append((int(base), int(last), int(epoch), kind, int(count), int(crc)))
    if "Exception" in kafka_text or "Error" in kafka_text:
        sys.exit("Kafka's tool reported an error:\n" + kafka_text[-2000:])
    theirs = kafka_batches(kafka_text, lambda s: s is not None and s.endswith(".log"))
    if not ours or theirs != ours:
        first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
        sys.exit(f"batches differ at #{first}: kafka {theirs[first:first+2]} ringraft {ours[first:first+2]}"
                 f" (kafka {len(theirs)} batches, ringraft {len(ours)})")
    print(f"{len(ours)} batches identical in Kafka's and ringraft's reading")
    # The same control records, type by type: Kafka prints "LeaderChange: {...}",
    # "KRaftVersion {...}", "KRaftVoters {...}"; ringraft prints "  LeaderChange(...)" etc.
    log_text = kafka_text.split("Dumping ")
    log_text = "".join(part for part in log_text if part.split("\n", 1)[0].endswith(".log"))
    ours_text = open(sys.argv[2]).read()
    pairs = [("LeaderChange", "  LeaderChange("), ("KRaftVersion", "  KRaftVersion"),
             ("KRaftVoters", "  Voters(")]
    for kafka_name, ours_prefix in pairs:
        theirs_n = len(re.findall(r"\| offset: \d+ .* " + kafka_name + r"[ :]", log_text))
        ours_n = sum(1 for line in ours_text.splitlines() if line.startswith(ours_prefix))
        if theirs_n != ours_n:
            sys.exit(f"{kafka_name} records: kafka {theirs_n}, ringraft {ours_n}")
        print(f"{kafka_name}: {ours_n} in both")
    if "--snapshot" in sys.argv:
        end, epoch = sys.argv[sys.argv.index("--snapshot") + 1:][:2]
        if f"Snapshot end offset: {end}, epoch: {epoch}" not in kafka_text:
            sys.exit("Kafka did not read the snapshot id")
        snap = kafka_batches(kafka_text, lambda s: s is not None and s.endswith(".checkpoint"))
        if len(snap) < 2 or "SnapshotHeader" not in kafka_text or "SnapshotFooter" not in kafka_text:
            sys.exit(f"snapshot structure not recognised: {snap}")
        print(f"snapshot {end}-{epoch}: {len(snap)} valid batches, header and footer recognised")


if __name__ == "__main__":
    main()
