// lincheck: a linearizability test of examples/kv, checked by Porcupine.
//
// It starts three kv processes on 127.0.0.1, runs concurrent clients doing put, get,
// compare-and-set and delete on a few keys while it kills (SIGKILL, then restarts) and pauses
// (SIGSTOP, then SIGCONT) nodes, leaders included. Every operation's call and return times are
// recorded; a write whose outcome is unknown (a timeout, a connection lost mid-request, a 503)
// is recorded as pending forever, as Porcupine expects. The history goes to Porcupine's
// checker with a key-value model partitioned by key.
//
//	lincheck -kv target/release/examples/kv -duration 60s -min-kills 3
//	lincheck -kv … -mutation        # kv's broken read path: the checker must say Illegal
//
// Exit status 0 means the verdict was the expected one (linearizable; Illegal with -mutation).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
)

var (
	kvBin      = flag.String("kv", "target/release/examples/kv", "the kv example binary")
	duration   = flag.Duration("duration", 60*time.Second, "how long the clients run")
	clients    = flag.Int("clients", 5, "concurrent clients")
	keys       = flag.Int("keys", 3, "distinct keys")
	faultEvery = flag.Duration("fault-every", 6*time.Second, "time between faults")
	minKills   = flag.Int("min-kills", 3, "fail unless at least this many kills happened")
	minOps     = flag.Int("min-ops", 200, "fail unless at least this many operations completed")
	mutation   = flag.Bool("mutation", false, "run kv with its broken read path; expect Illegal")
	workDir    = flag.String("work", "", "where the nodes' directories and logs go (default: a temp dir)")
	seed       = flag.Int64("seed", 0, "random seed (0: from the clock)")
	rate       = flag.Int("rate", 0, "operations per second per client, at most (0: as fast as answered)")
	groups     = flag.Int("groups", 0, "spread kv's keys over this many Raft groups (kv --groups)")
)

// ---- the nodes ----------------------------------------------------------------------------

type node struct {
	id       int
	raftPort int
	httpPort int
	dir      string
	log      string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal("no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (n *node) start(voters string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	args := []string{
		"--id", strconv.Itoa(n.id), "--voters", voters,
		"--http", fmt.Sprintf("127.0.0.1:%d", n.httpPort), "--dir", n.dir,
		// Snapshots by ringraft's policy every 8 KiB committed, and retention small enough
		// that the log start moves and restarted nodes catch up through FetchSnapshot.
		"--property", "metadata.log.max.record.bytes.between.snapshots=8192",
		"--property", "metadata.max.retention.bytes=16384",
	}
	if *mutation {
		args = append(args, "--unsafe-local-reads")
	}
	if *groups > 0 {
		args = append(args, "--groups", strconv.Itoa(*groups))
	}
	logFile, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fatal("%v", err)
	}
	cmd := exec.Command(*kvBin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		fatal("cannot start %s: %v", *kvBin, err)
	}
	n.cmd = cmd
	exited := make(chan struct{})
	n.exited = exited
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
}

// signal sends sig to the process this harness started (by its recorded pid only).
func (n *node) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

func (n *node) kill() {
	n.signal(syscall.SIGKILL)
	<-n.exited
}

func (n *node) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", n.httpPort, path)
}

// ---- the history --------------------------------------------------------------------------

type kvInput struct {
	op    string // "get", "put", "cas", "delete"
	key   string
	value string // put's value, cas's new value
	old   string // cas's expected value
}

type kvOutput struct {
	value   string
	exists  bool
	ok      bool // cas: swapped
	unknown bool // a write whose outcome is unknown
}

var (
	historyMu sync.Mutex
	history   []porcupine.Operation
	start     = time.Now()
	stats     struct{ reads, writes, unknown, failed, kills, pauses int64 }
)

func now() int64 { return int64(time.Since(start)) }

