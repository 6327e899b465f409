#!/usr/bin/env python3
"""ringraft beside Apache Kafka's own KRaft benchmark, at the same rate, record size and linger.

Kafka's side is `kafka.tools.TestRaftServer` (3 controllers, the jars of
tests/interop/.work/kafka-<version>, resolved from Maven Central by tests/interop/run.sh or by
this script); ringraft's side is three `ringraft start --load-rate` nodes, one pinned shard
each, as `ringraft bench quorum` runs them. Both write `--record-size` bytes records to
`__cluster_metadata-0` open loop at each rate, with `controller.quorum.append.linger.ms` set
the same on both, one system at a time, alternating which goes first. Not part of CI: it runs
for about two minutes per (rate, linger) pair and round.

    tests/interop/kafka_compare.py                      # 2k,10k,50k,100k x linger 0,25, 1 round
    tests/interop/kafka_compare.py --rates 2000 --lingers 0 --rounds 3
    RINGRAFT=target/release/ringraft tests/interop/kafka_compare.py --json

What each side measures, and how the two are made comparable:
- CPU: utime+stime of the three processes (every thread, the JVM's GC and JIT included) and the
  whole machine's busy time (every CPU's time less /proc/stat's idle, iowait and steal, which a
  tickless kernel keeps exactly; kernel workers included), over the same length of
  steady state, divided by the records committed in it.
- Load: TestRaftServer's throttler counts in whole milliseconds, so its generator wakes at most
  once a millisecond and sends what is due; ringraft's generator does the same
  (`--load-tick-ms 1`, the default of `--load-tick-ms` here). Without it ringraft's generator
  wakes for every record that falls due (50,000 wakes a second at 50k/s), and those wakes, not
  the node's replication, were most of its CPU: at 50k/s, linger 25, 14.2 against 1.9 µs per
  record (19:40, load 1.0-1.4). `--load-tick-ms 0` measures that shape.
- Latency: ringraft's generator measures each record from when it was due (µs, no coordinated
  omission); TestRaftServer measures from its `scheduleAppend` call, in whole milliseconds, and
  prints p75/p99/p99.9 over Kafka's metric window (two 30 s samples). The script therefore lets
  Kafka run 60 s before taking the line it reports, so that the window holds only the second
  half of the run, and measures Kafka's CPU over that same half.
"""

import argparse
import base64
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid

from ports import free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORK = os.path.join(HERE, ".work")
TICK = os.sysconf("SC_CLK_TCK")

# Kafka's metric window is two samples of 30 s: a line printed 60 s after the first commit
# covers only the run's second half.
KAFKA_SETTLE_S = 30
KAFKA_REPORT_AFTER_S = 62
KAFKA_LINE = re.compile(
    r"Throughput \(bytes/second\): ([0-9.]+), Latency \(ms\): ([0-9.]+) p75 ([0-9.]+) p99 ([0-9.]+) p999")


def die(message):
    print(f"kafka_compare: {message}", file=sys.stderr)
    sys.exit(1)


def say(message):
    print(message, flush=True)


def kafka_jars(version):
    jars = os.path.join(WORK, f"kafka-{version}")
    if not os.path.exists(os.path.join(jars, ".complete")):
        if shutil.which("mvn") is None:
            die("mvn is missing: apt-get install maven (the Kafka jars come from Maven Central)")
        say(f"resolving Apache Kafka {version} jars from Maven Central")
        shutil.rmtree(jars, ignore_errors=True)
        subprocess.run(["mvn", "-q", "-B", "-f", os.path.join(HERE, "pom.xml"),
                        f"-Dkafka.version={version}", "dependency:copy-dependencies",
                        f"-DoutputDirectory={jars}"], check=True)
        open(os.path.join(jars, ".complete"), "w").close()
    if shutil.which("java") is None:
        die("java is missing: apt-get install openjdk-17-jdk-headless")
    return jars


def proc_cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def system_busy_ticks():
    """The machine's busy clock in ticks, as the bench's (sys::system_busy_clock_us): every CPU's
    time less idle, iowait and steal. /proc/stat's busy fields are sampled at the tick and miss
    short wakes; its idle time is exact on a tickless kernel."""
    with open("/proc/stat") as f:
        lines = f.read().splitlines()
    v = [int(x) for x in lines[0].split()[1:]]
    cpus = sum(1 for l in lines if l.startswith("cpu") and l[3:4].isdigit())
    # user nice system idle iowait irq softirq steal
    not_busy = sum(v[i] for i in (3, 4, 7) if i < len(v))
    return cpus * time.monotonic() * TICK - not_busy


