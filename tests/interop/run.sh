#!/usr/bin/env bash
# The interop suite: real clients that no one here wrote, against a real ringraft process on
# 127.0.0.1. It installs what it needs (Debian packages, a Python venv from PyPI, Kafka jars
# from Maven Central, cached in ~/.m2 and tests/interop/.work) and fails, never skips, when a
# tool cannot be had. Ends with the line "interop: N passed, M failed".
#
#   tests/interop/run.sh                       # every check
#   KAFKA_VERSIONS="4.4.0" tests/interop/run.sh
#   RINGRAFT_UPDATE_GOLDEN=1 tests/interop/run.sh   # refresh tests/golden/*.bin captures
#   RINGRAFT_UPGRADE_RUNS=20 tests/interop/run.sh   # also upgrade 20 fresh static quorums
#   CARGO_TARGET_DIR=/elsewhere tests/interop/run.sh # the ringraft binary is built (and taken) there
#   LINCHECK_LONG=1 tests/interop/run.sh        # the linearizability run for 10 minutes, >= 30 kills
#   MIXED_LONG=1 tests/interop/run.sh           # every mixed-quorum layout, 20 leader kills each
#   RINGRAFT=target/release/ringraft tests/interop/tls.sh  # the TLS checks alone, no cargo (see tls.sh)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK="$HERE/.work"
GOLDEN="$ROOT/tests/golden"
KAFKA_VERSIONS=${KAFKA_VERSIONS:-"4.1.2 4.4.0"}
KAFKA_PYTHON_VERSION=3.0.12
mkdir -p "$WORK"

say() { printf 'interop: %s\n' "$*"; }
die() { printf 'interop: %s\n' "$*" >&2; exit 1; }

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null || return 1
  [ "$(id -u)" = 0 ] || return 1
  if [ "$APT_UPDATED" = 0 ]; then apt-get update -qq >/dev/null && APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# need COMMAND PACKAGE: the command, installed from Debian if missing, or a failure that says how.
need() {
  command -v "$1" >/dev/null && return 0
  say "installing $2 (for $1)"
  apt_install "$2" || true
  command -v "$1" >/dev/null || die "$1 is missing and could not be installed: apt-get install $2"
}

# ---- tools -------------------------------------------------------------------------------
need kcat kcat
need java openjdk-17-jdk-headless
need javac openjdk-17-jdk-headless
need mvn maven
need python3 python3
need cargo cargo
need go golang-go
need curl curl
need prometheus prometheus
need promtool prometheus
need openssl openssl
# The fault tests that need root (network namespaces, a loop-mounted filesystem).
need ip iproute2
need tc iproute2
need losetup mount
need mkfs.ext4 e2fsprogs
# The Debian package and its unit.
need dpkg-shlibdeps dpkg-dev
need systemd-analyze systemd

if [ ! -x "$WORK/venv/bin/python" ]; then
  python3 -m venv "$WORK/venv" 2>/dev/null || { apt_install python3-venv || true; python3 -m venv "$WORK/venv"; } \
    || die "cannot create a Python venv: apt-get install python3-venv"
fi
if ! "$WORK/venv/bin/python" -c "import kafka, sys; sys.exit(kafka.__version__ != '$KAFKA_PYTHON_VERSION')" 2>/dev/null; then
  say "installing kafka-python $KAFKA_PYTHON_VERSION from PyPI"
  "$WORK/venv/bin/pip" install -q "kafka-python==$KAFKA_PYTHON_VERSION" \
    || die "cannot install kafka-python==$KAFKA_PYTHON_VERSION from PyPI"
fi

for v in $KAFKA_VERSIONS; do
  jars="$WORK/kafka-$v"
  if [ ! -f "$jars/.complete" ]; then
    say "resolving Apache Kafka $v jars from Maven Central"
    rm -rf "$jars"
    mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" -Dkafka.version="$v" dependency:copy-dependencies \
      -DoutputDirectory="$jars" || die "mvn could not resolve org.apache.kafka $v"
    touch "$jars/.complete"
  fi
  mkdir -p "$WORK/classes-$v"
  javac -d "$WORK/classes-$v" -cp "$jars/*" "$HERE/java/AdminHandshake.java" "$HERE/java/QuorumTool.java" \
    || die "cannot compile the Java probe against Kafka $v"
done

say "building ringraft (release)"
(cd "$ROOT" && cargo build --release --quiet --bin ringraft --example kv)
RINGRAFT="${CARGO_TARGET_DIR:-$ROOT/target}/release/ringraft"
KV="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/kv"

say "building the linearizability checker (Porcupine from the Go module proxy)"
(cd "$HERE/linearizability" && go build -o "$WORK/lincheck" .) \
  || die "cannot build tests/interop/linearizability (Porcupine comes from the Go module proxy)"

# ---- a node on a free port ---------------------------------------------------------------
RUN=$(mktemp -d "$WORK/run.XXXXXX")
. "$HERE/free_port.sh"
PIDS=()
# Processes started inside a check run in its subshell, so they are recorded in a file too.
# A node still shutting down writes into its directory, so the run directory is removed only
# once every process has gone (at most 15 s, then SIGKILL).
running() { # a zombie has exited: its state letter (after the name's parenthesis) is Z
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
  [ -n "$state" ] && [ "$state" != Z ]
}
cleanup() {
  local all p i
  # `|| true`: under set -e a failed substitution fails the assignment (the EXIT trap runs
  # after the run directory is gone, and a failing trap sets the script's exit code).
  all=("${PIDS[@]}" $(cat "$RUN/pids" 2>/dev/null || true))
  for p in "${all[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${all[@]}"; do
    for i in $(seq 150); do running "$p" || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

PORT=$(free_port)
cat > "$RUN/server.properties" <<PROPS
process.roles=controller
node.id=1
listeners=CONTROLLER://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
controller.quorum.voters=1@127.0.0.1:$PORT
metadata.log.dir=$RUN/data
PROPS
CLUSTER_ID=$("$RINGRAFT" storage random-uuid)
"$RINGRAFT" storage format -t "$CLUSTER_ID" -c "$RUN/server.properties" >/dev/null
RUST_LOG=debug "$RINGRAFT" start -c "$RUN/server.properties" > "$RUN/node.log" 2>&1 &
NODE_PID=$!
PIDS+=("$NODE_PID")
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  kill -0 "$NODE_PID" 2>/dev/null || { cat "$RUN/node.log"; die "the node exited at start"; }
  sleep 0.05
done

# proxy LABEL [wire_proxy options]: starts a recording proxy to the node, sets PROXY_PORT/PROXY_LOG.
proxy() {
  local label=$1; shift
  PROXY_PORT=$(free_port)
  PROXY_LOG="$RUN/proxy-$label.log"
  mkdir -p "$RUN/captures"
  python3 "$HERE/wire_proxy.py" --listen "$PROXY_PORT" --upstream "$PORT" \
    --record "$RUN/captures" --label "$label" "$@" > "$PROXY_LOG" 2>&1 &
  PIDS+=("$!"); echo "$!" >> "$RUN/pids"
  for _ in $(seq 100); do grep -q ready "$PROXY_LOG" 2>/dev/null && return 0; sleep 0.05; done
  die "proxy $label did not start"
}

PASSED=0
FAILED=0
check() { # check NAME COMMAND...: runs it, counts it, shows its output on failure
  local name=$1; shift
  if out=$("$@" 2>&1); then
    PASSED=$((PASSED + 1)); say "PASS $name"
  else
    FAILED=$((FAILED + 1)); say "FAIL $name"; printf '%s\n' "$out" | sed 's/^/    /'
  fi
}

# golden LABEL: the client's first frame equals tests/golden/LABEL-api-versions.bin
golden() {
  local label=$1 captured="$RUN/captures/$1-0-0.bin" want="$GOLDEN/$1-api-versions.bin"
  [ -f "$captured" ] || { echo "no frame captured for $label"; return 1; }
  if [ "${RINGRAFT_UPDATE_GOLDEN:-0}" = 1 ]; then cp "$captured" "$want"; echo "updated $want"; return 0; fi
  [ -f "$want" ] || { echo "missing $want: run with RINGRAFT_UPDATE_GOLDEN=1"; return 1; }
  cmp -s "$captured" "$want" || {
    echo "$label's ApiVersions request changed:"; xxd "$captured"; echo "golden:"; xxd "$want"; return 1; }
}

# ---- Java Admin client (bootstrap.controllers), per Kafka version --------------------------
java_admin() {
  local v=$1
  proxy "java-$v"
  timeout 60 java -cp "$WORK/classes-$v:$WORK/kafka-$v/*" AdminHandshake "127.0.0.1:$PROXY_PORT" \
    "$CLUSTER_ID" 1 2>&1 | grep -v '^SLF4J' || return 1
  # On the wire: ApiVersions at the client's newest version (v4 from Kafka 4.1, v5 from 4.4,
  # both served), then DescribeCluster (key 60) at v1 or later, which needs EndpointType.
  # Anything else (a retry at a lower ApiVersions among them) means an answer was not taken.
  local requests
  requests=$(grep -v ready "$PROXY_LOG" | tr '\n' ' ')
  case "$requests" in
    "0 18 4 0 60 "[12]" "*|"0 18 5 0 60 "[12]" "*)
      echo "requests on the wire (conn key version): $requests" ;;
    *) echo "unexpected requests: $requests"; return 1 ;;
  esac
}
for v in $KAFKA_VERSIONS; do
  check "Java Admin $v: ApiVersions handshake, then DescribeCluster names the controller" java_admin "$v"
  check "Java Admin $v: request bytes match tests/golden" golden "java-$v"
