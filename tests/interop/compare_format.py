#!/usr/bin/env python3
"""Compares a directory `ringraft storage format` wrote with one Kafka's `kafka-storage format`
wrote from the same flags, and their outputs.

usage: compare_format.py KAFKA_DIR KAFKA_OUT RINGRAFT_DIR RINGRAFT_OUT

Both metadata directories must hold the same files. Each bootstrap snapshot
(__cluster_metadata-0/00000000000000000000-0000000000.checkpoint) is decoded here, with its own
RecordBatch v2 / control record / FeatureLevelRecord decoder and CRC32C check (docs/records.md
§1-6), independently of ringraft's code; then the two files must be equal byte for byte once
timestamps and CRCs (which cover the timestamps) are masked, and - for this node's own voter
when Kafka drew its directory id at random (--standalone) - the directory id, which must
instead equal the directory.id of the same directory's meta.properties in each.
meta.properties must have the same keys and values except a random directory.id. The
"Formatting ..." and "Bootstrap metadata: ..." lines must be equal with the paths replaced.
Prints what it compared; exits 1 with the first difference.
"""
import os
import stat
import struct
import sys
import base64

CHECKPOINT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"
CONTROL_TYPES = {3: "SnapshotHeader", 4: "SnapshotFooter", 5: "KRaftVersion", 6: "Voters"}


def fail(why):
    sys.exit(f"compare_format: {why}")


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


class Reader:
    def __init__(self, data, base=0):
        self.data, self.pos, self.base = data, 0, base

    def take(self, n):
        if self.pos + n > len(self.data):
            fail(f"truncated at {self.base + self.pos} (+{n})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def at(self):
        return self.base + self.pos

    def int(self, fmt):
        return struct.unpack(">" + fmt, self.take(struct.calcsize(fmt)))[0]

    def uvarint(self):
        value, shift = 0, 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def varint(self):
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def compact_string(self):
        n = self.uvarint() - 1
        return self.take(n).decode()

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def end(self, what):
        if self.pos != len(self.data):
            fail(f"{what}: {len(self.data) - self.pos} bytes left over")


def kafka_uuid(raw):
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def control_value(kind, r, masks):
    version = r.int("h")
    out = {"version": version}
    if kind == "SnapshotHeader":
        masks.append((r.at(), 8))
        out["lastContainedLogTimestamp"] = r.int("q")
    elif kind == "KRaftVersion":
        out["kraftVersion"] = r.int("h")
    elif kind == "Voters":
        voters = []
        for _ in range(r.uvarint() - 1):
            voter = {"id": r.int("i"), "dir_at": r.at(), "dir": kafka_uuid(r.take(16))}
            endpoints = []
            for _ in range(r.uvarint() - 1):
                endpoints.append((r.compact_string(), r.compact_string(), r.int("H")))
                r.tags()
            voter["endpoints"] = endpoints
            voter["kraft"] = (r.int("h"), r.int("h"))
            r.tags()
            r.tags()
            voters.append(voter)
        out["voters"] = voters
    r.tags()
    r.end(kind)
    return out


def data_value(raw):
    r = Reader(raw)
    frame, api_key, version = r.uvarint(), r.uvarint(), r.uvarint()
    if (frame, api_key, version) != (1, 12, 0):
        fail(f"unexpected metadata record frame {frame} key {api_key} version {version}")
    out = {"FeatureLevelRecord": (r.compact_string(), r.int("h"))}
    r.tags()
    r.end("FeatureLevelRecord")
    return out


def decode_records(batch, r, count, base_offset, masks):
    records = []
    for i in range(count):
        length = r.varint()
        rec = Reader(r.take(length), r.at() - length)
        attrs, ts_delta, offset_delta = rec.take(1)[0], rec.varint(), rec.varint()
        if (attrs, ts_delta, offset_delta) != (0, 0, i):
            fail(f"record {base_offset + i}: attrs {attrs} ts delta {ts_delta} offset delta {offset_delta}")
        key_len = rec.varint()
        key = rec.take(key_len) if key_len >= 0 else None
        value_len = rec.varint()
        value = Reader(rec.take(value_len), rec.at() - value_len)
        if rec.varint() != 0:
            fail(f"record {base_offset + i} has headers")
        rec.end("record")
        if batch["control"]:
            version, kind = struct.unpack(">hh", key)
            kind = CONTROL_TYPES.get(kind, f"type{kind}")
            records.append({"key_version": version, kind: control_value(kind, value, masks)})
        else:
            if key is not None:
                fail(f"data record {base_offset + i} has a key")
            records.append(data_value(value.data))
    return records


def decode(path):
    """Batches with their decoded records, and the byte ranges to mask (timestamps, CRCs)."""
    data = open(path, "rb").read()
    batches, masks, pos = [], [], 0
    while pos < len(data):
        r = Reader(data[pos:], pos)
        base_offset, length = r.int("q"), r.int("i")
        end = pos + 12 + length
        if end > len(data):
            fail(f"{path}: batch at {pos} runs past the end")
        epoch, magic, crc = r.int("i"), r.int("b"), r.int("I")
        if crc32c(data[pos + 21:end]) != crc:
            fail(f"{path}: bad CRC32C in the batch at {pos}")
        batch = {"base_offset": base_offset, "epoch": epoch, "magic": magic, "size": end - pos}
        attrs = r.int("h")
        batch["attributes"] = attrs
        batch["control"] = bool(attrs & 0x20)
        batch["last_offset_delta"] = r.int("i")
        base_ts, max_ts = r.int("q"), r.int("q")
        if base_ts != max_ts:
            fail(f"{path}: batch at {pos}: base timestamp {base_ts} != max {max_ts}")
        batch["producer"] = (r.int("q"), r.int("h"), r.int("i"))
        count = r.int("i")
        masks += [(pos + 17, 4), (pos + 27, 16)]
        batch["records"] = decode_records(batch, Reader(data[pos + 61:end], pos + 61), count,
                                          base_offset, masks)
        batches.append(batch)
        pos = end
    return data, batches, masks


def meta_properties(directory):
    props = {}
    for line in open(os.path.join(directory, "meta.properties")):
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            props[key] = value
    return props


def files(directory):
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, directory)] = stat.S_IMODE(os.stat(path).st_mode)
    return out