class Cpu:
    """CPU ticks of a set of processes and of the machine, between two readings."""

    def __init__(self, pids):
        self.pids = pids
        self.start = self.read()

    def read(self):
        return sum(proc_cpu_ticks(p) for p in self.pids), system_busy_ticks(), time.monotonic()

    def since_start(self):
        procs, system, now = self.read()
        return ((procs - self.start[0]) / TICK, (system - self.start[1]) / TICK,
                now - self.start[2])


class Quorum:
    """Three processes started by this script, stopped by the PIDs it recorded."""

    def __init__(self):
        self.procs = []

    def spawn(self, argv, log, env=None):
        out = open(log, "w")
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=env))

    def pids(self):
        return [p.pid for p in self.procs]

    def check_alive(self, logs):
        for p, log in zip(self.procs, logs):
            if p.poll() is not None:
                tail = open(log).read()[-2000:]
                raise RuntimeError(f"process {p.pid} exited ({p.returncode}); {log} ends:\n{tail}")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def directory_id():
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def controller_properties(i, ports, data, linger):
    voters = ",".join(f"{n + 1}@127.0.0.1:{p}" for n, p in enumerate(ports))
    return (f"process.roles=controller\nnode.id={i + 1}\n"
            f"listeners=CONTROLLER://127.0.0.1:{ports[i]}\ncontroller.listener.names=CONTROLLER\n"
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT\n"
            f"controller.quorum.voters={voters}\n{data}\n"
            f"controller.quorum.append.linger.ms={linger}\n")


def run_kafka(args, jars, run_dir, rate, linger):
    ports = free_ports(3)
    quorum, logs = Quorum(), []
    for i in range(3):
        props = os.path.join(run_dir, f"kafka-{i + 1}.properties")
        with open(props, "w") as f:
            f.write(controller_properties(i, ports, f"log.dirs={run_dir}/kafka-data-{i + 1}", linger))
        logs.append(os.path.join(run_dir, f"kafka-{i + 1}.out"))
        quorum.spawn(["java", f"-Xmx{args.kafka_heap}", f"-Xms{args.kafka_heap}", "-cp", f"{jars}/*",
                      "kafka.tools.TestRaftServer", "--config", props,
                      "--replica-directory-id", directory_id(), "--throughput", str(rate),
                      "--record-size", str(args.record_size)], logs[-1])
    try:
        first = wait_for(quorum, logs, lambda line: KAFKA_LINE.search(line), 90, "Kafka's first commit")
        first_at = time.monotonic()
        sleep_until(quorum, logs, first_at + KAFKA_SETTLE_S)
        cpu = Cpu(quorum.pids())
        sleep_until(quorum, logs, first_at + KAFKA_REPORT_AFTER_S)
        line = wait_for(quorum, logs, lambda l: KAFKA_LINE.search(l), 30, "Kafka's report",
                        since=log_sizes(logs))
        procs_s, system_s, wall_s = cpu.since_start()
        m = KAFKA_LINE.search(line)
        records_per_s = float(m.group(1)) / args.record_size
        records = records_per_s * wall_s
        return {"records_per_s": records_per_s, "p75_ms": float(m.group(2)),
                "p99_ms": float(m.group(3)), "p999_ms": float(m.group(4)),
                "cpu_us_per_record": procs_s * 1e6 / max(records, 1),
                "system_cpu_us_per_record": system_s * 1e6 / max(records, 1),
                "first_line": first.strip()}
    finally:
        quorum.stop()