done

# ---- kafka-python --------------------------------------------------------------------------
kafka_python() {
  # v6 is newer than served: the node answers UNSUPPORTED_VERSION, the proxy lowers the range
  # it names to 0..3, and the client must retry at v3 (KIP-511).
  proxy kafka-python --first-version 6 --fallback-max 3
  timeout 60 "$WORK/venv/bin/python" "$HERE/kafka_python_check.py" "$PORT" "$PROXY_PORT" || return 1
  grep -q "^0 18 4 rewritten-to 6$" "$PROXY_LOG" && grep -q "^0 18 3$" "$PROXY_LOG" \
    || { echo "kafka-python did not retry v4 -> v3:"; cat "$PROXY_LOG"; return 1; }
}
check "kafka-python $KAFKA_PYTHON_VERSION: ApiVersions v0-v4, v6 refused, and the v3 retry path" kafka_python
check "kafka-python: request bytes match tests/golden" golden kafka-python

# ---- kcat (librdkafka) ---------------------------------------------------------------------
kcat_handshake() {
  proxy kcat
  # kcat then asks for Metadata, which a controller does not serve: that part fails by design.
  timeout 30 kcat -b "127.0.0.1:$PROXY_PORT" -L -d broker,protocol -m 5 > "$RUN/kcat.log" 2>&1 || true
  grep -q "Received ApiVersionResponse (v3" "$RUN/kcat.log" \
    && grep -q "APIVERSION_QUERY -> UP" "$RUN/kcat.log" \
    || { echo "librdkafka did not complete its handshake:"; cat "$RUN/kcat.log"; return 1; }
  kcat -V | head -1
}
check "kcat: librdkafka ApiVersions v3 handshake" kcat_handshake
check "kcat: request bytes match tests/golden" golden kcat

# ---- meta.properties both ways with Kafka's kafka-storage ---------------------------------------
# storage_config DIR PORT: a controller config whose only log directory is DIR.
storage_config() {
  cat <<PROPS
process.roles=controller
node.id=1
listeners=CONTROLLER://127.0.0.1:$2
controller.listener.names=CONTROLLER
controller.quorum.voters=1@127.0.0.1:$2
metadata.log.dir=$1
log.dirs=$1
PROPS
}
kafka_storage() { local v=$1; shift; java -cp "$WORK/kafka-$v/*" kafka.tools.StorageTool "$@" 2>&1 | grep -v '^SLF4J'; }
meta_value() { sed -n "s/^$2=//p" "$1/meta.properties"; }

kafka_reads_ringraft() {
  local v=$1 dir="$RUN/rr-$1" cfg="$RUN/rr-$1.properties" cluster
  storage_config "$dir" "$(free_port)" > "$cfg"
  cluster=$("$RINGRAFT" storage random-uuid)
  "$RINGRAFT" storage format -t "$cluster" -c "$cfg" >/dev/null
  local out want
  out=$(kafka_storage "$v" info -c "$cfg")
  echo "$out"
  want="Found metadata: {cluster.id=$cluster, directory.id=$(meta_value "$dir" directory.id), node.id=1, version=1}"
  grep -qF "$want" <<<"$out" || { echo "expected: $want"; return 1; }
  ! grep -q "Found problem" <<<"$out"
}

ringraft_reads_kafka() {
  local v=$1 dir="$RUN/kk-$1" cfg="$RUN/kk-$1.properties" port cluster
  port=$(free_port)
  storage_config "$dir" "$port" > "$cfg"
  cluster=$("$RINGRAFT" storage random-uuid)
  kafka_storage "$v" format -t "$cluster" -c "$cfg" | grep -v '^Bootstrap metadata'
  local out
  out=$("$RINGRAFT" storage info -c "$cfg") || { echo "$out"; return 1; }
  grep -qF "cluster.id=$cluster, directory.id=$(meta_value "$dir" directory.id), node.id=1" <<<"$out" \
    || { echo "$out"; return 1; }
  # ringraft starts on Kafka's directory, answers, stops, and leaves Kafka's files as they were.
  local before after pid
  before=$(cd "$dir" && find . -type f ! -name .lock | sort | xargs sha1sum)
  "$RINGRAFT" start -c "$cfg" > "$RUN/kk-$v.log" 2>&1 &
  pid=$!; echo "$pid" >> "$RUN/pids"
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
  python3 - "$port" <<'PY' || { kill "$pid"; return 1; }
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
f = bytes.fromhex("0012000000000009ffff")
s.sendall(struct.pack(">i", len(f)) + f)
assert s.recv(8)[4:8] == b"\x00\x00\x00\x09", "no ApiVersions answer"
PY
  kill -TERM "$pid"; wait "$pid" || { echo "ringraft exited non-zero"; return 1; }
  after=$(cd "$dir" && find . -type f ! -name .lock | sort | xargs sha1sum)
  # ringraft adds its own files (the log it opened); every file Kafka wrote must be untouched.
  local missing
  missing=$(comm -23 <(sort <<<"$before") <(sort <<<"$after"))
  [ -z "$missing" ] || { echo "Kafka's files changed or vanished:"; echo "$missing"; return 1; }
  echo "$before"
}

for v in $KAFKA_VERSIONS; do
  check "kafka-storage $v info reads a directory ringraft formatted" kafka_reads_ringraft "$v"
  check "ringraft reads and runs on a directory kafka-storage $v formatted" ringraft_reads_kafka "$v"
done

# ---- the metadata log both ways with Kafka's DumpLogSegments and a real Kafka controller ------
dump_log() { # dump_log VERSION FILES...: Kafka's DumpLogSegments (its class moved in 4.4)
  local v=$1; shift
  local class=kafka.tools.DumpLogSegments listing
  # No `unzip | grep -q` here: under pipefail, grep's early exit makes unzip fail (SIGPIPE).
  listing=$(unzip -l "$WORK/kafka-$v/kafka-tools-$v.jar" 2>/dev/null || true)
  grep -q 'org/apache/kafka/tools/DumpLogSegments.class' <<<"$listing" \
    && class=org.apache.kafka.tools.DumpLogSegments
  local files
  files=$(IFS=,; echo "$*")
  java -cp "$WORK/kafka-$v/*" "$class" --deep-iteration --cluster-metadata-decoder --files "$files" 2>&1 \
    | grep -v '^SLF4J'
}

