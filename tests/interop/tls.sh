#!/usr/bin/env bash
# ---- TLS: CONTROLLER:SSL with ssl.client.auth=required, on the listener and between voters ------
# A 3-voter quorum whose controller listener is TLS with client certificates required, configured
# with Kafka's own keys in the three forms Kafka accepts: node 1 with PEM files
# (ssl.keystore.location), node 2 with inline PEM (ssl.keystore.certificate.chain,
# ssl.keystore.key, ssl.truststore.certificates, continued over lines as Java properties are),
# node 3 with the listener.name.controller. prefixed keys. Hostname verification is on (Kafka's
# default, ssl.endpoint.identification.algorithm=https): the certificates name 127.0.0.1.
# Electing a leader and replicating to the followers needs the voters' own connections to be
# TLS with client certificates. Then: Kafka's kafka-metadata-quorum over SSL (the same
# client.properties a Kafka controller accepts), refused with an untrusted client certificate or
# none (and the node logs the refusal, naming the peer); an OpenSSL client (tls_probe.py) is
# answered with the suite's certificate and refused with the untrusted one; a plaintext client
# gets no Kafka answer.
#
# Sourced by run.sh, which defines say, check, free_port, RUN, PIDS, WORK, HERE, RINGRAFT,
# KAFKA_VERSIONS. Run alone (the Kafka jars must be in tests/interop/.work, as run.sh leaves them;
# no cargo: the binary is given), with the mixed TLS quorum of run.sh after it:
#
#   RINGRAFT=target/release/ringraft tests/interop/tls.sh
#   TLS_SERVER=kafka tests/interop/tls.sh     # the same checks against 3 Kafka controllers, to
#                                             # check the checks (ringraft is not started)
#   TLS_MIXED=0 ...                           # without the mixed quorum
#   TLS_VERBOSE=1 ...                         # every check's output, and the run's files kept

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # ---- alone: the part of run.sh's harness this section uses ----------------------------------
  set -euo pipefail
  HERE=$(cd "$(dirname "$0")" && pwd)
  ROOT=$(cd "$HERE/../.." && pwd)
  WORK="$HERE/.work"
  KAFKA_VERSIONS=${KAFKA_VERSIONS:-"4.1.2 4.4.0"}
  say() { printf 'interop: %s\n' "$*"; }
  die() { printf 'interop: %s\n' "$*" >&2; exit 1; }
  command -v openssl >/dev/null || die "openssl is missing: apt-get install openssl"
  TLS_SERVER=${TLS_SERVER:-ringraft}
  RINGRAFT=${RINGRAFT:-${CARGO_TARGET_DIR:-$ROOT/target}/release/ringraft}
  [ "$TLS_SERVER" = kafka ] || [ -x "$RINGRAFT" ] || die "no ringraft binary at $RINGRAFT: set RINGRAFT"
  LOGGING_JAR="$WORK/logging/slf4j-simple-1.7.36.jar"
  [ -f "$LOGGING_JAR" ] || die "no $LOGGING_JAR: run tests/interop/run.sh once"
  for v in $KAFKA_VERSIONS; do
    [ -f "$WORK/kafka-$v/.complete" ] || die "no Kafka $v jars in $WORK: run tests/interop/run.sh once"
    class="$WORK/classes-$v/QuorumTool.class"   # mixed_quorum.py's tool, built as run.sh builds it
    [ "$class" -nt "$HERE/java/QuorumTool.java" ] || {
      mkdir -p "$WORK/classes-$v"
      javac -d "$WORK/classes-$v" -cp "$WORK/kafka-$v/*" "$HERE/java/QuorumTool.java" \
        || die "cannot compile java/QuorumTool.java against Kafka $v"
    }
  done
  RUN=$(mktemp -d "$WORK/run.XXXXXX")
  . "$HERE/free_port.sh"
  PIDS=()
  cleanup() {
    for p in "${PIDS[@]}" $(cat "$RUN/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  }
  trap cleanup EXIT
  PASSED=0
  FAILED=0
  check() {
    local name=$1; shift
    if out=$("$@" 2>&1); then
      PASSED=$((PASSED + 1)); say "PASS $name"
      if [ "${TLS_VERBOSE:-0}" = 1 ]; then printf '%s\n' "$out" | sed 's/^/    /'; fi
    else
      FAILED=$((FAILED + 1)); say "FAIL $name"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
  }
  TLS_ALONE=1
else
  TLS_SERVER=ringraft
fi

TLS_LAST_V=${KAFKA_VERSIONS##* }
TLS_DIR="$RUN/tls"
# What a server logs when it refuses a handshake: ringraft names the peer's address; Kafka says
# "Failed authentication with /127.0.0.1 (channelId=...) (SSL handshake failed)".
if [ "$TLS_SERVER" = kafka ]; then
  TLS_REFUSED_RE='Failed authentication with /127\.0\.0\.1 .*SSL handshake failed'
else
  TLS_REFUSED_RE='TLS handshake failed.*127\.0\.0\.1:[0-9]+'
fi

check "TLS: openssl makes a CA, node and client certificates (SAN 127.0.0.1, localhost) and an untrusted CA" \
  "$HERE/tls_certs.sh" "$TLS_DIR" 3

# pem_value KEY FILE TYPE: KEY=the "BEGIN TYPE" blocks of FILE as a Java properties value: every
# line ends in an escaped newline (\n) and continues (\), so the value is the PEM text itself.
# (Kafka needs the newlines: joined into one line with spaces, as plain continuation lines make
# it, a chain of two certificates parses as the second one alone.)
pem_value() {
  printf '%s=' "$1"
  awk -v begin="-----BEGIN $3-----" '$0 == begin { on = 1 } on { print } /^-----END / { on = 0 }' "$2" \
    | sed '$!s/$/\\n\\/'
}

# tls_props ID PORT VOTERS DIR STYLE: node ID's server.properties, its SSL keys in form STYLE
# (location, inline or prefixed).
tls_props() {
  local id=$1 port=$2 voters=$3 dir=$4 style=$5 c=$TLS_DIR p=listener.name.controller.
  cat <<PROPS
process.roles=controller
node.id=$id
listeners=CONTROLLER://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:SSL
controller.quorum.voters=$voters
metadata.log.dir=$dir/data
log.dirs=$dir/data
PROPS
  case $style in
    location)
      printf '%s\n' ssl.keystore.type=PEM "ssl.keystore.location=$c/node$id.pem" \
        ssl.truststore.type=PEM "ssl.truststore.location=$c/ca.pem" ssl.client.auth=required ;;
    inline)
      printf '%s\n' ssl.keystore.type=PEM ssl.truststore.type=PEM ssl.client.auth=required
      pem_value ssl.keystore.certificate.chain "$c/node$id.pem" CERTIFICATE
      pem_value ssl.keystore.key "$c/node$id.pem" "PRIVATE KEY"
      pem_value ssl.truststore.certificates "$c/ca.pem" CERTIFICATE ;;
    prefixed)
      printf '%s\n' "${p}ssl.keystore.type=PEM" "${p}ssl.keystore.location=$c/node$id.pem" \
        "${p}ssl.truststore.type=PEM" "${p}ssl.truststore.location=$c/ca.pem" \
        "${p}ssl.client.auth=required" ;;
  esac
}