def run_ringraft(args, run_dir, rate, linger):
    ports = free_ports(3)
    cluster = subprocess.run([args.ringraft, "storage", "random-uuid"], check=True,
                             capture_output=True, text=True).stdout.strip()
    cpus = os.cpu_count() or 1
    quorum, logs = Quorum(), []
    for i in range(3):
        node = os.path.join(run_dir, f"ringraft-{i + 1}")
        os.makedirs(node)
        props, tuning = os.path.join(node, "server.properties"), os.path.join(node, "tuning.toml")
        with open(props, "w") as f:
            f.write(controller_properties(i, ports, f"metadata.log.dir={node}/data", linger))
        with open(tuning, "w") as f:
            f.write(f"spin_before_park_us = 0\nio_memory_kib = 512\n\n[[shard]]\ncpu = {i % cpus}\n"
                    'roles = ["acceptor", "raft", "fetch", "snapshot"]\n')
        subprocess.run([args.ringraft, "storage", "format", "-t", cluster, "-c", props],
                       check=True, capture_output=True)
        logs.append(os.path.join(node, "out"))
        quorum.spawn([args.ringraft, "start", "-c", props, "--tuning", tuning,
                      f"--load-rate={rate}", f"--load-record-bytes={args.record_size}",
                      f"--load-tick-ms={args.load_tick_ms}",
                      f"--load-seconds={args.seconds}", f"--load-warmup-ms={args.warmup * 1000}",
                      "--load-report-ms=1000"], logs[-1], env=dict(os.environ, RUST_LOG="warn"))
    try:
        # The progress line that closes the warm-up starts the CPU window; the summary ends it.
        wait_for(quorum, logs, lambda l: '"t_ms"' in l and json.loads(l)["t_ms"] >= args.warmup * 1000 - 50,
                 60 + args.warmup, "ringraft's warm-up")
        cpu = Cpu(quorum.pids())
        line = wait_for(quorum, logs, lambda l: '"summary":true' in l, args.seconds + 30, "ringraft's summary")
        procs_s, system_s, _ = cpu.since_start()
        s = json.loads(line)
        records = max(s["records"], 1)
        return {"records_per_s": s["records"] / args.seconds, "p50_ms": s["p50_us"] / 1000,
                "p75_ms": s["p75_us"] / 1000, "p99_ms": s["p99_us"] / 1000,
                "p999_ms": s["p999_us"] / 1000, "cpu_us_per_record": procs_s * 1e6 / records,
                "system_cpu_us_per_record": system_s * 1e6 / records}
    finally:
        quorum.stop()


def log_sizes(logs):
    return [os.path.getsize(log) for log in logs]


def wait_for(quorum, logs, match, timeout_s, what, since=None):
    """The first line of any log that `match`es, reading each log from its offset in `since`."""
    deadline = time.monotonic() + timeout_s
    since = since or [0] * len(logs)
    while time.monotonic() < deadline:
        quorum.check_alive(logs)
        for log, offset in zip(logs, since):
            with open(log, errors="replace") as f:
                f.seek(offset)
                for line in f:
                    try:
                        if line.endswith("\n") and match(line):
                            return line
                    except (ValueError, KeyError):
                        continue
        time.sleep(0.05)
    raise RuntimeError(f"no {what} within {timeout_s} s (logs: {', '.join(logs)})")


def sleep_until(quorum, logs, when):
    while time.monotonic() < when:
        quorum.check_alive(logs)
        time.sleep(min(0.5, max(0.0, when - time.monotonic())))


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="2000,10000,50000,100000")
    p.add_argument("--lingers", default="0,25")
    p.add_argument("--record-size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seconds", type=int, default=30, help="ringraft's measured seconds")
    p.add_argument("--load-tick-ms", type=int, default=1,
                   help="ringraft's generator wakes at most once per this many ms, as Kafka's does "
                        "(0: at each record's due time)")
    p.add_argument("--warmup", type=int, default=5, help="ringraft's warm-up seconds")
    p.add_argument("--kafka-version", default="4.4.0")
    p.add_argument("--kafka-heap", default="1g")
    p.add_argument("--dir", default=os.path.join(WORK, "compare"),
                   help="where the logs go (a real disk, not tmpfs)")
    p.add_argument("--ringraft", default=os.environ.get("RINGRAFT", os.path.join(ROOT, "target/release/ringraft")))
    p.add_argument("--systems", default="kafka,ringraft", help="run only these (for profiling one side)")
    p.add_argument("--json", action="store_true", help="one JSON object per measured phase")
    args = p.parse_args()
    if not os.access(args.ringraft, os.X_OK):
        die(f"{args.ringraft} is not there: cargo build --release (or set RINGRAFT)")
    systems = args.systems.split(",")
    jars = kafka_jars(args.kafka_version) if "kafka" in systems else None
    rates = [int(r) for r in args.rates.split(",")]
    lingers = [int(x) for x in args.lingers.split(",")]
    results = {}
    for rnd in range(args.rounds):
        for linger in lingers:
            for rate in rates:
                order = ["kafka", "ringraft"] if (rnd + rates.index(rate)) % 2 == 0 else ["ringraft", "kafka"]
                for system in [s for s in order if s in systems]:
                    run_dir = os.path.join(args.dir, f"{system}-{rate}-{linger}-{rnd}")
                    shutil.rmtree(run_dir, ignore_errors=True)
                    os.makedirs(run_dir)
                    load = load_average()
                    say(f"round {rnd + 1}: {system} at {rate}/s, linger {linger} ms (load {load})")
                    try:
                        r = (run_kafka(args, jars, run_dir, rate, linger) if system == "kafka"
                             else run_ringraft(args, run_dir, rate, linger))
                    except RuntimeError as e:
                        r = {"error": str(e).splitlines()[0]}
                    r.update(system=system, rate=rate, linger_ms=linger, round=rnd + 1, load=load)
                    results.setdefault((rate, linger), []).append(r)
                    say(json.dumps(r) if args.json else f"  {summary(r)}")
                    shutil.rmtree(run_dir, ignore_errors=True)
    print_table(results)


