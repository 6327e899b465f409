# Sourced by run.sh and tls.sh: `free_port` prints a loopback port to listen on (ports.py says
# which, and why). Needs $RUN: the ports given in the run are kept in $RUN/ports-given, shared
# with the Python scripts the run starts.
export PORTS_GIVEN="$RUN/ports-given"
free_port() {
  python3 "$HERE/ports.py"
}