TLS_ID=$("$RINGRAFT" storage random-uuid 2>/dev/null || echo "$(python3 -c \
  'import base64,uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')")
TLS_PORTS=("$(free_port)" "$(free_port)" "$(free_port)")
TLS_VOTERS="1@127.0.0.1:${TLS_PORTS[0]},2@127.0.0.1:${TLS_PORTS[1]},3@127.0.0.1:${TLS_PORTS[2]}"
TLS_STYLES=(location inline prefixed)

tls_node_start() { # tls_node_start ID: starts node ID; its PID in tls-qID/pid and $RUN/pids
  local dir="$RUN/tls-q$1"
  if [ "$TLS_SERVER" = kafka ]; then
    java -Xmx384m -cp "$WORK/kafka-$TLS_LAST_V/*:$WORK/logging/slf4j-simple-1.7.36.jar" kafka.Kafka \
      "$dir/server.properties" >> "$dir/node.log" 2>&1 &
  else
    RUST_LOG=info "$RINGRAFT" start -c "$dir/server.properties" >> "$dir/node.log" 2>&1 &
  fi
  echo "$!" > "$dir/pid"; echo "$!" >> "$RUN/pids"
}

tls_quorum_start() { # formats and starts the three voters (in a check's subshell: PIDs in files)
  local i dir dirid voter_arg=""
  for i in 1 2 3; do
    dir="$RUN/tls-q$i"; mkdir -p "$dir"
    tls_props "$i" "${TLS_PORTS[$((i - 1))]}" "$TLS_VOTERS" "$dir" "${TLS_STYLES[$((i - 1))]}" \
      > "$dir/server.properties"
    if [ "$TLS_SERVER" = kafka ]; then
      java -cp "$WORK/kafka-$TLS_LAST_V/*" kafka.tools.StorageTool format -t "$TLS_ID" \
        -c "$dir/server.properties" > "$dir/format.out" 2>&1 || { cat "$dir/format.out"; return 1; }
    else
      "$RINGRAFT" storage format -t "$TLS_ID" -c "$dir/server.properties" > "$dir/format.out" 2>&1 \
        || { echo "node $i (${TLS_STYLES[$((i - 1))]}):"; cat "$dir/format.out"; return 1; }
    fi
    dirid=$(sed -n 's/^directory.id=//p' "$dir/data/meta.properties")
    # A Kafka controller shows no directory ids for a kraft.version 0 quorum's voters.
    if [ "$TLS_SERVER" = kafka ]; then dirid='*'; fi
    voter_arg="$voter_arg${voter_arg:+,}$i=$dirid@${TLS_PORTS[$((i - 1))]}"
    tls_node_start "$i"
  done
  echo "$voter_arg" > "$RUN/tls-voters"
  echo "3 $TLS_SERVER voters, SSL keys as: ${TLS_STYLES[*]}"
}

