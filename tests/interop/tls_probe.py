#!/usr/bin/env python3
"""One ApiVersions request (v0, correlation id 9) to a controller listener, in plaintext or
over TLS through Python's ssl module (OpenSSL), and what came of it.

    tls_probe.py PORT --plaintext --expect refused
    tls_probe.py PORT --ca CA.pem [--cert KEY_AND_CERT.pem] --expect answered|refused

Over TLS the server's chain is verified against CA for 127.0.0.1 (hostname verification on).
Unlike Kafka's Java client, which offers its certificate only when its issuer is among the
certificate authorities the server names, OpenSSL presents --cert whatever the server names:
so an untrusted certificate reaches the server's verification.

"answered": an ApiVersions response with correlation id 9 and error code 0 came back.
"refused": no Kafka answer; the connection was closed or reset, or failed with a TLS alert, or
(plaintext) was answered with a TLS record or nothing within 5 s.
Exits 1, saying what happened, when the outcome is not the one expected.
"""
import argparse
import socket
import ssl
import struct
import sys

REQUEST = bytes.fromhex("0012000000000009ffff")  # ApiVersions v0, correlation id 9, no client id


def read_answer(sock):
    """Bytes the server sent until it closed (at most 4 KiB), and how it ended."""
    got = b""
    try:
        while len(got) < 4096:
            chunk = sock.recv(4096)
            if not chunk:
                return got, "closed"
            got += chunk
            if len(got) >= 4 and len(got) >= 4 + struct.unpack(">i", got[:4])[0]:
                return got, "a whole frame"
    except socket.timeout:
        return got, "no answer in 5 s"
    except ConnectionResetError:
        return got, "reset"
    except ssl.SSLError as e:
        return got, f"TLS error: {e.reason or e}"
    return got, "4 KiB read"


def is_answer(got):
    return len(got) >= 10 and got[4:8] == b"\x00\x00\x00\x09" and got[8:10] == b"\x00\x00"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--plaintext", action="store_true")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--expect", choices=["answered", "refused"], required=True)
    a = p.parse_args()
    raw = socket.create_connection(("127.0.0.1", a.port), timeout=5)
    print("from 127.0.0.1:%d" % raw.getsockname()[1], flush=True)  # for the server's log
    frame = struct.pack(">i", len(REQUEST)) + REQUEST
    if a.plaintext:
        raw.sendall(frame)
        got, how = read_answer(raw)
        what = f"plaintext: {how}; received {got[:16].hex() or 'nothing'}"
        if got[:1] == b"\x15":
            what += " (a TLS alert)"
        if got and not is_answer(got) and not (got[0] in (0x15, 0x16) and got[1:2] == b"\x03"):
            sys.exit(f"{what}: neither a Kafka answer nor a TLS record")
    else:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the name
        ctx.load_verify_locations(a.ca)
        if a.cert:
            ctx.load_cert_chain(a.cert)
        try:
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            version = s.version()
            s.sendall(frame)
            got, how = read_answer(s)
        except ssl.SSLError as e:
            version, got, how = "no session", b"", f"TLS error in the handshake: {e.reason or e}"
        except (ConnectionResetError, BrokenPipeError) as e:
            version, got, how = "no session", b"", f"{type(e).__name__}"
        cert = f"certificate {a.cert.rsplit('/', 1)[-1]}" if a.cert else "no certificate"
        what = f"TLS ({version}), {cert}: {how}"
        if is_answer(got):
            what += f"; ApiVersions answered, {len(got)} bytes"
        elif got:
            what += f"; received {got[:16].hex()}"
    outcome = "answered" if is_answer(got) else "refused"
    print(what)
    if outcome != a.expect:
        sys.exit(f"expected {a.expect}, was {outcome}")


if __name__ == "__main__":
    main()
