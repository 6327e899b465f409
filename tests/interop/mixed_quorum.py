#!/usr/bin/env python3
"""ringraft voters in a quorum of real Apache Kafka controllers, through faults.

usage: mixed_quorum.py static --layout KKW --kills N --seed S [--tls DIR]
       mixed_quorum.py dynamic
       mixed_quorum.py latency [--layouts KKK,KKW] [--seconds 60]
       mixed_quorum.py transfer --layout KRR --kills N
       mixed_quorum.py recover
       mixed_quorum.py adopt
  common: --kafka-jars DIR --tool-classes DIR --logging-jar JAR --ringraft BIN --work DIR
          --pids FILE (the PIDs of the processes started, for the caller's cleanup)

A layout names nodes 1..3 in order: K is a Kafka controller, R a ringraft voter, W a ringraft
witness (ringraft.leadership=witness). Static runs format a kraft.version 0 quorum
(controller.quorum.voters) and then, N times, kill the leader (SIGKILL or SIGTERM, drawn from
the seed), wait, and restart it. After every step:

- a leader within LEADER_BOUND_S of the fault;
- in witness layouts, a Kafka controller leads, and is the *active* controller (its own
  DescribeCluster names it, and lists every running Kafka controller as registered), within
  ACTIVE_BOUND_S; in the other layouts the same whenever a Kafka controller leads;
- in witness layouts, every fourth kill first pauses the other Kafka controller for 3 s, so
  that the witness holds the longest log; the witness must then lead and hand over;
- every voter's log end reaches the leader's high watermark within CONVERGE_BOUND_S (the
  logs converge);
- kafka-metadata-quorum describe --status and --replication succeed through every live node's
  port: Kafka's too, except while a ringraft node leads outside witness mode (a Kafka
  controller then names no controller in DescribeCluster, because the leader never registered
  as one; see docs/raft.md §15).

At the end every node is stopped, and below the high watermark read just before stopping them
the logs of all three must be byte-identical prefixes of the longest under Kafka's
DumpLogSegments (above it a stopping leader's uncommitted tail may legally differ: the next
leader truncates it), and the Kafka controllers' logs must hold no ERROR line.
The last line is a summary: leader changes, who won each election, the longest times.

With --tls DIR (certificates from tls_certs.sh), every node's controller listener is
CONTROLLER:SSL with ssl.client.auth=required (Kafka's keys, PEM files from DIR), so the voters'
own connections are mTLS with hostname verification, and kafka-metadata-quorum connects with
DIR/client.properties. Static runs only.

The transfer run (KRR) asks the ringraft leader, N times, to hand the leadership to the Kafka
controller and to the other ringraft voter in turn (`ringraft quorum transfer-leader`); the
named voter must lead the next epoch, and the checks after each step are the static run's.

The recover run formats three ringraft voters (kraft.version 1), loses two (SIGKILL, their
directories deleted), runs `ringraft storage recover-quorum --force` on the third, checks with
kafka-metadata-quorum that the voters are [3], and adds ids 1 and 2 back as fresh Kafka
controllers with Kafka's add-controller (they replay the recovery's voter-set records).

The adopt run (KKW) has the Kafka controllers snapshot every 16 KiB or 2 s and keep 128 KiB;
the ringraft witness, which writes no snapshots, must adopt theirs (docs/raft.md §11.6), move
its log start by retention, and keep its directory within retention + 2 snapshots + 1 segment;
Kafka's DumpLogSegments reads what it adopted, byte-identical to the Kafka leader's files.

The dynamic run starts one Kafka controller formatted --standalone, adds a ringraft node with
kafka-metadata-quorum add-controller, and removes it again with remove-controller.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

from ports import free_port

LEADER_BOUND_S = 20
ACTIVE_BOUND_S = 30
CONVERGE_BOUND_S = 20
# The adopt run: Kafka's retention and snapshot keys, and the witness's segment size.
ADOPT_RETENTION = 128 << 10
ADOPT_BETWEEN = 16 << 10
ADOPT_SEGMENT = 64 << 10
ADOPT_SECONDS = 60


class Tool:
    """kafka-metadata-quorum, many calls in one JVM (java/QuorumTool.java)."""

    def __init__(self, args, work):
        # With --tls, every call connects as DIR/client.properties says (security.protocol=SSL).
        tls = ""
        if args.tls:
            with open(os.path.join(args.tls, "client.properties")) as f:
                tls = f.read()
        cfg = os.path.join(work, "tool.properties")
        with open(cfg, "w") as f:
            # Without these a call through a controller that names no leader waits 60 s.
            f.write(tls + "default.api.timeout.ms=8000\nrequest.timeout.ms=4000\n")
        self.cfg = cfg
        # For polling for a new leader: a node that knows none yet must not hold the poll up.
        self.quick = os.path.join(work, "tool-quick.properties")
        with open(self.quick, "w") as f:
            f.write(tls + "default.api.timeout.ms=1000\nrequest.timeout.ms=800\n")
        cp = f"{args.tool_classes}:{args.kafka_jars}/*"
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", cp, "QuorumTool"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, port, *words, config=None):
        line = "\t".join(["--bootstrap-controller", f"127.0.0.1:{port}",
                          "--command-config", config or self.cfg, *words])
        return self.ask(line)

    def cluster(self, port):
        """(controller id, registered controller ids) from a node's DescribeCluster, or None."""
        rc, out = self.ask(f"describe-cluster\t127.0.0.1:{port}\t{self.cfg}")
        if rc != 0:
            return None
        active = re.search(r"^controller (-?\d+)$", out, re.M)
        nodes = {int(x) for x in re.findall(r"^node (\d+)$", out, re.M)}
        return (int(active.group(1)) if active else -1), nodes

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = []
        for row in self.proc.stdout:
            m = re.match(r"^=== rc=(-?\d+)$", row.rstrip("\n"))
            if m:
                return int(m.group(1)), "".join(out)
            out.append(row)
        raise RuntimeError("the kafka-metadata-quorum JVM exited")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def status_fields(text):
    fields = {}
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    return fields