tls_listening() { # ringraft says so (a bare TCP probe would be logged as a failed handshake)
  local i p
  for i in 1 2 3; do
    p=${TLS_PORTS[$((i - 1))]}
    if [ "$TLS_SERVER" = kafka ]; then
      (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || return 1
    else
      grep -q "listening addr=127.0.0.1:$p" "$RUN/tls-q$i/node.log" || return 1
    fi
  done
}
tls_elected() { # a leader, and every node's listener accepts
  local pattern='state=Leader' i
  [ "$TLS_SERVER" = kafka ] && pattern='Completed transition to Leader'
  for _ in $(seq 300); do
    if grep -q "$pattern" "$RUN"/tls-q*/node.log 2>/dev/null && tls_listening; then
      grep -h "$pattern" "$RUN"/tls-q*/node.log | head -1 | cut -c1-200; return 0
    fi
    for i in 1 2 3; do
      kill -0 "$(cat "$RUN/tls-q$i/pid" 2>/dev/null)" 2>/dev/null \
        || { echo "node $i exited:"; tail -20 "$RUN/tls-q$i/node.log"; return 1; }
    done
    sleep 0.1
  done
  echo "no leader within 30 s"; tail -5 "$RUN"/tls-q*/node.log; return 1
}

# openssl's own client: TLS on each node's port, the chain verified against ca.pem for 127.0.0.1.
tls_s_client() {
  local i out
  for i in 1 2 3; do
    out=$(timeout 10 openssl s_client -connect "127.0.0.1:${TLS_PORTS[$((i - 1))]}" -brief \
      -CAfile "$TLS_DIR/ca.pem" -verify_return_error -verify_ip 127.0.0.1 \
      -cert "$TLS_DIR/client.pem" -key "$TLS_DIR/client.pem" < /dev/null 2>&1) \
      || { echo "node $i:"; echo "$out"; return 1; }
    grep -q "^Verification: OK" <<<"$out" && grep -q "^Peer certificate: .*CN = node$i" <<<"$out" \
      || { echo "node $i:"; echo "$out"; return 1; }
    echo "node $i: $(grep -E '^(Protocol version|Peer certificate)' <<<"$out" | tr '\n' ' ')"
  done
}

# tls_probe NODE ARGS...: tls_probe.py against node NODE's port
tls_probe() { local n=$1; shift; python3 "$HERE/tls_probe.py" "${TLS_PORTS[$((n - 1))]}" "$@"; }

tls_tool() { # tls_tool VERSION CONFIG PORT ARGS...: kafka-metadata-quorum with --command-config CONFIG
  local v=$1 cfg=$2 port=$3; shift 3
  timeout 60 java -cp "$WORK/kafka-$v/*" org.apache.kafka.tools.MetadataQuorumCommand \
    --bootstrap-controller "127.0.0.1:$port" --command-config "$cfg" "$@" 2>&1 | grep -v '^SLF4J'
  return "${PIPESTATUS[0]}"
}

# tls_logged_refusal NODE COMMAND...: COMMAND (which checks that it was refused) runs, and node
# NODE logs a refused handshake naming the peer (the very peer, where COMMAND printed "from
# ADDRESS"). ringraft says a failed handshake at WARN at most once a second per shard (the others
# at DEBUG, counted in the next WARN's unsaid=): hence the pause first.
tls_logged_refusal() {
  local n=$1 log="$RUN/tls-q$1/node.log" before lines out from; shift
  sleep 1.1
  before=$(grep -cE "$TLS_REFUSED_RE" "$log" || true)
  out=$("$@") || { echo "$out"; return 1; }
  echo "$out"
  from=$(sed -n 's/^from \(127\.0\.0\.1:[0-9]*\)$/\1/p' <<<"$out")
  for _ in $(seq 50); do
    lines=$(grep -E "$TLS_REFUSED_RE" "$log" | tail -n +"$((before + 1))" | grep -E "${from:-.}([^0-9]|$)" || true)
    [ -n "$lines" ] && break
    sleep 0.1
  done
  [ -n "$lines" ] || {
    echo "node $n logged no refusal matching /$TLS_REFUSED_RE/${from:+ from $from}:"; tail -10 "$log"; return 1; }
  echo "node $n logged: $(head -1 <<<"$lines" | cut -c1-300)"
}

# tls_tool_refused VERSION CONFIG: the tool presenting CONFIG's certificate (or none) through
# node 3 fails, with an SSL handshake error.
tls_tool_refused() {
  local v=$1 cfg=$2 rc=0 out
  out=$(tls_tool "$v" "$cfg" "${TLS_PORTS[2]}" describe --status) || rc=$?
  echo "exit $rc: $(head -1 <<<"$out")"
  [ "$rc" != 0 ] && grep -qiE "SslAuthenticationException|SSL handshake failed" <<<"$out" \
    || { echo "not refused by an SSL handshake error:"; echo "$out"; return 1; }
}

tls_describe() { # tls_describe VERSION MODE: through node 3, checked field by field
  local v=$1 mode=$2 out="$RUN/tls-mq-$1-$2.out"
  for _ in 1 2 3 4 5; do
    tls_tool "$v" "$TLS_DIR/client.properties" "${TLS_PORTS[2]}" describe "--$mode" > "$out" \
      && python3 "$HERE/check_quorum.py" "$mode" "$out" --cluster-id "$TLS_ID" \
        --voters "$(cat "$RUN/tls-voters")" > "$out.check" 2>&1 \
      && { cat "$out" "$out.check"; return 0; }
    sleep 1
  done
  cat "$out" "$out.check" 2>/dev/null; return 1
}

tls_stop() { # SIGTERM to every voter: each exits 0 and none panicked
  local i pid rc=0
  for i in 1 2 3; do kill -TERM "$(cat "$RUN/tls-q$i/pid")" 2>/dev/null || true; done
  for i in 1 2 3; do
    pid=$(cat "$RUN/tls-q$i/pid")
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "node $i still runs 30 s after SIGTERM"; kill -KILL "$pid"; rc=1; }
  done
  if [ "$TLS_SERVER" != kafka ]; then
    for i in 1 2 3; do
      grep -q "ringraft::node: stopped" "$RUN/tls-q$i/node.log" || { echo "node $i: no 'stopped' line"; rc=1; }
      ! grep -E "panicked" "$RUN/tls-q$i/node.log" || rc=1
    done
  fi
  return "$rc"
}