def voters_of(batches):
    for batch in batches:
        for record in batch["records"]:
            if "Voters" in record:
                return record["Voters"]["voters"]
    return []


def main():
    kafka_dir, kafka_out, ours_dir, ours_out = sys.argv[1:5]
    if files(kafka_dir) != files(ours_dir):
        fail(f"files differ: kafka {files(kafka_dir)} ringraft {files(ours_dir)}")
    print(f"same files and modes: {sorted((k, oct(v)) for k, v in files(ours_dir).items())}")

    kafka_meta, ours_meta = meta_properties(kafka_dir), meta_properties(ours_dir)
    node_id = int(kafka_meta["node.id"])
    checkpoint = os.path.join(kafka_dir, CHECKPOINT)
    if not os.path.exists(checkpoint):
        fail("Kafka wrote no bootstrap snapshot")
    kafka_bytes, kafka_batches, kafka_masks = decode(checkpoint)
    ours_bytes, ours_batches, ours_masks = decode(os.path.join(ours_dir, CHECKPOINT))
    random_dir = False
    for kafka_voter, our_voter in zip(voters_of(kafka_batches), voters_of(ours_batches)):
        if kafka_voter["dir"] != our_voter["dir"] and kafka_voter["id"] == node_id:
            # --standalone: each tool drew the id; it must be the directory's own.
            if (kafka_voter["dir"], our_voter["dir"]) != (kafka_meta["directory.id"], ours_meta["directory.id"]):
                fail(f"voter {node_id}'s directory id is not meta.properties' directory.id")
            kafka_masks.append((kafka_voter["dir_at"], 16))
            ours_masks.append((our_voter["dir_at"], 16))
            kafka_voter["dir"] = our_voter["dir"] = "<this directory's directory.id>"
            random_dir = True
    for label, batches in (("kafka", kafka_batches), ("ringraft", ours_batches)):
        for batch in batches:
            for record in batch["records"]:
                if "SnapshotHeader" in record:
                    record["SnapshotHeader"]["lastContainedLogTimestamp"] = "<time>"
    if kafka_batches != ours_batches:
        for i, (k, o) in enumerate(zip(kafka_batches, ours_batches)):
            if k != o:
                fail(f"batch #{i} differs:\n  kafka    {k}\n  ringraft {o}")
        fail(f"kafka has {len(kafka_batches)} batches, ringraft {len(ours_batches)}")
    for batch in ours_batches:
        print(f"batch {batch['base_offset']}: {batch['size']} bytes, epoch {batch['epoch']}, "
              f"{'control' if batch['control'] else 'data'}, records {batch['records']}")

    def masked(data, masks):
        data = bytearray(data)
        for at, n in masks:
            data[at:at + n] = b"\0" * n
        return bytes(data)

    if masked(kafka_bytes, kafka_masks) != masked(ours_bytes, ours_masks):
        fail("the files differ outside timestamps, CRCs and random directory ids")
    print(f"bootstrap snapshots equal byte for byte ({len(ours_bytes)} bytes) outside "
          f"{len(ours_masks)} masked timestamp/CRC{'/directory id' if random_dir else ''} fields")

    keys = set(kafka_meta) | set(ours_meta)
    for key in sorted(keys):
        same = kafka_meta.get(key) == ours_meta.get(key)
        if not same and not (key == "directory.id" and key in kafka_meta and key in ours_meta):
            fail(f"meta.properties {key}: kafka {kafka_meta.get(key)} ringraft {ours_meta.get(key)}")
    listed = {v["id"]: v["dir"] for v in voters_of(ours_batches)}
    if node_id in listed and not random_dir and listed[node_id] != ours_meta["directory.id"]:
        fail("this node is a listed voter but directory.id is not its listed directory id")
    if node_id in listed and kafka_meta["directory.id"] != ours_meta["directory.id"] and not random_dir:
        fail("directory.id differs although it was given")
    print(f"meta.properties: same keys {sorted(keys)}")

    def lines(path, directory):
        text = open(path).read().replace(directory, "<DIR>")
        return [line for line in text.splitlines() if line and not line.startswith("SLF4J")]

    kafka_lines, our_lines = lines(kafka_out, kafka_dir), lines(ours_out, ours_dir)
    if kafka_lines != our_lines:
        fail(f"output differs:\n  kafka    {kafka_lines}\n  ringraft {our_lines}")
    for line in our_lines:
        print(f"same output line: {line[:120]}")


if __name__ == "__main__":
    main()