kafka_reads_ringraft_log() {
  local v=$1 dir="$RUN/ml-$1/__cluster_metadata-0"
  "$RINGRAFT" debug make-log --dir "$dir" > "$RUN/ml-$v.ours" || return 1
  local snap
  snap=$(sed -n 's/^snapshot \([0-9]*\) \([0-9]*\)$/\1 \2/p' "$RUN/ml-$v.ours")
  [ -n "$snap" ] || { echo "make-log wrote no snapshot"; return 1; }
  set -- $snap
  local segments
  segments=$(cd "$dir" && ls ./*.log | wc -l)
  [ "$segments" -ge 3 ] || { echo "expected several segments, got $segments"; return 1; }
  dump_log "$v" "$dir"/*.log "$(printf '%s/%020d-%010d.checkpoint' "$dir" "$1" "$2")" > "$RUN/ml-$v.kafka"
  python3 "$HERE/compare_dump.py" "$RUN/ml-$v.kafka" "$RUN/ml-$v.ours" --snapshot "$1" "$2" || return 1
  # Kafka checks every .index entry against the log it indexes and reports mismatches.
  local index_dump
  index_dump=$(dump_log "$v" "$dir"/*.index "$dir"/*.timeindex)
  grep -q "^offset: " <<<"$index_dump" && grep -q "^timestamp: " <<<"$index_dump" \
    && ! grep -qiE "mismatch|exception|error" <<<"$index_dump" \
    || { echo "index files:"; echo "$index_dump" | head -20; return 1; }
  echo "index and time index files read without mismatches"
}

ringraft_reads_kafka_log() {
  local v=$1 dir="$RUN/kc-$1" cfg="$RUN/kc-$1.properties" port
  port=$(free_port)
  storage_config "$dir" "$port" > "$cfg"
  kafka_storage "$v" format -t "$("$RINGRAFT" storage random-uuid)" -c "$cfg" >/dev/null
  java -Xmx512m -cp "$WORK/kafka-$v/*" kafka.Kafka "$cfg" > "$RUN/kc-$v.out" 2>&1 &
  local pid=$!; echo "$pid" >> "$RUN/pids"
  # Let it elect itself and write its epoch-start batch and some NoOp records (every 500 ms).
  local batches=0
  for _ in $(seq 60); do
    sleep 0.5
    batches=$(dump_log "$v" "$dir"/__cluster_metadata-0/*.log 2>/dev/null | grep -c 'baseOffset:' || true)
    [ "$batches" -ge 12 ] && break
  done
  kill -TERM "$pid"; wait "$pid" || true
  [ "$batches" -ge 12 ] || { echo "the Kafka controller wrote $batches batches"; tail -20 "$RUN/kc-$v.out"; return 1; }
  dump_log "$v" "$dir"/__cluster_metadata-0/*.log > "$RUN/kc-$v.kafka"
  cp -r "$dir/__cluster_metadata-0" "$RUN/kc-$v-copy"
  "$RINGRAFT" debug read-log --dir "$RUN/kc-$v-copy" > "$RUN/kc-$v.ours" || return 1
  grep -q "LeaderChange" "$RUN/kc-$v.ours" || { echo "no LeaderChange read"; return 1; }
  python3 "$HERE/compare_dump.py" "$RUN/kc-$v.kafka" "$RUN/kc-$v.ours"
}

for v in $KAFKA_VERSIONS; do
  check "kafka-dump-log $v reads ringraft's segments and snapshot" kafka_reads_ringraft_log "$v"
  check "ringraft reads the metadata log of a real Kafka $v controller" ringraft_reads_kafka_log "$v"
done

# Every batch ringraft writes carries a Unix-time CreateTime, as DumpLogSegments shows it: a
# --standalone node writes LeaderChange, KRaftVersion and Voters batches at its first epoch
# (they once carried milliseconds since the process started, which Kafka followers copied
# into their time index).
ringraft_create_times() {
  local v=$1 dir="$RUN/ct-$1" cfg="$RUN/ct-$1.properties" port t0 t1 pid
  port=$(free_port)
  cat > "$cfg" <<PROPS
process.roles=controller
node.id=1
listeners=CONTROLLER://127.0.0.1:$port
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=127.0.0.1:$port
metadata.log.dir=$dir
PROPS
  "$RINGRAFT" storage format -t "$("$RINGRAFT" storage random-uuid)" -c "$cfg" --standalone >/dev/null || return 1
  t0=$(date +%s%3N)
  "$RINGRAFT" start -c "$cfg" > "$RUN/ct-$v.log" 2>&1 &
  pid=$!; echo "$pid" >> "$RUN/pids"
  sleep 3
  kill -TERM "$pid"; wait "$pid" || { tail -20 "$RUN/ct-$v.log"; return 1; }
  t1=$(date +%s%3N)
  dump_log "$v" "$dir"/__cluster_metadata-0/*.log > "$RUN/ct-$v.dump"
  python3 - "$t0" "$t1" "$RUN/ct-$v.dump" <<'PY'
import re, sys
t0, t1, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
text = open(path).read()
batches = [l for l in text.splitlines() if l.startswith("baseOffset:")]
stamps = [int(m) for m in re.findall(r"CreateTime: (-?\d+)", text)]
kinds = set(re.findall(r"(LeaderChange|KRaftVersion|KRaftVoters)", text))
print(f"{len(batches)} batches, {len(stamps)} CreateTimes, records: {sorted(kinds)}")
bad = [t for t in stamps if not t0 <= t <= t1]
if not batches or len(stamps) < len(batches) or bad or len(kinds) < 3:
    print(f"outside [{t0}, {t1}]: {bad[:5]}")
    print(text[:3000])
    sys.exit(1)
PY
}
for v in $KAFKA_VERSIONS; do
  check "kafka-dump-log $v shows Unix-time CreateTimes on every batch ringraft writes" ringraft_create_times "$v"
done

# A Raft group of ringraft's own (issue 25) keeps its log in Kafka's layout too: a single-voter
# group kv-0 takes three records, and Kafka's DumpLogSegments reads its segment (its topic's own
# directory and partition.metadata beside it).
group_log_dump() {
  local v=$1 dir="$RUN/gl-$1" cfg="$RUN/gl-$1.properties" port pid
  port=$(free_port)
  { storage_config "$dir" "$port"; echo "ringraft.groups=kv:1@1"; } > "$cfg"
  "$RINGRAFT" storage format -t "$("$RINGRAFT" storage random-uuid)" -c "$cfg" >/dev/null || return 1
  "$RINGRAFT" start -c "$cfg" > "$RUN/gl-$v.log" 2>&1 &
  pid=$!; echo "$pid" >> "$RUN/pids"
  "$RINGRAFT" log append --bootstrap-controller "127.0.0.1:$port" --topic kv --partition 0 \
    first second third || { kill -TERM "$pid"; tail -20 "$RUN/gl-$v.log"; return 1; }
  kill -TERM "$pid"; wait "$pid" || { tail -20 "$RUN/gl-$v.log"; return 1; }
  grep -q "^topic_id: " "$dir/kv-0/partition.metadata" || { echo "no partition.metadata"; return 1; }
  local listing class=kafka.tools.DumpLogSegments
  listing=$(unzip -l "$WORK/kafka-$v/kafka-tools-$v.jar" 2>/dev/null || true)
  grep -q 'org/apache/kafka/tools/DumpLogSegments.class' <<<"$listing" \
    && class=org.apache.kafka.tools.DumpLogSegments
  java -cp "$WORK/kafka-$v/*" "$class" --deep-iteration --print-data-log \
    --files "$(ls "$dir"/kv-0/*.log | head -1)" 2>&1 | grep -v '^SLF4J' > "$RUN/gl-$v.dump"
  for value in first second third; do
    grep -q "payload: $value\$" "$RUN/gl-$v.dump" \
      || { echo "no record $value in:"; head -40 "$RUN/gl-$v.dump"; return 1; }
  done
  grep -q "LeaderChange" "$RUN/gl-$v.dump" || grep -q "isControl: true" "$RUN/gl-$v.dump" \
    || { echo "no epoch-start control batch"; head -40 "$RUN/gl-$v.dump"; return 1; }
  echo "DumpLogSegments read kv-0's three records and its epoch-start batch"
}
for v in $KAFKA_VERSIONS; do
  check "kafka-dump-log $v reads a ringraft group's own log (kv-0)" group_log_dump "$v"
done

# ---- storage format for a dynamic quorum, against Kafka's own kafka-storage ------------------
# Kafka 4.4 is what ringraft writes like (4.1 also wrote a top-level bootstrap.checkpoint and no
# feature records in the snapshot): the newest 4.4+ version listed is the byte reference. Every
# listed version must read what ringraft writes.
FORMAT_V=""
for v in $KAFKA_VERSIONS; do case $v in 3.*|4.[0-3].*) ;; *) FORMAT_V=$v ;; esac; done
FORMAT_CLUSTER=$("$RINGRAFT" storage random-uuid)
DIR1=$("$RINGRAFT" storage random-uuid)
DIR2=$("$RINGRAFT" storage random-uuid)
DIR3=$("$RINGRAFT" storage random-uuid)

format_config() { # format_config DIR NODE_ID PORT QUORUM_LINE: a controller whose one log dir is DIR
  cat <<PROPS
process.roles=controller
node.id=$2
listeners=CONTROLLER://127.0.0.1:$3
controller.listener.names=CONTROLLER
$4
metadata.log.dir=$1
log.dirs=$1
PROPS
}
bootstrap_snapshot() { echo "$1/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"; }

# format_both NAME NODE_ID PORT QUORUM_LINE FLAGS...: the same config and flags through Kafka's
# tool (into $RUN/fmt-NAME-kafka) and ringraft (fmt-NAME-ringraft); then compare_format.py.
format_both() {
  local name=$1 node=$2 port=$3 quorum=$4 tool; shift 4
  for tool in kafka ringraft; do
    format_config "$RUN/fmt-$name-$tool" "$node" "$port" "$quorum" > "$RUN/fmt-$name-$tool.properties"
  done
  java -cp "$WORK/kafka-$FORMAT_V/*" kafka.tools.StorageTool format -t "$FORMAT_CLUSTER" \
    -c "$RUN/fmt-$name-kafka.properties" "$@" > "$RUN/fmt-$name-kafka.out" 2> "$RUN/fmt-$name-kafka.err" \
    || { echo "Kafka's format failed:"; cat "$RUN/fmt-$name-kafka.err"; return 1; }
  "$RINGRAFT" storage format -t "$FORMAT_CLUSTER" -c "$RUN/fmt-$name-ringraft.properties" "$@" \
    > "$RUN/fmt-$name-ringraft.out" 2> "$RUN/fmt-$name-ringraft.err" \
    || { echo "ringraft's format failed:"; cat "$RUN/fmt-$name-ringraft.err"; return 1; }
  python3 "$HERE/compare_format.py" "$RUN/fmt-$name-kafka" "$RUN/fmt-$name-kafka.out" \
    "$RUN/fmt-$name-ringraft" "$RUN/fmt-$name-ringraft.out"
}

# Both tools refuse the combinations of docs/membership.md §9 with the same message, writing nothing.
format_refusals() {
  local port static dynamic case quorum flags tool
  port=$(free_port)
  static="controller.quorum.voters=1@127.0.0.1:$port"
  dynamic="controller.quorum.bootstrap.servers=127.0.0.1:$port"
  for case in "$dynamic|" "$static|--standalone" "$static|--initial-controllers 1@127.0.0.1:$port:$DIR1" \
      "$static|--feature kraft.version=1" "$dynamic|--standalone --feature kraft.version=0" \
      "$dynamic|--no-initial-controllers --feature kraft.version=0"; do
    quorum=${case%%|*}; flags=${case#*|}
    for tool in kafka ringraft; do
      format_config "$RUN/refuse-$tool" 1 "$port" "$quorum" > "$RUN/refuse-$tool.properties"
    done
    local krc=0 rrc=0 kmsg rmsg
    # shellcheck disable=SC2086 # flags are words
    java -cp "$WORK/kafka-$FORMAT_V/*" kafka.tools.StorageTool format -t "$FORMAT_CLUSTER" \
      -c "$RUN/refuse-kafka.properties" $flags > /dev/null 2> "$RUN/refuse-kafka.err" || krc=$?
    # shellcheck disable=SC2086
    "$RINGRAFT" storage format -t "$FORMAT_CLUSTER" -c "$RUN/refuse-ringraft.properties" $flags \
      > /dev/null 2> "$RUN/refuse-ringraft.err" || rrc=$?
    kmsg=$(grep -v '^SLF4J' "$RUN/refuse-kafka.err")
    rmsg=$(sed 's/^ringraft: //' "$RUN/refuse-ringraft.err")
    [ "$krc" = 1 ] && [ "$rrc" = 1 ] && [ "$kmsg" = "$rmsg" ] || {
      echo "[$quorum] $flags: Kafka exit $krc: $kmsg"; echo "ringraft exit $rrc: $rmsg"; return 1; }
    [ ! -e "$RUN/refuse-kafka" ] && [ ! -e "$RUN/refuse-ringraft" ] \
      || { echo "[$quorum] $flags: a directory was written"; return 1; }
    echo "both refuse [${quorum%%=*}] $flags: $rmsg"
  done
}

# Kafka's DumpLogSegments decodes the snapshot of ringraft's --initial-controllers format as it
# decodes Kafka's own from the same flags, and kafka-storage info reads the directory.
kafka_reads_format_both() {
  local port; port=$(cat "$RUN/fmt-ic.port")
  dump_log "$FORMAT_V" "$(bootstrap_snapshot "$RUN/fmt-ic-kafka")" > "$RUN/fmt-ic-kafka.dump"
  dump_log "$FORMAT_V" "$(bootstrap_snapshot "$RUN/fmt-ic-ringraft")" > "$RUN/fmt-ic-ringraft.dump"
  python3 "$HERE/check_bootstrap_dump.py" "$RUN/fmt-ic-ringraft.dump" --kraft-version 1 \
    --voters "1=$DIR1@127.0.0.1:$port,2=$DIR2@localhost:9094,3=$DIR3@0:0:0:0:0:0:0:1:9095" \
    --same-as "$RUN/fmt-ic-kafka.dump"
}

# Every listed version reads a --standalone directory ringraft formatted: kafka-dump-log decodes
# the snapshot field by field (this node as the voter, with meta.properties' directory.id) and
# kafka-storage info shows the identity without problems.
kafka_reads_ringraft_standalone() {
  local v=$1 dir="$RUN/rs-$1" port own out want
  port=$(free_port)
  format_config "$dir" 1 "$port" "controller.quorum.bootstrap.servers=127.0.0.1:$port" > "$dir.properties"
  "$RINGRAFT" storage format -t "$FORMAT_CLUSTER" -c "$dir.properties" --standalone > /dev/null || return 1
  own=$(meta_value "$dir" directory.id)
  dump_log "$v" "$(bootstrap_snapshot "$dir")" > "$dir.dump"
  python3 "$HERE/check_bootstrap_dump.py" "$dir.dump" --kraft-version 1 --voters "1=$own@127.0.0.1:$port" \
    || return 1
  out=$(kafka_storage "$v" info -c "$dir.properties")
  echo "$out"
  want="Found metadata: {cluster.id=$FORMAT_CLUSTER, directory.id=$own, node.id=1, version=1}"
  grep -qF "$want" <<<"$out" && ! grep -q "Found problem" <<<"$out" || { echo "expected: $want"; return 1; }
}

# A real Kafka controller started on ringraft's --standalone directory leads a dynamic quorum
# whose only voter is this node with ringraft's directory id (kafka-metadata-quorum, checked field
# by field).
kafka_runs_on_ringraft_standalone() {
  local v=$1 dir="$RUN/kr-$1" port pid ok=0
  port=$(free_port)
  format_config "$dir" 1 "$port" "controller.quorum.bootstrap.servers=127.0.0.1:$port" > "$dir.properties"
  "$RINGRAFT" storage format -t "$FORMAT_CLUSTER" -c "$dir.properties" --standalone > /dev/null || return 1
  java -Xmx512m -cp "$WORK/kafka-$v/*" kafka.Kafka "$dir.properties" > "$dir.out" 2>&1 &
  pid=$!; echo "$pid" >> "$RUN/pids"
  for _ in $(seq 20); do
    sleep 1
    timeout 30 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.MetadataQuorumCommand \
      --bootstrap-controller "127.0.0.1:$port" describe --status > "$dir.status" 2>&1 \
      && grep -qE '^LeaderId: +1$' "$dir.status" && { ok=1; break; }
  done
  kill -TERM "$pid"; wait "$pid" || true
  [ "$ok" = 1 ] || { cat "$dir.status"; tail -20 "$dir.out"; return 1; }
  grep -v '^SLF4J' "$dir.status"
  python3 "$HERE/check_quorum.py" status "$dir.status" --cluster-id "$FORMAT_CLUSTER" \
    --voters "1=$(meta_value "$dir" directory.id)@$port"
}

check "storage format: a Kafka 4.4+ version to compare with is among KAFKA_VERSIONS ($KAFKA_VERSIONS)" \
  test -n "$FORMAT_V"
if [ -n "$FORMAT_V" ]; then
  FMT_PORT=$(free_port)
  echo "$FMT_PORT" > "$RUN/fmt-ic.port"
  BOOTSTRAP_LINE="controller.quorum.bootstrap.servers=127.0.0.1:$FMT_PORT"
  check "format --standalone = kafka-storage $FORMAT_V's: files, snapshot bytes, meta.properties, output" \
    format_both sa 1 "$FMT_PORT" "$BOOTSTRAP_LINE" --standalone
  check "format --initial-controllers (listed; localhost, [::1]) = kafka-storage $FORMAT_V's" \
    format_both ic 1 "$FMT_PORT" "$BOOTSTRAP_LINE" \
    --initial-controllers "1@127.0.0.1:$FMT_PORT:$DIR1,2@localhost:9094:$DIR2,3@[::1]:9095:$DIR3"
  check "format --initial-controllers (not listed; voters 5, 2 in HashMap order) = kafka-storage $FORMAT_V's" \
    format_both icn 1 "$FMT_PORT" "$BOOTSTRAP_LINE" \
    --initial-controllers "5@h5.example:9093:$DIR1,2@h2.example:9093:$DIR2"
  check "format --no-initial-controllers (kraft.version 1, no voters) = kafka-storage $FORMAT_V's" \
    format_both ni 1 "$FMT_PORT" "$BOOTSTRAP_LINE" --no-initial-controllers
  check "format with controller.quorum.voters (kraft.version 0) = kafka-storage $FORMAT_V's" \
    format_both st 1 "$FMT_PORT" "controller.quorum.voters=1@127.0.0.1:$FMT_PORT"
  check "format -N with controller.quorum.voters (KAFKA-19719: kraft.version 0) = kafka-storage $FORMAT_V's" \
    format_both stn 1 "$FMT_PORT" "controller.quorum.voters=1@127.0.0.1:$FMT_PORT" --no-initial-controllers
  check "format refuses the combinations kafka-storage $FORMAT_V refuses, with its messages" format_refusals
  check "kafka-dump-log $FORMAT_V reads ringraft's --initial-controllers snapshot as it reads Kafka's" \
    kafka_reads_format_both
  check "a Kafka $FORMAT_V controller leads a dynamic quorum from ringraft's --standalone directory" \
    kafka_runs_on_ringraft_standalone "$FORMAT_V"
fi
for v in $KAFKA_VERSIONS; do
  check "kafka-dump-log and kafka-storage info $v read ringraft's --standalone directory" \
    kafka_reads_ringraft_standalone "$v"
done

# ---- kafka-metadata-quorum against a 3-voter ringraft quorum --------------------------------
QUORUM_ID=$("$RINGRAFT" storage random-uuid)
QPORTS=("$(free_port)" "$(free_port)" "$(free_port)")
QVOTERS="1@127.0.0.1:${QPORTS[0]},2@127.0.0.1:${QPORTS[1]},3@127.0.0.1:${QPORTS[2]}"
APORTS=("$(free_port)" "$(free_port)" "$(free_port)")
VOTER_ARG=""
for i in 1 2 3; do
  dir="$RUN/q$i"; mkdir -p "$dir"
  cat > "$dir/server.properties" <<PROPS
process.roles=controller
node.id=$i
listeners=CONTROLLER://127.0.0.1:${QPORTS[$((i - 1))]}
controller.listener.names=CONTROLLER
controller.quorum.voters=$QVOTERS
metadata.log.dir=$dir/data
ringraft.admin.listener=127.0.0.1:${APORTS[$((i - 1))]}
PROPS
  "$RINGRAFT" storage format -t "$QUORUM_ID" -c "$dir/server.properties" >/dev/null
  dirid=$(sed -n 's/^directory.id=//p' "$dir/data/meta.properties")
  VOTER_ARG="$VOTER_ARG${VOTER_ARG:+,}$i=$dirid@${QPORTS[$((i - 1))]}"
  RUST_LOG=info "$RINGRAFT" start -c "$dir/server.properties" > "$dir/node.log" 2>&1 &
  PIDS+=("$!")
done
quorum_elected() {
  for _ in $(seq 100); do
    grep -q 'state=Leader' "$RUN"/q*/node.log 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no leader within 10 s"; tail -5 "$RUN"/q*/node.log; return 1
}
check "a 3-voter ringraft quorum elects a leader" quorum_elected
sleep 1 # followers fetch at least once, so their rows carry times

# ---- Prometheus: the exposition, the rules, and a real server scraping the quorum ------------
promtool_metrics() {
  for p in "${APORTS[@]}"; do
    curl -sf "127.0.0.1:$p/metrics" > "$RUN/metrics-$p.txt" || { echo "no /metrics on $p"; return 1; }
    promtool check metrics < "$RUN/metrics-$p.txt" || return 1
    grep -q '^kafka_server_raft_metrics_high_watermark ' "$RUN/metrics-$p.txt" || return 1
  done
  echo "3 expositions accepted"
}
check "promtool check metrics accepts every node's /metrics" promtool_metrics
check "promtool check rules deploy/prometheus-rules.yml" promtool check rules "$ROOT/deploy/prometheus-rules.yml"
# tests/admin.rs records real nodes' series through a lost majority and a partition and writes
# a promtool unit test; the shipped rules must fire on it, and the no-leader rule as it was
# (current_leader < 0, which a node keeps naming its last leader through both) must not pass.
alerts_fire() {
  local out="$RUN/alerts" old='kafka_server_raft_metrics_current_leader{job="ringraft"} < 0'
  (cd "$ROOT" && RINGRAFT_ALERTS_OUT="$out" cargo test --quiet --test admin -- --ignored --exact \
    shipped_alerts_fire_for_a_lost_majority_and_a_partitioned_node) || return 1
  promtool test rules "$out/alerts-test.yml" || return 1
  sed "s/expr: ringraft_ready{job=\"ringraft\",check=\"leader\"} == 0/expr: $old/" \
    "$ROOT/deploy/prometheus-rules.yml" > "$out/old-rules.yml"
  grep -qF "$old" "$out/old-rules.yml" || { echo "could not rewrite the no-leader rule"; return 1; }
  sed "s|^  - .*/deploy/prometheus-rules.yml\$|  - $out/old-rules.yml|" "$out/alerts-test.yml" \
    > "$out/old-test.yml"
  if promtool test rules "$out/old-test.yml" > "$out/old.out" 2>&1; then
    echo "the old no-leader rule passes on these series too: they prove nothing"; return 1
  fi
  grep -q "FAILED" "$out/old.out" || { cat "$out/old.out"; return 1; }
}
check "alerts: RingraftNoLeader fires for a lost majority and a partitioned node (promtool test rules, recorded series)" \
  alerts_fire
PROM_PORT=$(free_port)
cat > "$RUN/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/deploy/prometheus-rules.yml
scrape_configs:
  - job_name: ringraft
    static_configs:
      - targets: ['127.0.0.1:${APORTS[0]}', '127.0.0.1:${APORTS[1]}', '127.0.0.1:${APORTS[2]}']
YML
prometheus --config.file="$RUN/prometheus.yml" --storage.tsdb.path="$RUN/prometheus-data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$RUN/prometheus.log" 2>&1 &
PIDS+=("$!")
prometheus_scrape() {
  python3 - "$PROM_PORT" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port = sys.argv[1]
def query(q):
    url = f"http://127.0.0.1:{port}/api/v1/query?query=" + urllib.parse.quote(q)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]["result"]
deadline = time.time() + 60
last = None
while time.time() < deadline:
    try:
        leaders = query("kafka_server_raft_metrics_current_leader")
        hwms = query("kafka_server_raft_metrics_high_watermark")
        rules = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5))
    except Exception as e:  # not up yet
        last = e; time.sleep(0.5); continue
    ids = {float(r["value"][1]) for r in leaders}
    groups = rules["data"]["groups"]
    if len(leaders) == 3 and len(ids) == 1 and min(ids) >= 1 and len(hwms) == 3 \
            and all(float(r["value"][1]) > 0 for r in hwms) and groups:
        print(f"leader {int(ids.pop())} on 3 targets; high watermarks",
              sorted(int(float(r['value'][1])) for r in hwms),
              f"; {sum(len(g['rules']) for g in groups)} rules loaded")
        sys.exit(0)
    last = (leaders, hwms)
    time.sleep(0.5)
