#!/usr/bin/env bash
# Restarts the voters of a quorum one at a time without an election timeout's pause
# (docs/operations.md, "Moving the leadership"). For each node id given, in order:
#   1. if it leads, `ringraft quorum transfer-leader` moves the leadership to the next id
#      given (wrapping around);
#   2. RESTART_CMD runs with {id} replaced by the node id (for example
#      'ssh n{id} sudo systemctl restart ringraft');
#   3. it waits until the quorum has a leader and node {id} has no lag
#      (`ringraft quorum describe --replication`).
#
#   deploy/rolling-restart.sh --bootstrap-controller HOST:PORT[,...] --restart 'CMD {id}' ID ID ...
#
# RINGRAFT (default: ringraft on PATH) is the binary to call. Stops at the first step that fails.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BOOTSTRAP="" RESTART="" IDS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bootstrap-controller) BOOTSTRAP="$2"; shift 2 ;;
    --restart) RESTART="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "rolling-restart: unknown option $1" >&2; usage ;;
    *) IDS+=("$1"); shift ;;
  esac
done
[ -n "$BOOTSTRAP" ] && [ -n "$RESTART" ] && [ "${#IDS[@]}" -ge 2 ] || usage
RINGRAFT=${RINGRAFT:-ringraft}
WAIT_S=${ROLLING_WAIT_S:-120}

leader() {
  "$RINGRAFT" quorum describe --status --bootstrap-controller "$BOOTSTRAP" 2>/dev/null \
    | awk '$1 == "LeaderId:" { print $2 }'
}

# Lag of node $1 as the leader reports it; empty when unknown.
lag_of() {
  "$RINGRAFT" quorum describe --replication --bootstrap-controller "$BOOTSTRAP" 2>/dev/null \
    | awk -v id="$1" 'NR > 1 && $1 == id { print $4 }'
}

for i in "${!IDS[@]}"; do
  id=${IDS[$i]}
  next=${IDS[$(( (i + 1) % ${#IDS[@]} ))]}
  if [ "$(leader)" = "$id" ]; then
    echo "rolling-restart: node $id leads; moving the leadership to $next"
    "$RINGRAFT" quorum transfer-leader --to "$next" --bootstrap-controller "$BOOTSTRAP"
  fi
  echo "rolling-restart: restarting node $id"
  sh -c "${RESTART//\{id\}/$id}"
  deadline=$(( $(date +%s) + WAIT_S ))
  until [ -n "$(leader)" ] && [ "$(lag_of "$id")" = 0 ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "rolling-restart: node $id did not catch up within ${WAIT_S} s; stopping here" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "rolling-restart: node $id is back and caught up"
done