def replication_rows(text):
    """NodeId → LogEndOffset from `describe --replication`."""
    rows = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit():
            rows[int(parts[0])] = (int(parts[2]), line)
    return rows


class Node:
    def __init__(self, nid, kind, args, work, ports, cluster_id, voters, extra=()):
        self.id, self.kind, self.args = nid, kind, args
        self.jmx_port = None
        self.port = ports[nid]
        self.dir = os.path.join(work, f"n{nid}")
        self.data = os.path.join(self.dir, "data")
        self.props = os.path.join(self.dir, "server.properties")
        self.out = os.path.join(self.dir, "node.log")
        self.proc = None
        os.makedirs(self.dir, exist_ok=True)
        lines = [
            "process.roles=controller",
            f"node.id={nid}",
            f"listeners=CONTROLLER://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map=CONTROLLER:{'SSL' if args.tls else 'PLAINTEXT'}",
            voters,
            f"{'metadata.log.dir' if kind != 'K' else 'log.dirs'}={self.data}",
        ]
        if args.tls:
            lines += [
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={os.path.join(args.tls, f'node{nid}.pem')}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={os.path.join(args.tls, 'ca.pem')}",
                "ssl.client.auth=required",
            ]
        if kind == "W":
            lines.append("ringraft.leadership=witness")
        self.admin_port = None
        if kind != "K":
            self.admin_port = free_port()
            lines.append(f"ringraft.admin.listener=127.0.0.1:{self.admin_port}")
        lines.extend(extra)
        with open(self.props, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.cluster_id = cluster_id

    @property
    def is_kafka(self):
        return self.kind == "K"

    def format(self, *extra):
        if self.is_kafka:
            cmd = ["java", "-cp", f"{self.args.kafka_jars}/*", "kafka.tools.StorageTool",
                   "format", "-t", self.cluster_id, "-c", self.props, *extra]
        else:
            cmd = [self.args.ringraft, "storage", "format", "-t", self.cluster_id,
                   "-c", self.props, *extra]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"node {self.id}: format failed: {r.stdout}{r.stderr}")

    def start(self):
        log = open(self.out, "a")
        if self.is_kafka:
            cp = f"{self.args.kafka_jars}/*:{self.args.logging_jar}"
            jmx = []
            if self.jmx_port:
                jmx = [f"-Dcom.sun.management.jmxremote.port={self.jmx_port}",
                       "-Dcom.sun.management.jmxremote.authenticate=false",
                       "-Dcom.sun.management.jmxremote.ssl=false"]
            # Timestamps, to line Kafka's elections up with ringraft's logs.
            stamps = ["-Dorg.slf4j.simpleLogger.showDateTime=true",
                      "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSX"]
            cmd = ["java", "-Xmx512m", *jmx, *stamps, "-Duser.timezone=UTC", "-cp", cp,
                   "kafka.Kafka", self.props]
        else:
            cmd = [self.args.ringraft, "start", "-c", self.props]
        env = dict(os.environ, RUST_LOG="info")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        with open(self.args.pids, "a") as f:
            f.write(f"{self.proc.pid}\n")

    def stop(self, sig):
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def name(self):
        return {"K": "Kafka", "R": "ringraft", "W": "ringraft witness"}[self.kind] + f" {self.id}"