print("Prometheus never showed one leader and three high watermarks:", last)
sys.exit(1)
PY
}
check "a real Prometheus scrapes the quorum: one leader and three high watermarks" prometheus_scrape

# Through node 3's port: the tool must find the leader through DescribeCluster.
metadata_quorum() { # metadata_quorum VERSION MODE
  local v=$1 mode=$2 out="$RUN/mq-$1-$2.out"
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.MetadataQuorumCommand \
    --bootstrap-controller "127.0.0.1:${QPORTS[2]}" describe "--$mode" > "$out" 2>&1 \
    || { cat "$out"; return 1; }
  grep -v '^SLF4J' "$out"
  python3 "$HERE/check_quorum.py" "$mode" "$out" --cluster-id "$QUORUM_ID" --voters "$VOTER_ARG"
}
# ringraft's own `quorum describe` must print what Kafka's tool prints, checked the same way.
ringraft_quorum() { # ringraft_quorum MODE
  local mode=$1 out="$RUN/rq-$1.out"
  "$RINGRAFT" quorum describe "--$mode" --bootstrap-controller "127.0.0.1:${QPORTS[2]}" > "$out" 2>&1 \
    || { cat "$out"; return 1; }
  cat "$out"
  python3 "$HERE/check_quorum.py" "$mode" "$out" --cluster-id "$QUORUM_ID" --voters "$VOTER_ARG"
}
check "ringraft quorum describe --status, field by field" ringraft_quorum status
check "ringraft quorum describe --replication, field by field" ringraft_quorum replication
for v in $KAFKA_VERSIONS; do
  check "kafka-metadata-quorum $v describe --status, field by field" metadata_quorum "$v" status
  check "kafka-metadata-quorum $v describe --replication, field by field" metadata_quorum "$v" replication