if check "TLS quorum: 3 $TLS_SERVER voters with CONTROLLER:SSL, ssl.client.auth=required, formatted and started" \
  tls_quorum_start; then
  check "TLS quorum elects a leader (votes travel over mTLS)" tls_elected
  check "TLS: openssl s_client verifies every node's certificate for 127.0.0.1" tls_s_client
  check "TLS: a plaintext ApiVersions request gets no Kafka answer" \
    tls_probe 1 --plaintext --expect refused
  check "TLS: Python's ssl (OpenSSL) with the suite's client certificate: ApiVersions answered" \
    tls_probe 2 --ca "$TLS_DIR/ca.pem" --cert "$TLS_DIR/client.pem" --expect answered
  check "TLS: Python's ssl presenting the untrusted CA's client certificate is refused, and logged" \
    tls_logged_refusal 2 tls_probe 2 --ca "$TLS_DIR/ca.pem" --cert "$TLS_DIR/rogue-client.pem" --expect refused
  # Kafka's Java client offers its certificate only if the server names its issuer among the CAs
  # it trusts (TLS 1.3 certificate_authorities): with the untrusted one it sends none, so the
  # Python probe above is the one whose untrusted certificate the node has to verify and refuse.
  check "TLS: kafka-metadata-quorum $TLS_LAST_V with an untrusted client certificate is refused, and logged" \
    tls_logged_refusal 3 tls_tool_refused "$TLS_LAST_V" "$TLS_DIR/rogue-client.properties"
  check "TLS: kafka-metadata-quorum $TLS_LAST_V without a client certificate is refused (required), and logged" \
    tls_logged_refusal 3 tls_tool_refused "$TLS_LAST_V" "$TLS_DIR/nocert-client.properties"
  for v in $KAFKA_VERSIONS; do
    check "TLS: kafka-metadata-quorum $v describe --status over SSL: 3 voters and a leader, field by field" \
      tls_describe "$v" status
  done
  check "TLS: kafka-metadata-quorum $TLS_LAST_V describe --replication over SSL: the followers fetch" \
    tls_describe "$TLS_LAST_V" replication
  check "TLS quorum: SIGTERM, every voter stops" tls_stop