class Suite:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        os.makedirs(self.work, exist_ok=True)
        self.tool = Tool(args, self.work)
        self.failures = []
        self.wins = {"K": 0, "R": 0, "W": 0}
        self.changes = 0
        self.worst = {"leader": 0.0, "active": 0.0, "converge": 0.0}
        self.kafka_self_registration_races = 0
        self.stalls = 0
        self.registration_timeouts = 0
        self.witness_layout = "W" in args.layout
        # Elections after a leader was killed with a Kafka and a ringraft (not witness) voter
        # both alive: by signal, [elections, won by ringraft].
        self.contested = {"SIGKILL": [0, 0], "SIGTERM": [0, 0]}

    def fail(self, what):
        print(f"FAIL: {what}", flush=True)
        self.failures.append(what)

    def describe(self, node, quick=False):
        config = self.tool.quick if quick else None
        rc, out = self.tool.run(node.port, "describe", "--status", config=config)
        return (status_fields(out) if rc == 0 else None), out

    def leader(self, nodes):
        """(leader id, epoch, high watermark) as some live node reports it."""
        for n in sorted(nodes.values(), key=lambda n: n.is_kafka):
            if not n.running():
                continue
            fields, _ = self.describe(n, quick=True)
            if fields and fields.get("LeaderId", "-1") not in ("-1", ""):
                return int(fields["LeaderId"]), int(fields["LeaderEpoch"]), int(fields["HighWatermark"])
        return None

    def wait_leader(self, nodes, since, prior_epoch):
        while time.time() - since < LEADER_BOUND_S:
            found = self.leader(nodes)
            if found and found[1] > prior_epoch and nodes[found[0]].running():
                return found
            time.sleep(0.3)
        return None

    def active_controller(self, nodes, kafka_leader):
        """Whether the Kafka leader is the active controller: its own DescribeCluster names it,
        and lists every running Kafka controller as registered (a controller that cannot
        reach the active one never re-registers after a restart)."""
        found = self.tool.cluster(nodes[kafka_leader].port)
        if not found:
            return False
        active, registered = found
        running = {n.id for n in nodes.values() if n.is_kafka and n.running()}
        return active == kafka_leader and running <= registered

    def check_ports(self, nodes, leader_id, witness_layout):
        for n in nodes.values():
            if not n.running():
                continue
            if n.is_kafka and not nodes[leader_id].is_kafka and not witness_layout:
                continue  # documented: Kafka names no controller while ringraft leads
            for mode in ("--status", "--replication"):
                rc, out = self.tool.run(n.port, "describe", mode)
                if rc != 0:
                    self.fail(f"kafka-metadata-quorum describe {mode} through {n.name()} "
                              f"(leader {leader_id}): rc={rc}: {out.strip()[-400:]}")

    def converge(self, nodes, leader_id, since):
        port = nodes[leader_id].port
        while time.time() - since < CONVERGE_BOUND_S:
            rc, out = self.tool.run(port, "describe", "--replication")
            if rc == 0:
                rows = replication_rows(out)
                fields, _ = self.describe(nodes[leader_id])
                hw = int(fields["HighWatermark"]) if fields else None
                live = [n.id for n in nodes.values() if n.running()]
                if hw is not None and all(i in rows and rows[i][0] >= hw for i in live):
                    return time.time() - since
            time.sleep(0.3)
        return None

    def dumps(self, nodes, committed):
        """Every node's log under Kafka's DumpLogSegments: batches (offsets, epoch, crc). The
        batches that end below `committed` (a high watermark; None for all) must agree."""
        batch = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) .*partitionLeaderEpoch: (-?\d+) "
                           r".* crc: (\d+) isvalid: (\w+)")
        logs = {}
        for n in nodes.values():
            seg = os.path.join(n.data, "__cluster_metadata-0")
            files = sorted(f for f in os.listdir(seg) if f.endswith(".log"))
            cmd = ["java", "-cp", f"{self.args.kafka_jars}/*", dump_class(self.args.kafka_jars),
                   "--deep-iteration", "--files", ",".join(os.path.join(seg, f) for f in files)]
            out = subprocess.run(cmd, capture_output=True, text=True).stdout
            if "baseOffset:" not in out:
                self.fail(f"{n.name()}: DumpLogSegments shows no batch: {out[-300:]}")
            rows = []
            for m in batch.finditer(out):
                if m.group(5) != "true":
                    self.fail(f"{n.name()}: DumpLogSegments calls a batch invalid: {m.group(0)}")
                rows.append(tuple(int(x) for x in m.groups()[:4]))
            logs[n.id] = rows
        counts = {nid: len(rows) for nid, rows in logs.items()}
        if committed is not None:
            logs = {nid: [r for r in rows if r[1] < committed] for nid, rows in logs.items()}
        longest = max(logs.values(), key=len)
        for nid, rows in logs.items():
            start = next((i for i, r in enumerate(longest) if rows and r[0] == rows[0][0]), None)
            if rows and (start is None or longest[start:start + len(rows)] != rows):
                self.fail(f"node {nid}'s log below offset {committed} is not a prefix of the "
                          f"longest one")
        return counts

    def kafka_errors(self, nodes):
        """ERROR lines in the Kafka controllers' logs, except Kafka's own activation race."""
        for n in nodes.values():
            if not n.is_kafka:
                continue
            with open(n.out, errors="replace") as f:
                lines = f.read().splitlines()
            errors = []
            for i, line in enumerate(lines):
                if " ERROR " not in line:
                    continue
                after = "\n".join(lines[i + 1:i + 3])
                # A Kafka controller that has just become Raft leader, and is not active yet,
                # answers a pending ControllerRegistration (its own, or the other Kafka
                # controller's) with NOT_CONTROLLER and logs that answer at ERROR ("The active
                # controller appears to be node <itself>"); so does one that sent its own just
                # as leadership moved on. The sender retries and registers a moment later
                # (`active_controller` checks that). The registration was pending because a
                # ringraft node led before (and answered NOT_CONTROLLER, as an inactive Kafka
                # controller does), so these are counted and reported.
                if ("apiKey=CONTROLLER_REGISTRATION" in line
                        and "NotControllerException: The active controller appears" in after
                        and (f"clientId={n.id}," in line
                             or f"appears to be node {n.id}." in after)):
                    self.kafka_self_registration_races += 1
                    continue
                # Outside witness mode a ringraft leader leaves the cluster without an active
                # controller (docs/raft.md §15): a Kafka controller's registration, answered
                # NOT_CONTROLLER and retried, times out after 5 s and is logged at ERROR before
                # Kafka backs off and tries again. Expected there, counted; a failure in witness
                # layouts, where a Kafka controller must lead.
                if (not self.witness_layout
                        and "RegistrationResponseHandler: channel manager timed out" in line):
                    self.registration_timeouts += 1
                    continue
                # This suite's own polling of a Kafka controller that has not yet loaded the
                # finalized metadata.version (just started or restarted): Kafka refuses
                # DescribeCluster then, with or without ringraft (4.4: "There is no finalized
                # MetadataVersion", 4.1: "... not supported with the current MetadataVersion").
                if ("apiKey=DESCRIBE_CLUSTER" in line
                        and ("There is no finalized MetadataVersion" in after
                             or "Direct-to-controller communication is not supported" in after)):
                    continue
                errors.append(line)
            for line in errors[:5]:
                self.fail(f"{n.name()} logged: {line[:300]}")

    def start_static(self, layout):
        """Nodes 1..3 of `layout`, formatted (kraft.version 0) and started."""
        a = self.args
        ports = {i: free_port() for i in (1, 2, 3)}
        cluster_id = subprocess.run([a.ringraft, "storage", "random-uuid"], capture_output=True,
                                    text=True).stdout.strip()
        voters = "controller.quorum.voters=" + ",".join(f"{i}@127.0.0.1:{ports[i]}" for i in (1, 2, 3))
        # --groups: Raft groups of ringraft's own on the ringraft voters only (issue 25); the
        # Kafka controllers never hear of them.
        ours = [i for i in (1, 2, 3) if layout[i - 1] == "R"]
        groups = [f"ringraft.groups=g:{a.groups}@{','.join(map(str, ours))}"] if a.groups else []
        nodes = {i: Node(i, layout[i - 1], a, self.work, ports, cluster_id, voters,
                         groups if layout[i - 1] == "R" else ())
                 for i in (1, 2, 3)}
        for n in nodes.values():
            n.format()
            n.start()
        return nodes

    def check_groups(self, nodes):
        """With --groups: every group has a ringraft leader and takes a record."""
        a = self.args
        ours = [n for n in nodes.values() if n.kind == "R" and n.running()]
        bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in ours)
        ids = {str(n.id) for n in ours}
        for p in range(a.groups):
            where = ["--bootstrap-controller", bootstrap, "--topic", "g", "--partition", str(p)]
            deadline = time.time() + 30
            while True:
                r = subprocess.run([a.ringraft, "log", "append", *where, f"record-{p}"],
                                   capture_output=True, text=True, timeout=90)
                d = subprocess.run([a.ringraft, "quorum", "describe", "--status", *where],
                                   capture_output=True, text=True, timeout=60)
                leader = status_fields(d.stdout).get("LeaderId")
                if r.returncode == 0 and d.returncode == 0 and leader in ids:
                    break
                if time.time() > deadline:
                    self.fail(f"group g-{p}: append {r.returncode} {r.stderr.strip()[:200]}, "
                              f"describe {d.returncode} {d.stdout.strip()[:200]}{d.stderr.strip()[:200]}")
                    return
                time.sleep(1)
        print(f"groups: {a.groups} groups on the ringraft voters each led by one of them and "
              f"took a record", flush=True)

    def run_transfer(self):
        """`ringraft quorum transfer-leader`, --kills times, alternately to a Kafka controller
        and to the other ringraft voter; a Kafka leader (which cannot be asked) is first stopped
        with SIGTERM and restarted, so that a ringraft node leads."""
        a = self.args
        nodes = self.start_static(a.layout)
        kafka = [n.id for n in nodes.values() if n.is_kafka]
        ours = [n.id for n in nodes.values() if not n.is_kafka]
        if not kafka or len(ours) < 2:
            sys.exit("transfer: a layout with a Kafka controller and two ringraft voters (KRR)")
        bootstrap = ",".join(f"127.0.0.1:{nodes[i].port}" for i in ours)
        found = self.wait_leader(nodes, time.time(), 0)
        if not found:
            self.fail("no first leader")
            return self.finish(nodes)
        moved = {"K": 0, "R": 0}
        for step in range(a.kills):
            leader_id = self.settle(nodes, found, False, step)
            if leader_id is None:
                break
            if nodes[leader_id].is_kafka:
                victim, since = nodes[leader_id], time.time()
                victim.stop(signal.SIGTERM)
                found = self.wait_leader(nodes, since, found[1])
                victim.start()
                if not found:
                    self.fail(f"step {step}: no leader after SIGTERM of {victim.name()}")
                    break
                leader_id = self.settle(nodes, found, False, step)
                if leader_id is None or nodes[leader_id].is_kafka:
                    continue
            target = kafka[0] if step % 2 == 0 else next(i for i in ours if i != leader_id)
            epoch = self.leader(nodes)[1]
            since = time.time()
            r = subprocess.run([a.ringraft, "quorum", "transfer-leader", "--to", str(target),
                                "--bootstrap-controller", bootstrap],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                self.fail(f"step {step}: transfer-leader {nodes[leader_id].name()} -> "
                          f"{nodes[target].name()}: {r.stdout}{r.stderr}")
                break
            found = self.wait_leader(nodes, since, epoch)
            if not found or found[0] != target:
                self.fail(f"step {step}: {nodes[target].name()} was named, {found} leads")
                break
            moved[nodes[target].kind] += 1
            self.changes += 1
            print(f"step {step}: transfer-leader {nodes[leader_id].name()} -> "
                  f"{nodes[target].name()}: {r.stdout.strip()}", flush=True)
        if not self.failures and (moved["K"] < 1 or moved["R"] < 1):
            self.fail(f"transfers to a Kafka controller {moved['K']}, to ringraft {moved['R']}")
        print(f"transfers: to a Kafka controller {moved['K']}, to a ringraft voter {moved['R']}",
              flush=True)
        # Fetch v18 (KIP-1166) both ways with Kafka: the ringraft nodes fetched from a Kafka
        # leader, and the Kafka controller from a ringraft leader; every Fetch at version 18
        # (a Kafka peer that negotiated less would show as another version).
        versions = self.fetch_versions(nodes)
        print(f"Fetch versions at the ringraft nodes: {versions}", flush=True)
        for side in ("received", "sent"):
            if set(versions[side]) != {18} or not versions[side][18]:
                self.fail(f"Fetch {side} by version {versions[side]}: expected only v18")
        return self.finish(nodes)

    def fetch_versions(self, nodes):
        """Fetch requests by version, received and sent (and answered) by the ringraft nodes,
        from their /metrics: {"received": {version: n}, "sent": {version: n}}."""
        import urllib.request
        out = {"received": {}, "sent": {}}
        series = {"ringraft_requests_by_version_total": "received",
                  "ringraft_peer_requests_total": "sent"}
        for n in nodes.values():
            if n.admin_port is None or not n.running():
                continue
            url = f"http://127.0.0.1:{n.admin_port}/metrics"
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            for m in re.finditer(r'^(\w+)\{api="Fetch",version="(-?\d+)"\} (\d+)', text, re.M):
                if m.group(1) in series:
                    side = out[series[m.group(1)]]
                    side[int(m.group(2))] = side.get(int(m.group(2)), 0) + int(m.group(3))
        return out

    def run_static(self):
        a = self.args
        layout = a.layout
        nodes = self.start_static(layout)
        witness = "W" in layout
        rng = random.Random(a.seed)
        start = time.time()
        found = self.wait_leader(nodes, start, 0)
        if not found:
            self.fail("no first leader")
            return self.finish(nodes)
        epoch = found[1]
        print(f"{layout}: first leader {nodes[found[0]].name()} in epoch {epoch} after "
              f"{time.time() - start:.1f} s", flush=True)
        for step in range(a.kills + 1):
            leader_id = self.settle(nodes, found, witness, step)
            if leader_id is None or step == a.kills:
                break
            sig = rng.choice([getattr(signal, f"SIG{name}") for name in a.signals.split(",")])
            victim = nodes[leader_id]
            # The witness's hard case, every fourth step: the other Kafka controller is paused
            # while the leader writes on, so that the witness holds the longer log when the
            # leader dies. The paused one cannot win the witness's vote then; the witness must
            # lead until it has caught up, and hand over.
            lagging = None
            if witness and victim.is_kafka and step % 4 == 0:
                lagging = next(n for n in nodes.values() if n.is_kafka and n is not victim)
                lagging.proc.send_signal(signal.SIGSTOP)
                time.sleep(3)
                sig = signal.SIGKILL
            since = time.time()
            victim.stop(sig)
            if lagging:
                lagging.proc.send_signal(signal.SIGCONT)
                self.stalls += 1
            found = self.wait_leader(nodes, since, epoch)
            elapsed = time.time() - since
            if not found:
                self.fail(f"step {step}: no new leader within {LEADER_BOUND_S} s of "
                          f"{sig.name} of {victim.name()}")
                break
            self.worst["leader"] = max(self.worst["leader"], elapsed)
            self.changes += 1
            epoch = found[1]
            winner = nodes[found[0]]
            self.wins[winner.kind] += 1
            survivors = {n.kind for n in nodes.values() if n.running()}
            if {"K", "R"} <= survivors:
                self.contested[sig.name][0] += 1
                self.contested[sig.name][1] += winner.kind == "R"
            print(f"step {step}: {sig.name} {victim.name()} -> {winner.name()} leads epoch "
                  f"{epoch} after {elapsed:.1f} s", flush=True)
            time.sleep(rng.uniform(0.5, 2.0))
            victim.start()
        return self.finish(nodes)

    def settle(self, nodes, found, witness, step):
        """The checks after a step; returns the leader they ended with."""
        leader_id, epoch = found[0], found[1]
        since = time.time()
        # In witness layouts a Kafka controller must come to lead; in the others, whenever a
        # Kafka controller leads it must become active, with every Kafka controller registered.
        if witness or nodes[leader_id].is_kafka:
            while True:
                found = self.leader(nodes)
                kafka = found and nodes[found[0]].is_kafka
                if not witness and found and not kafka:
                    break  # leadership moved on to a ringraft node meanwhile
                if kafka and self.active_controller(nodes, found[0]):
                    self.worst["active"] = max(self.worst["active"], time.time() - since)
                    break
                if time.time() - since > ACTIVE_BOUND_S:
                    self.fail(f"step {step}: no active Kafka controller with every Kafka "
                              f"controller registered within {ACTIVE_BOUND_S} s (leader {found}, "
                              f"DescribeCluster {found and self.tool.cluster(nodes[found[0]].port)})")
                    return None
                time.sleep(0.3)
            leader_id = found[0]
        took = self.converge(nodes, leader_id, time.time())
        if took is None:
            self.fail(f"step {step}: the logs did not converge within {CONVERGE_BOUND_S} s")
        else:
            self.worst["converge"] = max(self.worst["converge"], took)
        self.check_ports(nodes, leader_id, witness)
        return leader_id

    def finish(self, nodes):
        if self.args.groups:
            self.check_groups(nodes)
        found = self.leader(nodes)
        committed = found[2] if found else None
        for n in nodes.values():
            n.stop(signal.SIGTERM)
        handovers = 0
        for n in nodes.values():
            if n.kind == "W":
                with open(n.out, errors="replace") as f:
                    handovers += sum("witness hands leadership over" in line for line in f)
        if self.stalls and handovers < self.stalls:
            self.fail(f"{self.stalls} times the witness held the longest log, but it handed "
                      f"leadership over only {handovers} times")
        counts = self.dumps(nodes, committed)
        self.kafka_errors(nodes)
        self.tool.close()
        ringraft_wins = self.wins["R"] + self.wins["W"]
        tls = " (mTLS)" if self.args.tls else ""
        print(f"summary {self.args.layout}{tls}: {self.changes} leader changes, {self.stalls} with "
              f"the witness holding the longest log ({handovers} witness handovers); "
              f"elections won: Kafka "
              f"{self.wins['K']}, ringraft {ringraft_wins} (witness {self.wins['W']}); longest "
              f"election {self.worst['leader']:.1f} s, longest until a Kafka controller was active "
              f"{self.worst['active']:.1f} s, longest convergence {self.worst['converge']:.1f} s; "
              f"batches per node {counts}; contested elections won by ringraft: after SIGKILL "
              f"{self.contested['SIGKILL'][1]} of {self.contested['SIGKILL'][0]}, after SIGTERM "
              f"{self.contested['SIGTERM'][1]} of {self.contested['SIGTERM'][0]}; registrations "
              f"refused by a Kafka controller not yet active, logged by Kafka at ERROR: "
              f"{self.kafka_self_registration_races}; "
              f"registration timeouts while ringraft led {self.registration_timeouts}; "
              f"{len(self.failures)} failures", flush=True)
        return 0 if not self.failures else 1

    def add_controller(self, port, node, seconds):
        """Kafka's add-controller of `node` through the controller at `port`, retried for
        `seconds` while the new controller catches up as an observer: (rc, output)."""
        deadline = time.time() + seconds
        while True:
            rc, out = self.tool.run(port, "add-controller", config=node.props)
            if rc == 0 or time.time() > deadline:
                return rc, out
            time.sleep(1)

    def run_dynamic(self):
        """add-controller / remove-controller of a ringraft node in a Kafka --standalone quorum."""
        a = self.args
        ports = {1: free_port(), 2: free_port()}
        cluster_id = subprocess.run([a.ringraft, "storage", "random-uuid"], capture_output=True,
                                    text=True).stdout.strip()
        boot = f"controller.quorum.bootstrap.servers=127.0.0.1:{ports[1]}"
        k = Node(1, "K", a, self.work, ports, cluster_id, boot)
        r = Node(2, "R", a, self.work, ports, cluster_id, boot)
        k.format("--standalone")
        r.format("--no-initial-controllers")
        k.start()
        r.start()
        nodes = {1: k, 2: r}
        try:
            if not self.wait_leader({1: k}, time.time(), 0):
                self.fail("the --standalone Kafka controller did not lead")
                return 1
            # add-controller reads the new controller's own config (node id, directory id,
            # advertised listener), as an operator runs it on that host.
            rc, out = self.add_controller(ports[1], r, 60)
            if rc != 0:
                self.fail(f"add-controller: {out.strip()[-600:]}")
                return 1
            print("add-controller:", out.strip().splitlines()[-1], flush=True)
            voters = self.voter_ids(ports[1], deadline=time.time() + 30, want={1, 2})
            if voters != {1, 2}:
                self.fail(f"after add-controller the voters are {voters}")
            rc, out = self.tool.run(ports[1], "remove-controller", "--controller-id", "2",
                                    "--controller-directory-id", meta_dir_id(r.data))
            if rc != 0:
                self.fail(f"remove-controller: {out.strip()[-600:]}")
                return 1
            print("remove-controller:", out.strip().splitlines()[-1], flush=True)
            voters = self.voter_ids(ports[1], deadline=time.time() + 30, want={1})
            if voters != {1}:
                self.fail(f"after remove-controller the voters are {voters}")
        finally:
            for n in nodes.values():
                n.stop(signal.SIGTERM)
            self.kafka_errors(nodes)
            self.tool.close()
        print(f"summary dynamic: {len(self.failures)} failures", flush=True)
        return 0 if not self.failures else 1

    def run_recover(self):
        """`ringraft storage recover-quorum` after losing two of three ringraft voters, then
        two Kafka controllers added back in their ids with Kafka's add-controller."""
        a = self.args
        ports = {i: free_port() for i in (1, 2, 3)}
        uuid = lambda: subprocess.run([a.ringraft, "storage", "random-uuid"], capture_output=True,
                                      text=True).stdout.strip()
        cluster_id = uuid()
        dirs = {i: uuid() for i in (1, 2, 3)}
        voter = lambda i: f"{i}@127.0.0.1:{ports[i]}:{dirs[i]}"
        boot = "controller.quorum.bootstrap.servers=" + ",".join(
            f"127.0.0.1:{ports[i]}" for i in (1, 2, 3))
        nodes = {i: Node(i, "R", a, self.work, ports, cluster_id, boot) for i in (1, 2, 3)}
        try:
            for n in nodes.values():
                n.format("--initial-controllers", ",".join(voter(i) for i in (1, 2, 3)))
                n.start()
            if not self.wait_leader(nodes, time.time(), 0):
                self.fail("no first leader")
                return 1
            time.sleep(2)
            survivor = nodes[3]
            survivor.stop(signal.SIGTERM)
            for i in (1, 2):
                nodes[i].stop(signal.SIGKILL)
                shutil.rmtree(nodes[i].data)
            r = subprocess.run([a.ringraft, "storage", "recover-quorum", "-c", survivor.props,
                                "--voters", voter(3), "--force"], capture_output=True, text=True)
            print(r.stdout.strip(), r.stderr.strip(), flush=True)
            if r.returncode != 0:
                self.fail(f"recover-quorum: {r.stderr.strip()}")
                return 1
            since = time.time()
            survivor.start()
            if self.voter_ids(ports[3], deadline=time.time() + 20, want={3}) != {3}:
                self.fail("kafka-metadata-quorum describe --status does not show voters [3]")
                return 1
            print(f"kafka-metadata-quorum: voters [3], {time.time() - since:.1f} s after the start",
                  flush=True)
            # The lost ids come back as Kafka controllers on fresh directories.
            want = {3}
            for i in (1, 2):
                k = Node(i, "K", a, self.work, ports, cluster_id, boot)
                nodes[i] = k
                k.format("--no-initial-controllers")
                k.start()
                rc, out = self.add_controller(ports[3], k, 90)
                if rc != 0:
                    self.fail(f"add-controller {i}: {out.strip()[-600:]}")
                    return 1
                want.add(i)
                got = self.voter_ids(ports[3], deadline=time.time() + 30, want=set(want))
                if got != want:
                    self.fail(f"after add-controller {i} the voters are {got}")
                    return 1
                print(f"Kafka's add-controller added Kafka controller {i}: voters {sorted(got)}",
                      flush=True)
        finally:
            for n in nodes.values():
                n.stop(signal.SIGTERM)
            self.kafka_errors({i: n for i, n in nodes.items() if n.is_kafka})
            self.tool.close()
        print(f"summary recover: {len(self.failures)} failures", flush=True)
        return 0 if not self.failures else 1

    def run_adopt(self):
        """A ringraft witness beside two Kafka controllers that snapshot and delete by
        retention: the witness adopts their snapshots and its own directory stays bounded.

        The Kafka controllers append a NoOp every 10 ms (metadata.max.idle.interval.ms), take a
        snapshot every ADOPT_BETWEEN bytes or 2 s, and keep ADOPT_RETENTION bytes; the witness
        has the same retention keys and segments of ADOPT_SEGMENT bytes. For ADOPT_SECONDS its
        partition directory is measured every 0.2 s. It must adopt snapshots (log lines), move
        its log start (retention), stay within retention + 2 snapshots + 1 segment + 64 KiB
        for its small files, and Kafka's DumpLogSegments must read every snapshot it adopted,
        byte-identical to the Kafka leader's file of the same name where that still exists. The
        logs must agree below the last high watermark, from each one's first batch on.
        """
        a = self.args
        ports = {i: free_port() for i in (1, 2, 3)}
        cluster_id = subprocess.run([a.ringraft, "storage", "random-uuid"], capture_output=True,
                                    text=True).stdout.strip()
        voters = "controller.quorum.voters=" + ",".join(
            f"{i}@127.0.0.1:{ports[i]}" for i in (1, 2, 3))
        keys = [f"metadata.max.retention.bytes={ADOPT_RETENTION}", "metadata.max.retention.ms=-1",
                f"metadata.log.max.record.bytes.between.snapshots={ADOPT_BETWEEN}",
                "metadata.log.max.snapshot.interval.ms=2000"]
        kafka = keys + ["metadata.max.idle.interval.ms=10"]
        witness = keys + [f"metadata.log.segment.min.bytes={ADOPT_SEGMENT}",
                          f"metadata.log.segment.bytes={ADOPT_SEGMENT}"]
        nodes = {i: Node(i, "KKW"[i - 1], a, self.work, ports, cluster_id, voters,
                         extra=kafka if i < 3 else witness) for i in (1, 2, 3)}
        part = lambda n: os.path.join(n.data, "__cluster_metadata-0")
        snaps = lambda d: sorted(f for f in os.listdir(d) if f.endswith(".checkpoint")
                                 and not f.startswith("00000000000000000000-"))
        kafka_snapshots, max_bytes, max_snapshot, max_listing = set(), 0, 0, {}
        w = nodes[3]
        try:
            for n in nodes.values():
                n.format()
                n.start()
            deadline = time.time() + ADOPT_SECONDS
            while time.time() < deadline:
                for n in (nodes[1], nodes[2]):
                    if os.path.isdir(part(n)):
                        kafka_snapshots.update(snaps(part(n)))
                total, listing = 0, {}
                for f in os.listdir(part(w)) if os.path.isdir(part(w)) else []:
                    try:
                        size = os.path.getsize(os.path.join(part(w), f))
                    except OSError:
                        continue  # deleted while listed
                    total += size
                    listing[f] = size
                    if f.endswith(".checkpoint"):
                        max_snapshot = max(max_snapshot, size)
                if total > max_bytes:
                    max_bytes, max_listing = total, listing
                time.sleep(0.2)
            found = self.leader(nodes)
        finally:
            for n in nodes.values():
                n.stop(signal.SIGTERM)
            self.kafka_errors({i: n for i, n in nodes.items() if n.is_kafka})
            self.tool.close()
        # Read once every node has stopped: retention deletes snapshots while they run.
        adopted_files = snaps(part(w))
        leader = nodes[found[0]] if found else None
        identical = 0
        for f in adopted_files:
            path = os.path.join(part(w), f)
            cmd = ["java", "-cp", f"{a.kafka_jars}/*", dump_class(a.kafka_jars),
                   "--files", path]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0 or "Exception" in r.stdout + r.stderr or "baseOffset" not in r.stdout:
                self.fail(f"DumpLogSegments cannot read the adopted {f}: "
                          f"{(r.stdout + r.stderr)[-400:]}")
            if leader and leader.is_kafka and os.path.exists(os.path.join(part(leader), f)):
                with open(path, "rb") as x, open(os.path.join(part(leader), f), "rb") as y:
                    if x.read() != y.read():
                        self.fail(f"the adopted {f} differs from {leader.name()}'s")
                    identical += 1
        # Below the high watermark read before stopping, from the witness's log start on, its
        # batches are the Kafka controllers' (`dumps` compares each log from its first batch).
        counts = self.dumps(nodes, found[2] if found else None)
        with open(w.out, errors="replace") as f:
            log = f.read()
        adopted = log.count("adopted the leader's snapshot")
        moved = log.count("retention: the log now starts at a later snapshot")
        bound = ADOPT_RETENTION + 2 * max_snapshot + ADOPT_SEGMENT + (64 << 10)
        print(f"adopt: Kafka took {len(kafka_snapshots)} snapshots; the witness adopted {adopted}, "
              f"moved its log start {moved} times, holds {len(adopted_files)} snapshot files "
              f"({identical} compared byte for byte with the Kafka leader's); its directory at most "
              f"{max_bytes} bytes against the bound {bound} (retention {ADOPT_RETENTION} + 2 x "
              f"{max_snapshot} + segment {ADOPT_SEGMENT} + 64 KiB); batches in the logs {counts}",
              flush=True)
        if len(kafka_snapshots) < 5:
            self.fail(f"the Kafka controllers took {len(kafka_snapshots)} snapshots, fewer than 5")
        if adopted < 2:
            self.fail(f"the witness adopted {adopted} snapshots")
        if moved < 1:
            self.fail("the witness's log start never moved")
        if not adopted_files:
            self.fail("no adopted snapshot left in the witness's directory")
        if max_bytes > bound:
            self.fail(f"the witness's directory reached {max_bytes} bytes, over {bound}: "
                      + ", ".join(f"{f} {n}" for f, n in sorted(max_listing.items())))
        if "refused a peer's claim" in log or " ERROR " in log:
            self.fail("the witness logged an error: " + next(
                l for l in log.splitlines() if "refused a peer's claim" in l or " ERROR " in l)[:300])
        print(f"summary adopt: {len(self.failures)} failures", flush=True)
        return 0 if not self.failures else 1

    def run_latency(self):
        """The Kafka leader's commit latency, 3 Kafka voters against 2 Kafka + 1 witness.

        No brokers: the leader's only writes are the NoOp records it appends every
        metadata.max.idle.interval.ms, here 10 ms (100 batches/s), the same in both quorums.
        After a warm-up, the leader's raft metrics (commit-latency-avg and -max, Kafka's own,
        read over JMX with Kafka's JmxTool) are sampled once a second for --seconds.
        """
        a = self.args
        results = {}
        for layout in a.layouts.split(","):
            ports = {i: free_port() for i in (1, 2, 3)}
            cluster_id = subprocess.run([a.ringraft, "storage", "random-uuid"],
                                        capture_output=True, text=True).stdout.strip()
            voters = "controller.quorum.voters=" + ",".join(
                f"{i}@127.0.0.1:{ports[i]}" for i in (1, 2, 3))
            work = os.path.join(self.work, layout)
            os.makedirs(work, exist_ok=True)
            nodes = {i: Node(i, layout[i - 1], a, work, ports, cluster_id, voters,
                             extra=["metadata.max.idle.interval.ms=10"]) for i in (1, 2, 3)}
            for n in nodes.values():
                if n.is_kafka:
                    n.jmx_port = free_port()
                n.format()
                n.start()
            found = None
            deadline = time.time() + 60
            while time.time() < deadline:
                found = self.leader(nodes)
                if found and nodes[found[0]].is_kafka:
                    break
                time.sleep(0.5)
            if not found or not nodes[found[0]].is_kafka:
                self.fail(f"{layout}: no Kafka leader")
                continue
            leader = nodes[found[0]]
            time.sleep(a.warmup)
            load_before = os.getloadavg()[0]
            avg, worst = [], []
            for _ in range(a.seconds):
                m = jmx_raft_metrics(a.kafka_jars, leader.jmx_port)
                if "commit-latency-avg" in m:
                    avg.append(m["commit-latency-avg"])
                    worst.append(m["commit-latency-max"])
                time.sleep(1)
            load_after = os.getloadavg()[0]
            for n in nodes.values():
                n.stop(signal.SIGTERM)
            races = self.kafka_self_registration_races
            self.kafka_errors(nodes)
            print(f"latency {layout}: Kafka's self-registration race logged "
                  f"{self.kafka_self_registration_races - races} times", flush=True)
            if not avg:
                self.fail(f"{layout}: no commit-latency metrics from {leader.name()}")
                continue
            avg.sort()
            results[layout] = (avg[len(avg) // 2], max(worst), load_before, load_after)
            print(f"latency {layout}: leader {leader.name()}: commit-latency-avg median "
                  f"{results[layout][0]:.2f} ms, commit-latency-max {results[layout][1]:.1f} ms "
                  f"over {len(avg)} samples (load {load_before:.2f} -> {load_after:.2f})",
                  flush=True)
        self.tool.close()
        if len(results) == 2:
            (l1, r1), (l2, r2) = results.items()
            print(f"latency: {l2} / {l1} commit-latency-avg ratio {r2[0] / r1[0]:.2f}", flush=True)
        return 0 if not self.failures else 1

    def voter_ids(self, port, deadline, want):
        voters = set()
        while time.time() < deadline:
            rc, out = self.tool.run(port, "describe", "--status")
            if rc == 0:
                m = re.search(r"CurrentVoters:\s*\[(.*)\]", out)
                voters = {int(x) for x in re.findall(r'"id":\s*(\d+)', m.group(1))} if m else set()
                if voters == want:
                    return voters
            time.sleep(0.5)
        return voters


def jmx_raft_metrics(jars, port):
    """kafka.server:type=raft-metrics attributes of a Kafka node, through Kafka's JmxTool."""
    cmd = ["java", "-cp", f"{jars}/*", "org.apache.kafka.tools.JmxTool", "--one-time", "true",
           "--jmx-url", f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi",
           "--object-name", "kafka.server:type=raft-metrics", "--report-format", "properties"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    metrics = {}
    for line in out.splitlines():
        m = re.match(r"^kafka\.server:type=raft-metrics:(.+?)=(.+)$", line.strip())
        if m:
            try:
                metrics[m.group(1)] = float(m.group(2))
            except ValueError:
                pass
    return metrics


def meta_dir_id(data):
    with open(os.path.join(data, "meta.properties")) as f:
        for line in f:
            if line.startswith("directory.id="):
                return line.split("=", 1)[1].strip()
    sys.exit(f"no directory.id in {data}/meta.properties")


def dump_class(jars):
    import zipfile

    tools = [f for f in os.listdir(jars) if re.match(r"kafka-tools-\d.*\.jar$", f)]
    if tools:
        with zipfile.ZipFile(os.path.join(jars, tools[0])) as z:
            if "org/apache/kafka/tools/DumpLogSegments.class" in z.namelist():
                return "org.apache.kafka.tools.DumpLogSegments"
    return "kafka.tools.DumpLogSegments"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["static", "dynamic", "latency", "transfer", "recover", "adopt"])
    p.add_argument("--layouts", default="KKK,KKW", help="latency: the two layouts to compare")
    p.add_argument("--seconds", type=int, default=60, help="latency: samples, one a second")
    p.add_argument("--warmup", type=int, default=10, help="latency: seconds before sampling")
    p.add_argument("--layout", default="KKW")
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--groups", type=int, default=0,
                   help="static: this many Raft groups of ringraft's own on the ringraft voters")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--signals", default="KILL,TERM", help="static: what kills the leader")
    p.add_argument("--kafka-jars", required=True)
    p.add_argument("--tool-classes", required=True)
    p.add_argument("--logging-jar", required=True)
    p.add_argument("--ringraft", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--pids", required=True, help="file the started processes' PIDs go to")
    p.add_argument("--tls", metavar="DIR", help="static: mTLS everywhere, certificates from DIR "
                   "(tls_certs.sh DIR)")
    args = p.parse_args()
    if args.tls:
        args.tls = os.path.abspath(args.tls)
        if args.mode != "static":
            sys.exit("--tls: static runs only")
        for name in ["ca.pem", "client.properties", "node1.pem", "node2.pem", "node3.pem"]:
            if not os.path.exists(os.path.join(args.tls, name)):
                sys.exit(f"--tls: no {name} in {args.tls} (tls_certs.sh makes them)")
    if args.mode in ("static", "transfer") and (len(args.layout) != 3 or set(args.layout) - set("KRW")):
        sys.exit("--layout: three of K, R, W")
    suite = Suite(args)
    run = {"static": suite.run_static, "dynamic": suite.run_dynamic, "latency": suite.run_latency,
           "transfer": suite.run_transfer, "recover": suite.run_recover, "adopt": suite.run_adopt}
    sys.exit(run[args.mode]())


if __name__ == "__main__":
    main()