done

LAST_V=${KAFKA_VERSIONS##* }
FIRST_V=${KAFKA_VERSIONS%% *}
# A Kafka controller of the newest version in KAFKA_VERSIONS (4.4+: see the storage-format
# check), a static quorum of one formatted with kafka-storage's defaults, the release ringraft
# formats with: what ringraft's ApiVersions answers are compared with below.
KREF_PORT=$(free_port)
KREF_ID=$("$RINGRAFT" storage random-uuid)
storage_config "$RUN/kref" "$KREF_PORT" > "$RUN/kref.properties"
kafka_storage "$LAST_V" format -t "$KREF_ID" -c "$RUN/kref.properties" >/dev/null
java -Xmx512m -cp "$WORK/kafka-$LAST_V/*" kafka.Kafka "$RUN/kref.properties" > "$RUN/kref.out" 2>&1 &
PIDS+=("$!")
kafka_reference_up() {
  local i
  for i in $(seq 60); do
    timeout 20 java -cp "$WORK/kafka-$LAST_V/*" org.apache.kafka.tools.FeatureCommand \
      --bootstrap-controller "127.0.0.1:$KREF_PORT" describe 2>/dev/null | grep -q '^Feature: metadata.version' \
      && { echo "Kafka $LAST_V controller up on $KREF_PORT"; return 0; }
    sleep 1
  done
  tail -20 "$RUN/kref.out"; return 1
}
check "a Kafka $LAST_V controller to compare with is up" kafka_reference_up

# kafka-features describe reads the features from ApiVersions: every line the same against
# ringraft's static quorum as against the Kafka controller (Epoch masked: each node's own
# offset), kraft.version among them finalized at 0.
kafka_features() { # kafka_features VERSION
  local v=$1 out="$RUN/features-$1.out" ref="$RUN/features-$1.kafka"
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.FeatureCommand \
    --bootstrap-controller "127.0.0.1:${QPORTS[0]}" describe > "$out" 2>&1 || { cat "$out"; return 1; }
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.FeatureCommand \
    --bootstrap-controller "127.0.0.1:$KREF_PORT" describe > "$ref" 2>&1 || { cat "$ref"; return 1; }
  grep -v '^SLF4J' "$out"
  # The epoch is the offset of the last committed record, as a Kafka controller reports it.
  grep -v '^SLF4J' "$out" | tr -s ' \t' ' ' | grep -qxE \
    "Feature: kraft.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 0 Epoch: [0-9]+" \
    || { echo "no kraft.version 0..1, finalized 0"; return 1; }
  diff <(grep -v '^SLF4J' "$out" | sed -E 's/Epoch: [0-9]+/Epoch: -/') \
    <(grep -v '^SLF4J' "$ref" | sed -E 's/Epoch: [0-9]+/Epoch: -/') \
    || { echo "ringraft (<) and Kafka $LAST_V's controller (>) differ"; return 1; }
  echo "the same lines as Kafka $LAST_V's controller prints (Epoch aside)"
}
for v in $KAFKA_VERSIONS; do
  check "kafka-features $v describe: the same lines against ringraft as against Kafka $LAST_V" kafka_features "$v"
done

# ApiVersions v5 (KIP-1242) naming a wrong cluster id, a wrong node id, the right ones, and only
# one of the two: ringraft answers what the Kafka controller answers (error answers byte for
# byte; the others error code and features, the API lists differing by design).
api_versions_v5() {
  python3 "$HERE/api_versions_v5.py" "${QPORTS[0]}" "$QUORUM_ID" "$KREF_PORT" "$KREF_ID" 1
}
check "ApiVersions v5 with a wrong cluster id or node id: ringraft answers as Kafka $LAST_V's controller" \
  api_versions_v5

# kafka-features upgrades a static quorum to kraft.version 1 (docs/membership.md §10): the voters
# have told the leader their directory ids with UpdateRaftVoter, and the leader writes
# KRaftVersion(1) + Voters. Afterwards the quorum is dynamic and describe shows the same voters.
#
# Like a Kafka 4.1+ follower, a ringraft follower sends its first UpdateRaftVoter one fetch
# timeout (2 s) after it starts following, so an upgrade tried sooner is refused ("has not sent
# UpdateRaftVoter"), as it is on Kafka. The check waits the way an operator would: it repeats the
# upgrade while that is the answer, at most 15 times a second apart, and fails on any other
# refusal.
kraft_upgrade() { # kraft_upgrade VERSION PORT...: upgrades through the first port, reads back through the last
  local v=$1; shift
  local first=$1 last=${*: -1} out="$RUN/upgrade-$v-$1.out" tries=0
  while :; do
    tries=$((tries + 1))
    if timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.FeatureCommand \
      --bootstrap-controller "127.0.0.1:$first" upgrade --feature kraft.version=1 > "$out" 2>&1; then
      break
    fi
    if ! grep -q "has not sent UpdateRaftVoter" "$out" || [ "$tries" -ge 15 ]; then
      cat "$out"; echo "upgrade refused (attempt $tries)"; return 1
    fi
    sleep 1
  done
  grep -v '^SLF4J' "$out"
  echo "upgraded on attempt $tries"
  echo "$tries" >> "$RUN/upgrade-attempts"
  grep -qx "kraft.version was upgraded to 1." "$out" || { echo "no upgrade line"; return 1; }
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.FeatureCommand \
    --bootstrap-controller "127.0.0.1:$last" describe > "$out.describe" 2>&1 || return 1
  grep -v '^SLF4J' "$out.describe" | tr -s ' \t' ' ' | grep -q \
    "^Feature: kraft.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 1 " \
    || { cat "$out.describe"; echo "kraft.version is not finalized at 1"; return 1; }
}
check "kafka-features $LAST_V upgrade --feature kraft.version=1 on a static ringraft quorum" \
  kraft_upgrade "$LAST_V" "${QPORTS[0]}" "${QPORTS[1]}"
check "kafka-metadata-quorum $LAST_V describe --status after the kraft.version upgrade" \
  metadata_quorum "$LAST_V" status

# The light observers `ringraft bench fetch` runs (`ringraft debug observe`: Fetch with replica
# ids 1000-1004 and directory ids) are listed by Kafka's tool with their log end offsets. Last
# on this quorum: the leader lists them as observers from then on.
observers_listed() { # observers_listed VERSION
  local v=$1 out="$RUN/mq-observers.out" obs="$RUN/observe.out" pid
  timeout 60 "$RINGRAFT" debug observe --observers 5 --seconds 8 --cluster-id "$QUORUM_ID" \
    --voters "127.0.0.1:${QPORTS[0]},127.0.0.1:${QPORTS[1]},127.0.0.1:${QPORTS[2]}" > "$obs" 2>&1 &
  pid=$!
  sleep 3
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.MetadataQuorumCommand \
    --bootstrap-controller "127.0.0.1:${QPORTS[2]}" describe --replication > "$out" 2>&1 \
    || { cat "$out"; wait "$pid"; return 1; }
  wait "$pid" || { echo "debug observe failed:"; cat "$obs"; return 1; }
  grep -v '^SLF4J' "$out"; cat "$obs"
  python3 - "$out" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.split() and l.split()[0].isdigit()]
observers = {int(r[0]): r for r in rows if r[-1] == "Observer"}
missing = [i for i in range(1000, 1005) if i not in observers]
if missing:
    sys.exit(f"observers {missing} are not listed")
low = {i: observers[i][2] for i in range(1000, 1005) if int(observers[i][2]) <= 0}
if low:
    sys.exit(f"observers without a log end offset: {low}")
print("observers 1000-1004 listed with their log end offsets")
PY
}
check "kafka-metadata-quorum $LAST_V describe --replication lists ringraft's light observers" \
  observers_listed "$LAST_V"