func record(client int, in kvInput, call int64, out kvOutput, ret int64) {
	historyMu.Lock()
	defer historyMu.Unlock()
	history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// The model: per key, the value or nil (absent).
var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(kvInput).key
			byKey[k] = append(byKey[k], op)
		}
		names := make([]string, 0, len(byKey))
		for k := range byKey {
			names = append(names, k)
		}
		sort.Strings(names)
		out := make([][]porcupine.Operation, 0, len(names))
		for _, k := range names {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return (*string)(nil) },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		cur := state.(*string)
		in := input.(kvInput)
		out := output.(kvOutput)
		switch in.op {
		case "get":
			if cur == nil {
				return !out.exists, cur
			}
			return out.exists && out.value == *cur, cur
		case "put":
			v := in.value
			return true, &v
		case "delete":
			return true, (*string)(nil)
		case "cas":
			matches := cur != nil && *cur == in.old
			if out.unknown || out.ok {
				if !matches {
					return out.unknown, cur
				}
				v := in.value
				return true, &v
			}
			return !matches, cur
		}
		return false, cur
	},
	Equal: func(a, b interface{}) bool {
		x, y := a.(*string), b.(*string)
		if x == nil || y == nil {
			return x == nil && y == nil
		}
		return *x == *y
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(kvInput), output.(kvOutput)
		switch {
		case out.unknown:
			return fmt.Sprintf("%s(%s, %q, %q) -> ?", in.op, in.key, in.old, in.value)
		case in.op == "get" && !out.exists:
			return fmt.Sprintf("get(%s) -> absent", in.key)
		case in.op == "get":
			return fmt.Sprintf("get(%s) -> %q", in.key, out.value)
		case in.op == "cas":
			return fmt.Sprintf("cas(%s, %q -> %q) -> %v", in.key, in.old, in.value, out.ok)
		default:
			return fmt.Sprintf("%s(%s, %q)", in.op, in.key, in.value)
		}
	},
}

// ---- the clients --------------------------------------------------------------------------

var (
	nodes []*node
	// Per key, the node its requests go to first: with -groups the keys' groups may each be
	// led by another node, and one guess for all keys would bounce every client between them.
	leaders map[string]*atomic.Int64
)

// leaderOf is where requests for key go first.
func leaderOf(key string) *atomic.Int64 { return leaders[key] }

var errUnknown = errors.New("outcome unknown")
var errNotDone = errors.New("not done")

// attempt sends one request to n. Returns the status and body, errNotDone when it certainly
// did nothing (refused, 421), errUnknown when it may have done something.
func attempt(client *http.Client, leader *atomic.Int64, n *node, method, path string, body []byte) (int, string, error) {
	req, _ := http.NewRequest(method, n.url(path), bytes.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return 0, "", errNotDone
		}
		return 0, "", errUnknown
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", errUnknown
	}
	hint, hintErr := strconv.Atoi(resp.Header.Get("X-Leader"))
	known := hintErr == nil && hint >= 1 && hint <= len(nodes)
	if known {
		leader.Store(int64(hint))
	}
	switch resp.StatusCode {
	case 421:
		if !known {
			leader.Store(int64(rand.Intn(len(nodes)) + 1))
		}
		return 421, "", errNotDone
	case 503, 504:
		return resp.StatusCode, string(data), errUnknown
	}
	return resp.StatusCode, string(data), nil
}

