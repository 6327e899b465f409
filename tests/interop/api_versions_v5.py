"""ApiVersions v5 (KIP-1242) sent as the same raw frames to ringraft and to a Kafka controller;
their answers must agree. Usage:
  api_versions_v5.py RINGRAFT_PORT RINGRAFT_CLUSTER_ID KAFKA_PORT KAFKA_CLUSTER_ID NODE_ID
(both nodes have NODE_ID; the wrong-node request names each its own cluster id).

For each request: an answer with an error must be the same bytes; an answer without one must
have the same error code and the same SupportedFeatures and FinalizedFeatures (finalized as a
set: Kafka's order varies between runs). The API lists differ by design (ringraft serves only
what a KRaft quorum needs) and FinalizedFeaturesEpoch is each node's own offset.
"""
import socket
import struct
import sys


def cstr(s):
    if s is None:
        return b"\x00"
    b = s.encode()
    return bytes([len(b) + 1]) + b


def frame(cluster, node):
    header = struct.pack(">hhih", 18, 5, 7, 5) + b"probe" + b"\x00"
    body = cstr("apache-kafka-java") + cstr("4.4.0") + cstr(cluster) + struct.pack(">i", node)
    return header + body + b"\x00"


def ask(port, cluster, node):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    f = frame(cluster, node)
    s.sendall(struct.pack(">i", len(f)) + f)
    n = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    data = s.recv(n, socket.MSG_WAITALL)
    s.close()
    return data[4:]  # response header v0: the correlation id


def uvarint(b, i):
    shift = value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def features(body):
    """(error code, tag 0 bytes, sorted finalized entries) of a v5 answer body."""
    error = struct.unpack(">h", body[:2])[0]
    count, i = uvarint(body, 2)
    for _ in range(count - 1):
        i += 6
        _, i = uvarint(body, i)  # each entry's tagged fields (none)
    i += 4  # throttle
    tags = {}
    ntags, i = uvarint(body, i)
    for _ in range(ntags):
        tag, i = uvarint(body, i)
        size, i = uvarint(body, i)
        tags[tag] = body[i:i + size]
        i += size
    finalized = []
    if 2 in tags:
        t = tags[2]
        n, j = uvarint(t, 0)
        for _ in range(n - 1):
            length, j = uvarint(t, j)
            name = t[j:j + length - 1].decode()
            j += length - 1
            finalized.append((name, struct.unpack(">hh", t[j:j + 4])))
            j += 5
    return error, tags.get(0), sorted(finalized)


def main():
    ours, our_cluster = int(sys.argv[1]), sys.argv[2]
    kafka, kafka_cluster = int(sys.argv[3]), sys.argv[4]
    node = int(sys.argv[5])
    failed = False
    wrong = "AAAAAAAAAAAAAAAAAAAAAA"
    cases = [
        ("a wrong cluster id", wrong, wrong, node),
        ("a wrong node id", our_cluster, kafka_cluster, node + 100),
        ("the right cluster and node", our_cluster, kafka_cluster, node),
        ("a cluster id without a node id", wrong, wrong, -1),
        ("a node id without a cluster id", None, None, node + 100),
    ]
    for what, ours_named, kafka_named, node_id in cases:
        a, b = ask(ours, ours_named, node_id), ask(kafka, kafka_named, node_id)
        fa, fb = features(a), features(b)
        if fa[0] != 0 or fb[0] != 0:
            same = a == b
        else:
            same = fa == fb
        print(f"{what}: ringraft error {fa[0]}, Kafka error {fb[0]}: {'same' if same else 'DIFFERENT'}")
        if not same:
            print(f"  ringraft: {a.hex()}\n  kafka:    {b.hex()}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