# RINGRAFT_UPGRADE_RUNS=N repeats the upgrade on N fresh static quorums, each upgraded as soon
# as it has elected a leader (issue 14: the check must pass 20 runs in a row).
upgrade_fresh_quorum() { # upgrade_fresh_quorum RUN_NUMBER
  local n=$1 base="$RUN/up$1" id ports=() voters="" pids=() i rc=0
  id=$("$RINGRAFT" storage random-uuid)
  for i in 1 2 3; do ports+=("$(free_port)"); done
  for i in 1 2 3; do voters="$voters${voters:+,}$i@127.0.0.1:${ports[$((i - 1))]}"; done
  for i in 1 2 3; do
    mkdir -p "$base/q$i"
    cat > "$base/q$i/server.properties" <<PROPS
process.roles=controller
node.id=$i
listeners=CONTROLLER://127.0.0.1:${ports[$((i - 1))]}
controller.listener.names=CONTROLLER
controller.quorum.voters=$voters
metadata.log.dir=$base/q$i/data
PROPS
    "$RINGRAFT" storage format -t "$id" -c "$base/q$i/server.properties" >/dev/null
    "$RINGRAFT" start -c "$base/q$i/server.properties" > "$base/q$i/node.log" 2>&1 &
    pids+=("$!"); PIDS+=("$!"); echo "$!" >> "$RUN/pids"
  done
  for _ in $(seq 100); do grep -q 'state=Leader' "$base"/q*/node.log && break; sleep 0.1; done
  kraft_upgrade "$LAST_V" "${ports[@]}" || rc=1
  for i in "${pids[@]}"; do kill -TERM "$i"; done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  [ "$rc" = 0 ] && rm -rf "$base"
  return "$rc"
}
for r in $(seq "${RINGRAFT_UPGRADE_RUNS:-0}"); do
  check "kraft.version upgrade on fresh static quorum $r of $RINGRAFT_UPGRADE_RUNS" upgrade_fresh_quorum "$r"
done
[ -f "$RUN/upgrade-attempts" ] && say "kraft.version upgrade attempts per run: $(tr '\n' ' ' < "$RUN/upgrade-attempts")"

# ---- KIP-853: Kafka's tools add and remove controllers of a live ringraft quorum -------------
# Node 1 is formatted --standalone, nodes 2 and 3 --no-initial-controllers and found as
# observers through controller.quorum.bootstrap.servers; Kafka's kafka-metadata-quorum adds
# them, removes the current leader and adds it back. Every step is checked field by field.
DYN_ID=$("$RINGRAFT" storage random-uuid)
DPORTS=("$(free_port)" "$(free_port)" "$(free_port)")
DBOOT="127.0.0.1:${DPORTS[0]},127.0.0.1:${DPORTS[1]},127.0.0.1:${DPORTS[2]}"
DDIR=()
for i in 1 2 3; do
  dir="$RUN/d$i"; mkdir -p "$dir"
  format_config "$dir/data" "$i" "${DPORTS[$((i - 1))]}" \
    "controller.quorum.bootstrap.servers=$DBOOT" > "$dir/server.properties"
  if [ "$i" = 1 ]; then mode=--standalone; else mode=--no-initial-controllers; fi
  "$RINGRAFT" storage format -t "$DYN_ID" -c "$dir/server.properties" "$mode" >/dev/null
  DDIR[$i]=$(meta_value "$dir/data" directory.id)
  RUST_LOG=info "$RINGRAFT" start -c "$dir/server.properties" > "$dir/node.log" 2>&1 &
  PIDS+=("$!")