// run performs one operation until it has an answer, or gives up: a write then is unknown,
// a read is dropped (it changed nothing). Returns the answer, if there was one.
func run(id int, client *http.Client, rng *rand.Rand, in kvInput) *kvOutput {
	var method, path string
	var body []byte
	switch in.op {
	case "get":
		method, path = "GET", "/kv/"+in.key
	case "put":
		method, path, body = "PUT", "/kv/"+in.key, []byte(in.value)
	case "delete":
		method, path = "DELETE", "/kv/"+in.key
	case "cas":
		method, path, body = "POST", "/cas/"+in.key, []byte(in.old+"\n"+in.value)
	}
	write := in.op != "get"
	call := now()
	giveUp := time.Now().Add(5 * time.Second)
	for time.Now().Before(giveUp) {
		leader := leaderOf(in.key)
		target := nodes[leader.Load()-1]
		if !write && *mutation {
			// The broken read path is reachable on every node.
			target = nodes[rng.Intn(len(nodes))]
		}
		status, data, err := attempt(client, leader, target, method, path, body)
		if errors.Is(err, errNotDone) {
			if status != 421 {
				leader.Store(int64(rng.Intn(len(nodes)) + 1))
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if errors.Is(err, errUnknown) {
			if write {
				atomic.AddInt64(&stats.unknown, 1)
				record(id, in, call, kvOutput{unknown: true}, math.MaxInt64)
			} else {
				atomic.AddInt64(&stats.failed, 1)
			}
			return nil
		}
		ret := now()
		var out kvOutput
		switch {
		case in.op == "get" && status == 200:
			out = kvOutput{value: data, exists: true}
		case in.op == "get" && status == 404:
			out = kvOutput{}
		case in.op == "cas" && status == 200:
			out = kvOutput{ok: true}
		case in.op == "cas" && status == 409:
			out = kvOutput{ok: false}
		case status == 200:
			out = kvOutput{}
		default:
			fatal("unexpected answer %d %q to %s %s", status, data, method, path)
		}
		if write {
			atomic.AddInt64(&stats.writes, 1)
		} else {
			atomic.AddInt64(&stats.reads, 1)
		}
		record(id, in, call, out, ret)
		return &out
	}
	if write {
		atomic.AddInt64(&stats.unknown, 1)
		record(id, in, call, kvOutput{unknown: true}, math.MaxInt64)
	} else {
		atomic.AddInt64(&stats.failed, 1)
	}
	return nil
}

func clientLoop(id int, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	rng := rand.New(rand.NewSource(*seed + int64(id)*7919))
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	seq := 0
	seen := map[string]string{} // the last value this client saw for each key
	var pace *time.Ticker
	if *rate > 0 {
		pace = time.NewTicker(time.Second / time.Duration(*rate))
		defer pace.Stop()
	}
	for {
		if pace != nil {
			select {
			case <-stop:
				return
			case <-pace.C:
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		seq++
		key := fmt.Sprintf("k%d", rng.Intn(*keys))
		value := fmt.Sprintf("c%d-%d", id, seq)
		var in kvInput
		switch p := rng.Intn(100); {
		case p < 50:
			in = kvInput{op: "get", key: key}
		case p < 75:
			in = kvInput{op: "put", key: key, value: value}
		case p < 95:
			// Expect the value this client last saw, so that many swaps succeed.
			in = kvInput{op: "cas", key: key, old: seen[key], value: value}
		default:
			in = kvInput{op: "delete", key: key}
		}
		out := run(id, client, rng, in)
		switch {
		case out == nil:
		case in.op == "get" && out.exists:
			seen[key] = out.value
		case in.op == "put" || (in.op == "cas" && out.ok):
			seen[key] = in.value
		}
	}
}

// ---- the faults ---------------------------------------------------------------------------

func currentLeader() *node {
	for _, n := range nodes {
		resp, err := http.Get(n.url("/status"))
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, f := range strings.Fields(string(data)) {
			if v, ok := strings.CutPrefix(f, "leader="); ok {
				if id, err := strconv.Atoi(v); err == nil && id >= 1 && id <= len(nodes) {
					return nodes[id-1]
				}
			}
		}
	}
	return nil
}

func faults(voters string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	rng := rand.New(rand.NewSource(*seed + 1))
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(*faultEvery):
		}
		victim := nodes[rng.Intn(len(nodes))]
		if l := currentLeader(); l != nil && rng.Intn(2) == 0 {
			victim = l
		}
		if i%2 == 0 {
			fmt.Printf("lincheck: %6.1fs kill node %d\n", time.Since(start).Seconds(), victim.id)
			victim.kill()
			atomic.AddInt64(&stats.kills, 1)
			time.Sleep(time.Duration(500+rng.Intn(1500)) * time.Millisecond)
			victim.start(voters)
		} else {
			fmt.Printf("lincheck: %6.1fs pause node %d\n", time.Since(start).Seconds(), victim.id)
			victim.signal(syscall.SIGSTOP)
			atomic.AddInt64(&stats.pauses, 1)
			time.Sleep(time.Duration(1000+rng.Intn(3000)) * time.Millisecond)
			victim.signal(syscall.SIGCONT)
		}
	}
}

// ---- main ---------------------------------------------------------------------------------

func fatal(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "lincheck: "+format+"\n", args...)
	for _, n := range nodes {
		n.signal(syscall.SIGCONT)
		n.signal(syscall.SIGKILL)
	}
	os.Exit(2)
}

func main() {
	flag.Parse()
	if *seed == 0 {
		*seed = time.Now().UnixNano()
	}
	if _, err := os.Stat(*kvBin); err != nil {
		fatal("no kv binary at %s: cargo build --release --example kv", *kvBin)
	}
	dir := *workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "lincheck")
		if err != nil {
			fatal("%v", err)
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal("%v", err)
	}
	var parts []string
	for i := 1; i <= 3; i++ {
		n := &node{id: i, raftPort: freePort(), httpPort: freePort(),
			dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), log: filepath.Join(dir, fmt.Sprintf("n%d.log", i))}
		nodes = append(nodes, n)
		parts = append(parts, fmt.Sprintf("%d@127.0.0.1:%d", i, n.raftPort))
	}
	voters := strings.Join(parts, ",")
	for _, n := range nodes {
		n.start(voters)
	}
	deadline := time.Now().Add(30 * time.Second)
	for currentLeader() == nil {
		if time.Now().After(deadline) {
			fatal("no leader within 30 s; logs in %s", dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
	leaders = map[string]*atomic.Int64{}
	for k := 0; k < *keys; k++ {
		first := new(atomic.Int64)
		first.Store(int64(currentLeader().id))
		leaders[fmt.Sprintf("k%d", k)] = first
	}
	fmt.Printf("lincheck: seed %d, %d clients on %d keys for %v, a fault every %v, logs in %s\n",
		*seed, *clients, *keys, *duration, *faultEvery, dir)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go clientLoop(c, stop, &wg)
	}
	faultsDone := make(chan struct{})
	go faults(voters, stop, faultsDone)
	time.Sleep(*duration)
	close(stop)
	<-faultsDone
	wg.Wait()
	for _, n := range nodes {
		n.signal(syscall.SIGCONT)
		n.signal(syscall.SIGTERM)
	}
	for _, n := range nodes {
		select {
		case <-n.exited:
		case <-time.After(10 * time.Second):
			n.kill()
		}
	}

	fmt.Printf("lincheck: %d operations: %d reads, %d writes, %d writes with unknown outcome, "+
		"%d reads abandoned; %d kills, %d pauses\n",
		len(history), stats.reads, stats.writes, stats.unknown, stats.failed, stats.kills, stats.pauses)
	result, info := porcupine.CheckOperationsVerbose(model, history, 5*time.Minute)
	fmt.Printf("lincheck: Porcupine says %s\n", result)
	if result == porcupine.Illegal {
		viz := filepath.Join(dir, "history.html")
		if err := porcupine.VisualizePath(model, info, viz); err == nil {
			fmt.Printf("lincheck: the history is drawn in %s\n", viz)
		}
	}
	completed := int(stats.reads + stats.writes)
	switch {
	case *mutation && result == porcupine.Illegal:
		fmt.Println("lincheck: the broken read path was caught, as it must be")
	case *mutation:
		fmt.Println("lincheck: FAILED: the broken read path was not caught")
		os.Exit(1)
	case result != porcupine.Ok:
		fmt.Println("lincheck: FAILED: the history is not linearizable")
		os.Exit(1)
	case int(stats.kills) < *minKills:
		fmt.Printf("lincheck: FAILED: %d kills, fewer than %d\n", stats.kills, *minKills)
		os.Exit(1)
	case completed < *minOps:
		fmt.Printf("lincheck: FAILED: %d operations completed, fewer than %d\n", completed, *minOps)
		os.Exit(1)
	default:
		fmt.Println("lincheck: linearizable")
	}
}
