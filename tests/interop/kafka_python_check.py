#!/usr/bin/env python3
"""kafka-python 3.0.12 against a running ringraft node (run by run.sh).

1. kafka-python's own ApiVersions v4 request, encoded by its classes, gets an answer its
   classes decode: ApiVersions 0..4 listed, kraft.version 0..1 among the supported features.
2. v3 gets the same keys and no min-0 features (KAFKA-17011).
3. A v5 request (newer than any server knows) gets the v0-format UNSUPPORTED_VERSION answer
   naming ApiVersions 0..4, which kafka-python's decoder reads.
4. kafka-python's real connection handshake, through wire_proxy.py: its first ApiVersions is
   turned into v5 and the node's genuine fallback answer is edited to say "max 3", so the
   client's own retry path must pick v3 and finish the handshake with the node's v3 answer.
Exits non-zero with a message on the first mismatch.
"""
import socket
import struct
import sys

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse


def fail(msg):
    print(f"kafka-python check FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def round_trip(port, frame):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(frame)
        size = s.recv(4, socket.MSG_WAITALL)
        if len(size) < 4:
            fail("the node closed the connection instead of answering")
        n = struct.unpack(">i", size)[0]
        return s.recv(n, socket.MSG_WAITALL)
    finally:
        s.close()


def request(version, correlation):
    req = ApiVersionsRequest(version=version, client_software_name="kafka-python",
                             client_software_version="3.0.12")
    req.with_header(correlation_id=correlation, client_id="ringraft-interop")
    return req.encode(header=True, framed=True)


# What ringraft advertises as a Kafka 4.4 controller does: ApiVersions up to v5 (KIP-1242), and
# a 4.4 controller's supported features (v3 and older drop those whose minimum is 0,
# KAFKA-17011).
API_VERSIONS_RANGE = (0, 5)
FEATURES_V4 = {
    "group.version": (0, 1),
    "kraft.version": (0, 1),
    "metadata.version": (7, 33),
    "share.version": (0, 2),
    "streams.version": (0, 1),
    "transaction.version": (0, 2),
    "eligible.leader.replicas.version": (0, 1),
}
FEATURES_V3 = {"metadata.version": (7, 33)}


def check_direct(port):
    for version in (4, 3, 2, 1, 0):
        body = round_trip(port, request(version, 100 + version))
        resp = ApiVersionsResponse.decode(body, version=version, header=True)
        if resp._header.correlation_id != 100 + version:
            fail(f"v{version}: correlation id {resp._header.correlation_id}")
        if resp.error_code != 0:
            fail(f"v{version}: error {resp.error_code}")
        keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if keys.get(18) != API_VERSIONS_RANGE:
            fail(f"v{version}: ApiVersions range {keys.get(18)}")
        if version >= 3:
            feats = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
            want = FEATURES_V4 if version == 4 else FEATURES_V3
            if feats != want:
                fail(f"v{version}: supported features {feats}, want {want}")
        print(f"  ApiVersions v{version}: ok ({len(keys)} APIs)")
    # v6, newer than served: craft the header by hand (kafka-python's classes stop at v4).
    header = struct.pack(">hhih", 18, 6, 7, -1) + b"\x00"
    body = round_trip(port, struct.pack(">i", len(header)) + header)
    resp = ApiVersionsResponse.decode(body, version=4, header=True)  # error => read as v0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    if resp.error_code != 35 or keys != {18: API_VERSIONS_RANGE}:
        fail(f"v6: error {resp.error_code}, keys {keys}")
    print(f"  ApiVersions v6: UNSUPPORTED_VERSION with ApiVersions {API_VERSIONS_RANGE}: ok")


def check_retry_path(proxy_port):
    from kafka.net.compat import KafkaNetClient
    client = KafkaNetClient(bootstrap_servers=f"127.0.0.1:{proxy_port}", request_timeout_ms=5000)
    manager = client._manager
    conn = manager.get_connection("bootstrap-0", pop_on_close=False, refresh_metadata_on_err=False)

    async def handshake():
        await conn
        return conn.broker_version_data.api_versions

    try:
        api_versions = manager.run(handshake)
    except Exception as e:  # the client's own error, if it could not finish
        fail(f"kafka-python's handshake failed: {type(e).__name__}: {e}")
    finally:
        conn.close()
    if api_versions.get(18) != API_VERSIONS_RANGE:
        fail(f"kafka-python recorded ApiVersions {api_versions.get(18)}")
    if conn._api_versions_idx != 3:
        fail(f"kafka-python settled on ApiVersions v{conn._api_versions_idx}, expected v3")
    print(f"  retry path: kafka-python fell back to v3 and recorded {api_versions}")


def main():
    port, proxy_port = int(sys.argv[1]), int(sys.argv[2])
    check_direct(port)
    check_retry_path(proxy_port)
    print("kafka-python: ok")


if __name__ == "__main__":
    main()