done
dvoters() { local out="" i; for i in "$@"; do out="$out${out:+,}$i=${DDIR[$i]}@${DPORTS[$((i - 1))]}"; done; echo "$out"; }
dobservers() { local out="" i; for i in "$@"; do out="$out${out:+,}$i=${DDIR[$i]}"; done; echo "$out"; }
mq() { # mq VERSION ARGS...: kafka-metadata-quorum against the dynamic quorum
  local v=$1; shift
  timeout 90 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.MetadataQuorumCommand \
    --bootstrap-controller "$DBOOT" "$@" 2>&1 | grep -v '^SLF4J'
  return "${PIPESTATUS[0]}"
}
dyn_describe() { # dyn_describe VERSION MODE "VOTER IDS" "OBSERVER IDS": retried while it settles
  local v=$1 mode=$2 out="$RUN/dyn-$1-$2.out"
  for _ in $(seq 20); do
    if mq "$v" describe "--$mode" > "$out" && python3 "$HERE/check_quorum.py" "$mode" "$out" \
      --cluster-id "$DYN_ID" --voters "$(dvoters $3)" --observers "$(dobservers $4)" > "$out.check" 2>&1
    then cat "$out" "$out.check"; return 0; fi
    sleep 0.5
  done
  cat "$out" "$out.check"; return 1
}
dyn_add() { # dyn_add VERSION ID: add-controller from node ID's own config
  local v=$1 id=$2 out want
  out=$(mq "$v" --command-config "$RUN/d$id/server.properties" add-controller) || { echo "$out"; return 1; }
  echo "$out"
  want="Added controller $id with directory id ${DDIR[$id]} and endpoints: CONTROLLER://127.0.0.1:${DPORTS[$((id - 1))]}"
  [ "$out" = "$want" ] || { echo "expected: $want"; return 1; }
}
dyn_leader() { "$RINGRAFT" quorum describe --status --bootstrap-controller "$DBOOT" | sed -n 's/^LeaderId: *//p'; }
dyn_remove_leader() { # dyn_remove_leader VERSION: removes the current leader; records its id
  local v=$1 leader out
  leader=$(dyn_leader)
  [ -n "$leader" ] || { echo "no leader"; return 1; }
  echo "$leader" > "$RUN/dyn-removed"
  out=$(mq "$v" remove-controller --controller-id "$leader" --controller-directory-id "${DDIR[$leader]}") \
    || { echo "$out"; return 1; }
  echo "$out"
  # Kafka 4.1 prints two spaces after "Removed", 4.4 one.
  [ "$(tr -s ' ' <<<"$out")" = "Removed KRaft controller $leader with directory id ${DDIR[$leader]}" ] \
    || { echo "unexpected output"; return 1; }
}
dyn_ready() {
  for _ in $(seq 100); do
    grep -q 'state=Leader' "$RUN/d1/node.log" 2>/dev/null && return 0
    sleep 0.1
  done
  tail -5 "$RUN"/d*/node.log; return 1
}
check "dynamic quorum: the --standalone node leads" dyn_ready
check "kafka-metadata-quorum $LAST_V describe --status: voter 1, observers 2 and 3 (bootstrap servers)" \
  dyn_describe "$LAST_V" status "1" "2 3"
check "kafka-metadata-quorum $FIRST_V add-controller 2" dyn_add "$FIRST_V" 2
check "describe --status after adding 2: voters 1 2, observer 3" dyn_describe "$LAST_V" status "1 2" "3"
check "kafka-metadata-quorum $LAST_V add-controller 3" dyn_add "$LAST_V" 3
check "kafka-metadata-quorum $FIRST_V describe --status: voters 1 2 3" dyn_describe "$FIRST_V" status "1 2 3" ""
check "kafka-metadata-quorum $LAST_V describe --replication: voters 1 2 3" \
  dyn_describe "$LAST_V" replication "1 2 3" ""
check "kafka-metadata-quorum $LAST_V remove-controller of the current leader" dyn_remove_leader "$LAST_V"
REMOVED=$(cat "$RUN/dyn-removed" 2>/dev/null || echo 0)
REST=$(for i in 1 2 3; do [ "$i" != "$REMOVED" ] && printf '%s ' "$i"; done)
check "describe --status after removing the leader $REMOVED: voters $REST, it observes" \
  dyn_describe "$LAST_V" status "$REST" "$REMOVED"
check "kafka-metadata-quorum $FIRST_V add-controller $REMOVED back" dyn_add "$FIRST_V" "$REMOVED"
check "kafka-metadata-quorum $LAST_V describe --replication: voters 1 2 3 again" \
  dyn_describe "$LAST_V" replication "1 2 3" ""
dyn_features() { # kraft.version is finalized at 1 on a dynamic quorum
  local v=$1 out="$RUN/dyn-features-$1.out"
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.FeatureCommand \
    --bootstrap-controller "127.0.0.1:${DPORTS[1]}" describe > "$out" 2>&1 || { cat "$out"; return 1; }
  grep -v '^SLF4J' "$out"
  grep -v '^SLF4J' "$out" | tr -s ' \t' ' ' | grep -q \
    "^Feature: kraft.version SupportedMinVersion: 0 SupportedMaxVersion: 1 FinalizedVersionLevel: 1 "
}
for v in $KAFKA_VERSIONS; do
  check "kafka-features $v describe on the dynamic quorum: kraft.version finalized 1" dyn_features "$v"
done

# A directory Kafka's kafka-storage format --standalone wrote starts a ringraft node, which
# leads with Kafka's voter record (its directory id) as the voter set.
ringraft_on_kafka_standalone() { # ringraft_on_kafka_standalone VERSION
  local v=$1 dir="$RUN/kfs-$1" port pid ok=0
  port=$(free_port)
  format_config "$dir" 1 "$port" "controller.quorum.bootstrap.servers=127.0.0.1:$port" > "$dir.properties"
  kafka_storage "$v" format -t "$FORMAT_CLUSTER" -c "$dir.properties" --standalone > "$dir.format" \
    || { cat "$dir.format"; return 1; }
  RUST_LOG=info "$RINGRAFT" start -c "$dir.properties" > "$dir.log" 2>&1 &
  pid=$!; echo "$pid" >> "$RUN/pids"
  for _ in $(seq 40); do
    sleep 0.25
    timeout 30 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.MetadataQuorumCommand \
      --bootstrap-controller "127.0.0.1:$port" describe --status > "$dir.status" 2>&1 \
      && grep -qE '^LeaderId: +1$' "$dir.status" && { ok=1; break; }
  done
  kill -TERM "$pid"; wait "$pid" || { echo "ringraft exited non-zero"; tail -20 "$dir.log"; return 1; }
  [ "$ok" = 1 ] || { cat "$dir.status"; tail -20 "$dir.log"; return 1; }
  grep -v '^SLF4J' "$dir.status"
  python3 "$HERE/check_quorum.py" status "$dir.status" --cluster-id "$FORMAT_CLUSTER" \
    --voters "1=$(meta_value "$dir" directory.id)@$port"
}
for v in $KAFKA_VERSIONS; do
  check "ringraft starts on a directory kafka-storage $v format --standalone wrote" \
    ringraft_on_kafka_standalone "$v"
done

# ---- TLS: CONTROLLER:SSL with client certificates required (tls.sh, which also runs alone) -----
. "$HERE/tls.sh"

# ---- systemd: Type=notify reaches "active" only once the listener accepts -------------------
if [ -d /run/systemd/system ]; then
  systemd_notify() {
    local dir="$RUN/sd" port unit="ringraft-interop-$$"
    port=$(free_port); mkdir -p "$dir"
    cat > "$dir/server.properties" <<PROPS
process.roles=controller
node.id=1
listeners=CONTROLLER://127.0.0.1:$port
controller.listener.names=CONTROLLER
controller.quorum.voters=1@127.0.0.1:$port
metadata.log.dir=$dir/data
PROPS
    "$RINGRAFT" storage format -t "$("$RINGRAFT" storage random-uuid)" -c "$dir/server.properties" >/dev/null
    # With Type=notify, systemd-run returns once the unit is active (READY=1) or failed.
    systemd-run --unit "$unit" -p Type=notify -p NotifyAccess=main -p LimitMEMLOCK=64M --collect \
      "$RINGRAFT" start -c "$dir/server.properties" || return 1
    local state; state=$(systemctl is-active "$unit")
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),2)" \
      || { echo "active ($state) but the listener refuses"; systemctl stop "$unit"; return 1; }
    systemctl stop "$unit"
    [ "$state" = active ] || { echo "unit state $state"; return 1; }
    echo "active, and the listener accepted at once"
  }
  check "systemd-run -p Type=notify: active only once the listener accepts" systemd_notify
else
  say "SKIP systemd-run -p Type=notify: this machine runs no systemd (PID 1 is $(ps -p 1 -o comm=)); tests/notify.rs checks the protocol without it"
fi

# ---- linearizability: examples/kv under kills and pauses, checked by Porcupine ---------------
lincheck() { # lincheck NAME ARGS...: a run in its own directory; its output kept beside it
  local dir="$RUN/lincheck-$1" rc=0; shift
  "$WORK/lincheck" -kv "$KV" -work "$dir" "$@" > "$dir.out" 2>&1 || rc=$?
  cat "$dir.out"
  return "$rc"
}
lincheck_summary() { # the figures of run NAME, for the log
  grep -hE 'operations:|Porcupine says' "$RUN/lincheck-$1.out" 2>/dev/null | sed 's/^/    /' || true
}
if [ "${LINCHECK_LONG:-0}" = 1 ]; then
  check "linearizability: kv under 10 minutes of kills and pauses (>= 30 kills), Porcupine: Ok" \
    lincheck long -duration 10m -min-kills 30 -keys 10 -rate 60
  lincheck_summary long
else
  check "linearizability: kv under 60 s of kills and pauses (>= 3 kills), Porcupine: Ok" \
    lincheck short -duration 60s -min-kills 3
  lincheck_summary short
  # kv never calls for a snapshot: the node's policy asks it (8 KiB between snapshots), and
  # retention (16 KiB) moves the log start.
  check "linearizability: kv snapshotted by ringraft's policy and retention moved its log start" \
    bash -c "cat '$RUN'/lincheck-short/n*.log | grep -q 'snapshot due by policy' &&
             cat '$RUN'/lincheck-short/n*.log | grep -q 'retention: the log now starts'"
fi
check "linearizability: kv's broken read path (no read fence) is flagged Illegal" \
  lincheck mutation -duration 20s -mutation