def summary(r):
    if "error" in r:
        return f"failed: {r['error']}"
    return (f"{r['records_per_s']:.0f} records/s ({r['records_per_s'] / r['rate']:.2f} of the rate), p99 {r['p99_ms']:.2f} ms, CPU/record "
            f"{r['cpu_us_per_record']:.1f} µs (machine {r['system_cpu_us_per_record']:.1f} µs)")


def median_of(runs, system, key):
    values = [r[key] for r in runs if r["system"] == system and key in r]
    return statistics.median(values) if values else None


def print_table(results):
    say("\nmedians per (rate, linger); ratios are ringraft / Kafka (goal: CPU <= 0.5x; p99 <= 0.25x at "
        "linger 0, <= 0.8x at linger 25)")
    say("| rate/s | linger ms | ringraft CPU µs/rec (machine) | Kafka CPU µs/rec (machine) | CPU ratio "
        "(machine) | ringraft p99 ms | Kafka p99 ms | p99 ratio | rounds |")
    say("|---|---|---|---|---|---|---|---|---|")
    for (rate, linger), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        m = {(s, k): median_of(runs, s, k) for s in ("ringraft", "kafka")
             for k in ("cpu_us_per_record", "system_cpu_us_per_record", "p99_ms", "records_per_s")}
        if None in m.values():
            # A side that failed, or was not run (--systems): its cells stay empty.
            failed = [f"{r['system']}: {r['error']}" for r in runs if "error" in r]
            cell = lambda s, k, f: "—" if m[(s, k)] is None else f.format(m[(s, k)])
            say(f"| {rate} | {linger} | {cell('ringraft', 'cpu_us_per_record', '{:.1f}')} | "
                f"{cell('kafka', 'cpu_us_per_record', '{:.1f}')} | — | "
                f"{cell('ringraft', 'p99_ms', '{:.2f}')} | {cell('kafka', 'p99_ms', '{:.1f}')} | — | "
                f"{'; '.join(failed)} |")
            continue
        ratio = lambda k: m[("ringraft", k)] / m[("kafka", k)] if m[("kafka", k)] else float("inf")
        rounds = sum(1 for r in runs if r["system"] == "ringraft")
        # A system that committed less than 95% of the rate did not hold it: say so in the row.
        held = "; ".join(f"{s} held {m[(s, 'records_per_s')] / rate:.2f} of the rate"
                         for s in ("ringraft", "kafka") if m[(s, "records_per_s")] < 0.95 * rate)
        rounds = f"{rounds}{' (' + held + ')' if held else ''}"
        say(f"| {rate} | {linger} | {m[('ringraft', 'cpu_us_per_record')]:.1f} "
            f"({m[('ringraft', 'system_cpu_us_per_record')]:.1f}) | {m[('kafka', 'cpu_us_per_record')]:.1f} "
            f"({m[('kafka', 'system_cpu_us_per_record')]:.1f}) | {ratio('cpu_us_per_record'):.2f} "
            f"({ratio('system_cpu_us_per_record'):.2f}) | {m[('ringraft', 'p99_ms')]:.2f} | "
            f"{m[('kafka', 'p99_ms')]:.1f} | {ratio('p99_ms'):.2f} | {rounds} |")


if __name__ == "__main__":
    main()
