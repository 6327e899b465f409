# Sourced by run.sh and tls.sh: `free_port` prints a loopback port to listen on. Needs $RUN.
# A port that was free a moment ago, below the kernel's ephemeral range (32768 and up): a port
# the kernel hands out (bind to port 0) can be taken, before the node that should listen there
# starts, as the local port of an outgoing connection of a running node or JVM, and the node
# then fails with "Address already in use" (CI run 33). Never the same one twice in a run.
free_port() {
  python3 - "$RUN/ports-given" <<'PY'
import random, socket, sys
given_file = sys.argv[1]
try:
    given = set(int(p) for p in open(given_file).read().split())
except FileNotFoundError:
    given = set()
for _ in range(10000):
    port = random.randrange(20000, 32000)
    if port in given:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    with open(given_file, "a") as f:
        f.write(f"{port}\n")
    print(port)
    sys.exit(0)
sys.exit("free_port: no free port in 20000..32000")
PY
}