fi

if [ "${TLS_ALONE:-0}" = 1 ]; then
  # run.sh runs the mixed TLS quorum beside its other mixed quorums, with its own mixed().
  if [ "$TLS_SERVER" != kafka ] && [ "${TLS_MIXED:-1}" = 1 ]; then
    mixed() { # mixed VERSION static|dynamic ARGS... (as in run.sh)
      local v=$1 mode=$2; shift 2
      local dir="$RUN/mixed-$v-$mode-$(date +%s%N)"
      python3 "$HERE/mixed_quorum.py" "$mode" "$@" --kafka-jars "$WORK/kafka-$v" \
        --tool-classes "$WORK/classes-$v" --logging-jar "$LOGGING_JAR" --ringraft "$RINGRAFT" \
        --work "$dir" --pids "$RUN/pids" 2>&1 | tee "$dir.out"
    }
    check "mixed TLS quorum KKW (2 Kafka $TLS_LAST_V controllers + 1 ringraft witness, mTLS): 2 leader kills" \
      mixed "$TLS_LAST_V" static --layout KKW --kills 2 --seed 5 --tls "$TLS_DIR"
  fi
  say "tls: $PASSED passed, $FAILED failed"
  cleanup
  if [ "$FAILED" = 0 ] && [ "${TLS_VERBOSE:-0}" != 1 ]; then rm -rf "$RUN"; else say "files in $RUN"; fi
  [ "$FAILED" = 0 ]
fi