lincheck_summary mutation
# kv's keys spread over 4 Raft groups of their own (ringraft.groups, issue 25): each group
# elects and commits on its own, and the history stays linearizable; the broken read path is
# still caught there. 60 s, as the one-group run: faults come every 6 s plus each fault's own
# 0.5-4 s, so 40 s held the third kill only when the random sleeps were short.
check "linearizability: kv over 4 groups under 60 s of kills and pauses (>= 3 kills), Porcupine: Ok" \
  lincheck groups -duration 60s -min-kills 3 -groups 4 -keys 8
lincheck_summary groups
check "linearizability: kv over 4 groups, broken read path flagged Illegal" \
  lincheck groups-mutation -duration 20s -mutation -groups 4 -keys 8
lincheck_summary groups-mutation

# ---- a mixed quorum: ringraft voters beside real Kafka controllers ----------------------------
# mixed_quorum.py says what each run checks. Kafka's controllers log through slf4j-simple here
# (Kafka's jars bring no binding), so that their ERROR lines can be checked.
LOGGING_JAR="$WORK/logging/slf4j-simple-1.7.36.jar"
if [ ! -f "$LOGGING_JAR" ]; then
  mvn -q -B -Dstyle.color=never dependency:copy -Dartifact=org.slf4j:slf4j-simple:1.7.36 \
    -DoutputDirectory="$WORK/logging" || die "mvn could not resolve org.slf4j:slf4j-simple:1.7.36"
fi
mixed() { # mixed VERSION static|dynamic ARGS...
  local v=$1 mode=$2; shift 2
  local dir="$RUN/mixed-$v-$mode-$(date +%s%N)"
  python3 "$HERE/mixed_quorum.py" "$mode" "$@" --kafka-jars "$WORK/kafka-$v" \
    --tool-classes "$WORK/classes-$v" --logging-jar "$LOGGING_JAR" --ringraft "$RINGRAFT" \
    --work "$dir" --pids "$RUN/pids" 2>&1 | tee "$dir.out"
}
MIXED_NEWEST=${KAFKA_VERSIONS##* }
if [ "${MIXED_LONG:-0}" = 1 ]; then
  seed=0
  for v in $KAFKA_VERSIONS; do
    for layout in KRR KKR KKW; do
      seed=$((seed + 1))
      check "mixed quorum $layout on Kafka $v: 20 leader kills (SIGKILL and SIGTERM), restarts" \
        mixed "$v" static --layout "$layout" --kills 20 --seed "$seed"
    done
  done
else
  check "mixed quorum KKW (2 Kafka $MIXED_NEWEST controllers + 1 ringraft witness): 3 leader kills" \
    mixed "$MIXED_NEWEST" static --layout KKW --kills 3 --seed 1
fi
# Issue 25: the two ringraft voters of a KRR quorum also host 64 Raft groups of their own. The
# metadata quorum with Kafka behaves as before (leader kills, converged logs, no Kafka ERROR),
# and every group is led by a ringraft voter and takes a record.
check "mixed quorum KRR on Kafka $MIXED_NEWEST with 64 ringraft-only groups on the ringraft voters: 3 leader kills" \
  mixed "$MIXED_NEWEST" static --layout KRR --kills 3 --seed 2 --groups 64
# ringraft quorum transfer-leader: the ringraft leader hands over to a named Kafka controller and
# to the other ringraft voter in turn (docs/operations.md, "Moving the leadership").
check "mixed quorum KRR on Kafka $MIXED_NEWEST: transfer-leader to a Kafka controller and to a ringraft voter, 4 times; Fetch v18 both ways" \
  mixed "$MIXED_NEWEST" transfer --layout KRR --kills 4
# ringraft storage recover-quorum after losing two of three voters; Kafka's tools see the new
# voter set and Kafka's add-controller adds two Kafka controllers back in the lost ids.
check "recover-quorum on the survivor of 3 ringraft voters; kafka-metadata-quorum shows [3]; Kafka $MIXED_NEWEST controllers added back with add-controller" \
  mixed "$MIXED_NEWEST" recover
# A witness beside Kafka controllers that snapshot and delete by retention adopts their
# snapshots, so that its own directory stays bounded (docs/raft.md §11.6).
check "witness beside 2 Kafka $MIXED_NEWEST controllers adopts their snapshots: log start moves, directory within retention + 2 snapshots + 1 segment, DumpLogSegments reads them" \
  mixed "$MIXED_NEWEST" adopt
# The same over mTLS, with the certificates of the TLS section (tls.sh).
check "mixed TLS quorum KKW (2 Kafka $MIXED_NEWEST controllers + 1 ringraft witness, mTLS): 2 leader kills" \
  mixed "$MIXED_NEWEST" static --layout KKW --kills 2 --seed 5 --tls "$TLS_DIR"
for v in $KAFKA_VERSIONS; do
  check "mixed quorum: Kafka $v's add-controller / remove-controller of a ringraft node (--standalone)" \
    mixed "$v" dynamic
done

# ---- the Debian package -------------------------------------------------------------------
# cargo deb packs the release binary built above with the unit and configuration; dpkg -i must
# create the user and the state directory and format the packaged single voter; the unit
# passes systemd-analyze verify; the installed binary serves the embedded default, and the
# packaged configuration as the ringraft user. CI is a fresh machine; elsewhere an installed
# ringraft package is left alone (the check fails saying so).
CARGO_DEB_VERSION=3.8.0
deb_package() {
  [ "$(id -u)" = 0 ] || { echo "needs root (dpkg -i)"; return 1; }
  if dpkg -s ringraft >/dev/null 2>&1; then
    echo "a ringraft package is already installed here: dpkg --purge ringraft first"; return 1
  fi
  if [ ! -x "$WORK/tools/bin/cargo-deb" ]; then
    cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION" --root "$WORK/tools" \
      || { echo "cannot install cargo-deb $CARGO_DEB_VERSION from crates.io"; return 1; }
  fi
  local deb
  deb=$(cd "$ROOT" && "$WORK/tools/bin/cargo-deb" --no-build --quiet --output "$RUN/deb/") \
    || { echo "cargo deb failed"; return 1; }
  deb=$(ls "$RUN"/deb/*.deb) || return 1
  dpkg -i "$deb" || return 1
  local rc=0
  deb_installed || rc=1
  dpkg --purge ringraft >/dev/null || { echo "dpkg --purge failed"; rc=1; }
  userdel ringraft 2>/dev/null || true
  rm -rf /var/lib/ringraft
  return $rc
}
deb_installed() {
  getent passwd ringraft >/dev/null || { echo "no ringraft user"; return 1; }
  [ "$(stat -c %U /var/lib/ringraft)" = ringraft ] || { echo "/var/lib/ringraft not the user's"; return 1; }
  [ -f /var/lib/ringraft/data/meta.properties ] || { echo "the packaged config was not formatted"; return 1; }
  systemd-analyze verify /lib/systemd/system/ringraft.service || return 1
  "$ROOT/.ci/installed-smoke" /usr/bin/ringraft || return 1
  # The unit's ExecStart, as its user, in its working directory: leads and is ready.
  (cd /var/lib/ringraft && exec setpriv --reuid=ringraft --regid=ringraft --init-groups \
    /usr/bin/ringraft start -c /etc/ringraft/server.properties > "$RUN/deb-node.log" 2>&1) &
  local pid=$! ok=0
  for _ in $(seq 100); do
    curl -sf http://127.0.0.1:9094/readyz >/dev/null && { ok=1; break; }
    sleep 0.1
  done
  kill -TERM "$pid"; wait "$pid" || { echo "the packaged node exited non-zero"; ok=0; }
  [ "$ok" = 1 ] || { echo "the packaged node was not ready within 10 s"; tail -5 "$RUN/deb-node.log"; return 1; }
}
check "Debian package: cargo deb, dpkg -i, user and state directory, unit verified, the node serves" \
  deb_package

# ---- the fault tests that need root --------------------------------------------------------
# `cargo test` must pass as any user, so tests/faults.rs ignores these two; they run here, where
# CI is root. Failing to make a namespace or a loop mount fails them (never a skip).
root_faults() {
  [ "$(id -u)" = 0 ] || { echo "needs root (ip netns, losetup, mount): run this suite as root"; return 1; }
  (cd "$ROOT" && cargo test --quiet --test faults -- --ignored --exact \
    partitions_in_network_namespaces_lose_no_acknowledged_write \
    a_full_disk_stops_the_node_which_catches_up_once_freed)
}
check "fault suite, root part: partitions in network namespaces and a full disk lose nothing" \
  root_faults

# ---- the node stops cleanly ------------------------------------------------------------------
kill -TERM "$NODE_PID"
NODE_RC=0
wait "$NODE_PID" || NODE_RC=$?
stopped_cleanly() {
  [ "$NODE_RC" = 0 ] || { echo "exit code $NODE_RC"; tail -20 "$RUN/node.log"; return 1; }
  ! grep -qE "panicked|ERROR" "$RUN/node.log" || { grep -E "panicked|ERROR" "$RUN/node.log"; return 1; }
  grep -q "ringraft::node: stopped" "$RUN/node.log" || { echo "no 'stopped' line"; return 1; }
}
check "node: SIGTERM after the suite, exit 0, no errors logged" stopped_cleanly

say "$PASSED passed, $FAILED failed"
cleanup
[ "$FAILED" = 0 ] && rm -rf "$RUN"
[ "$FAILED" = 0 ]
