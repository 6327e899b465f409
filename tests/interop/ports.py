"""Loopback ports for the interop scripts to listen on: `free_port()` in Python, or
`python3 ports.py` from a shell (free_port.sh), which prints one.

A port comes from below the kernel's ephemeral range (ip_local_port_range). A port inside it
can be taken before the node meant to listen there starts:
- as the local port of a running node's or JVM's outgoing connection, and the node then fails
  with "Address already in use" (CI run 33);
- as the source port of a connection to itself: a node that dials a peer's port before the
  peer listens may be connected to itself (TCP simultaneous open). CI run 29 hit it: Kafka 1
  read its own request back as an answer and held Kafka 2's port.

It is never the same port twice in a run: the ports given are kept in this process and, when
$PORTS_GIVEN names a file (run.sh sets it), in that file, which every script of the run shares.
"""

import os
import random
import socket
import sys

LOW = 20000
_given = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _given_in_run():
    path = os.environ.get("PORTS_GIVEN")
    if not path:
        return set()
    try:
        with open(path) as f:
            return set(int(p) for p in f.read().split())
    except FileNotFoundError:
        return set()


def free_port():
    """A port that was free a moment ago and has not been given before in this run."""
    high = max(_ephemeral_low(), LOW + 1000)
    given = _given | _given_in_run()
    for _ in range(10000):
        port = random.randrange(LOW, high)
        if port in given:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _given.add(port)
        path = os.environ.get("PORTS_GIVEN")
        if path:
            with open(path, "a") as f:
                f.write(f"{port}\n")
        return port
    raise RuntimeError(f"no free port in {LOW}..{high}")


def free_ports(count):
    return [free_port() for _ in range(count)]


if __name__ == "__main__":
    try:
        print(free_port())
    except RuntimeError as e:
        sys.exit(f"free_port: {e}")
