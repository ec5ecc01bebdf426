package brokertest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
)

// ClusterLock is the file whose flock(2) lock a test holds while it stops
// nodes of scripts/cluster.sh's cluster: several people run such tests on
// one machine, and two of them stopping nodes at once would each see the
// other's outage.
const ClusterLock = "/tmp/queuey-cluster.lock"

// Cluster is scripts/cluster.sh's three-node RabbitMQ 4.0 cluster as one
// test sees it: QUEUEY_CLUSTER_AMQP_URL (one URL listing the three nodes'
// hosts, which the runtime fails over among), QUEUEY_CLUSTER_ENDPOINTS (the
// nodes' management APIs, comma-separated) and the credentials of FromEnv.
type Cluster struct {
	AMQPURL   string
	Endpoints []string
	Username  string
	Password  string

	t       TB
	mu      sync.Mutex
	stopped map[int]bool
}

// OpenCluster skips t unless QUEUEY_CLUSTER_AMQP_URL and
// QUEUEY_CLUSTER_ENDPOINTS are set, takes ClusterLock for the rest of the
// test (LockCluster), and checks that every node runs. It restarts, when the
// test ends, every node the test stopped and did not restart. Call it first,
// so that its clean-up runs last.
func OpenCluster(t TB) *Cluster {
	t.Helper()
	amqpURL, eps := os.Getenv("QUEUEY_CLUSTER_AMQP_URL"), os.Getenv("QUEUEY_CLUSTER_ENDPOINTS")
	if amqpURL == "" || eps == "" {
		t.Skip("needs the three-node cluster: `bash scripts/cluster.sh start`, then `export $(bash scripts/cluster.sh env)` (QUEUEY_CLUSTER_AMQP_URL, QUEUEY_CLUSTER_ENDPOINTS)")
	}
	env := FromEnv()
	c := &Cluster{AMQPURL: amqpURL, Username: env.Username, Password: env.Password, t: t, stopped: map[int]bool{}}
	for _, e := range strings.Split(eps, ",") {
		c.Endpoints = append(c.Endpoints, strings.TrimRight(strings.TrimSpace(e), "/"))
	}
	LockCluster(t)
	t.Cleanup(c.restartStopped)
	if out, err := c.Script("status"); err != nil {
		t.Fatalf("the cluster is not whole before the test (`bash scripts/cluster.sh start` starts it): %v\n%s", err, out)
	}
	return c
}

// restartStopped restarts every node the test stopped and did not restart.
func (c *Cluster) restartStopped() {
	c.mu.Lock()
	var down []int
	for n, s := range c.stopped {
		if s {
			down = append(down, n)
		}
	}
	c.mu.Unlock()
	for _, n := range down {
		if err := c.RestartNode(n); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
}

// RepoRoot is the repository's root directory, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// Script runs scripts/cluster.sh with args and returns its combined output.
func (c *Cluster) Script(args ...string) ([]byte, error) {
	cmd := exec.Command("bash", append([]string{filepath.Join(RepoRoot(), "scripts", "cluster.sh")}, args...)...)
	return cmd.CombinedOutput()
}

// StopNode stops node n (1-3) cleanly (`cluster.sh stopnode n`), or kills
// its Erlang VM with kill -9 when kill is true; the node is restarted when
// the test ends unless RestartNode has been called.
func (c *Cluster) StopNode(n int, kill bool) error {
	c.mu.Lock()
	c.stopped[n] = true
	c.mu.Unlock()
	cmd := "stopnode"
	if kill {
		cmd = "kill"
	}
	out, err := c.Script(cmd, strconv.Itoa(n))
	if err != nil {
		return fmt.Errorf("cluster.sh %s %d: %w\n%s", cmd, n, err, out)
	}
	// A test that goes on while the node still answers tests nothing it
	// means to; its AMQP port must refuse connections.
	addr := fmt.Sprintf("127.0.0.1:569%d", n)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		conn.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster.sh %s %d returned, but node %d still accepts connections on %s 15 s later\n%s", cmd, n, n, addr, out)
		}
	}
}

// RestartNode starts node n again and waits until it answers.
func (c *Cluster) RestartNode(n int) error {
	if out, err := c.Script("restart", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("cluster.sh restart %d: %w\n%s", n, err, out)
	}
	c.mu.Lock()
	c.stopped[n] = false
	c.mu.Unlock()
	return nil
}

// API is a management API client of the first node that answers.
func (c *Cluster) API() (*rabbithole.Client, error) {
	var errs []error
	for _, e := range c.Endpoints {
		api, err := rabbithole.NewClient(e, c.Username, c.Password)
		if err == nil {
			api.SetTimeout(10 * time.Second)
			_, err = api.Overview()
		}
		if err == nil {
			return api, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", e, err))
	}
	return nil, fmt.Errorf("no management API of the cluster answered: %w", errors.Join(errs...))
}

// Vhost is the virtual host of AMQPURL: the path after its hosts, "/" when
// there is none.
func (c *Cluster) Vhost() string {
	rest := c.AMQPURL[strings.LastIndex(c.AMQPURL, "@")+1:]
	i := strings.IndexByte(rest, '/')
	if i < 0 || i == len(rest)-1 {
		return "/"
	}
	v, err := url.PathUnescape(rest[i+1:])
	if err != nil {
		return rest[i+1:]
	}
	return v
}

// NewPrefix is a prefix of the test's own (Prefix, with tag) whose queues
// are deleted, through any node that answers, when the test ends, once
// every node the test stopped runs again (a classic queue cannot be
// deleted while its node is down).
func (c *Cluster) NewPrefix(tag string) string {
	prefix := Prefix(c.t, tag)
	c.t.Cleanup(func() {
		c.restartStopped()
		api, err := c.API()
		if err == nil {
			err = DeleteUnder(api, c.Vhost(), prefix)
		}
		if err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	})
	return prefix
}

// LockCluster takes ClusterLock until t ends, waiting for whoever holds it,
// unless this process or one it runs under holds it already (an earlier
// test of the same run, or a run started with `flock
// /tmp/queuey-cluster.lock go test ...`).
func LockCluster(t TB) {
	t.Helper()
	f, err := os.OpenFile(ClusterLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("cluster lock: %v", err)
	}
	if heldByUs(f) {
		_ = f.Close()
		return
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("cluster lock %s: %v", ClusterLock, err)
	}
	t.Cleanup(func() { _ = f.Close() }) // closing the file releases the lock
}

// heldByUs reports whether /proc/locks shows a FLOCK on f's inode held by
// this process or its parent, grandparent and so on.
func heldByUs(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return false
	}
	ancestors := map[int]bool{os.Getpid(): true}
	for pid := os.Getppid(); pid > 1 && !ancestors[pid]; pid = parentOf(pid) {
		ancestors[pid] = true
	}
	ino := ":" + strconv.FormatUint(st.Ino, 10)
	sc := bufio.NewScanner(bytes.NewReader(locks))
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || !strings.HasSuffix(fs[5], ino) {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && ancestors[pid] {
			return true
		}
	}
	return false
}

// parentOf is pid's parent, read from /proc; 0 when unknown.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fs[1])
	return ppid
}
