#!/usr/bin/env python3
"""A loopback TCP proxy for Kafka frames, used by run.sh.

It records every client->server frame of each connection to --record DIR (as
<label>-<conn>-<n>.bin, size prefix included), and can rewrite the first
request of a connection to another ApiVersions version (--first-version) and the
MaxVersion of the ApiVersions entry in an UNSUPPORTED_VERSION answer
(--fallback-max). That lets a real client's own retry path be driven against the
real node. Writes one line per request to stdout: "<conn> <api_key> <version>".
"""
import argparse
import os
import socket
import struct
import sys
import threading


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_frame(sock):
    size = read_exact(sock, 4)
    if size is None:
        return None
    body = read_exact(sock, struct.unpack(">i", size)[0])
    return None if body is None else size + body


def patch_fallback(frame, new_max):
    # size, correlation id, error code, int32 count, then (key, min, max) entries
    error = struct.unpack(">h", frame[8:10])[0]
    if error != 35:
        return frame
    out = bytearray(frame)
    count = struct.unpack(">i", frame[10:14])[0]
    for i in range(count):
        at = 14 + 6 * i
        if struct.unpack(">h", frame[at:at + 2])[0] == 18:
            out[at + 4:at + 6] = struct.pack(">h", new_max)
    return bytes(out)


def serve(client, args, conn_id):
    upstream = socket.create_connection(("127.0.0.1", args.upstream))
    n = 0
    try:
        while True:
            frame = read_frame(client)
            if frame is None:
                return
            key, version = struct.unpack(">hh", frame[4:8])
            if args.record:  # the client's own bytes, before any rewriting
                name = f"{args.label}-{conn_id}-{n}.bin"
                with open(os.path.join(args.record, name), "wb") as f:
                    f.write(frame)
            if n == 0 and args.first_version is not None and key == 18:
                frame = frame[:6] + struct.pack(">h", args.first_version) + frame[8:]
                print(f"{conn_id} {key} {version} rewritten-to {args.first_version}", flush=True)
            else:
                print(f"{conn_id} {key} {version}", flush=True)
            n += 1
            upstream.sendall(frame)
            answer = read_frame(upstream)
            if answer is None:
                return
            if key == 18 and args.fallback_max is not None:
                answer = patch_fallback(answer, args.fallback_max)
            client.sendall(answer)
    except OSError:
        return
    finally:
        client.close()
        upstream.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", type=int, required=True)
    p.add_argument("--record")
    p.add_argument("--label", default="client")
    p.add_argument("--first-version", type=int)
    p.add_argument("--fallback-max", type=int)
    args = p.parse_args()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", args.listen))
    server.listen(16)
    print("ready", flush=True)
    conn_id = 0
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client, args, conn_id), daemon=True).start()
        conn_id += 1


if __name__ == "__main__":
    sys.exit(main())
