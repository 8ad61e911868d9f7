package fleettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ProcCluster is an etcd cluster whose members are processes of their own
// on loopback ports, each with its data in a directory of its own: Debian's
// etcd 3.4 when HASHLB_ETCD_BIN names it, else the test binary itself
// serving go.mod's embedded etcd (RunMemberIfAsked). A member in a process
// can do what one in the test process cannot: hang (Stop, SIGSTOP: its
// sockets stay open and nothing answers) until Cont, die (Kill, SIGKILL),
// or be replaced by an empty one (Replace).
type ProcCluster struct {
	t       testing.TB
	bin     string
	child   bool // bin is the test binary (RunMemberIfAsked)
	Members []*ProcMember
	cli     *clientv3.Client // the test's own client, for status and membership
}

// ProcMember is one member of a ProcCluster.
type ProcMember struct {
	Name, Dir    string
	Client, Peer string // host:port
	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	out          bytes.Buffer
	stopped      bool
}

// rejoinLimit bounds how long Rejoin asks etcd to add a member back.
const rejoinLimit = 30 * time.Second

// memberEnv marks the test binary run as an etcd member (RunMemberIfAsked).
const memberEnv = "HASHLB_FLEETTEST_ETCD_MEMBER"

// hooked is set once the test binary's TestMain has called
// RunMemberIfAsked: only then can it serve as a member.
var hooked bool

// EtcdImpl names what a ProcCluster's members run, for a test's log.
func EtcdImpl() string {
	if bin := os.Getenv("HASHLB_ETCD_BIN"); bin != "" {
		return bin
	}
	return "embedded etcd (child process)"
}

// StartProcCluster starts a cluster of n member processes on free loopback
// ports and waits, at most ClusterStart, until every member serves a
// linearizable read through its gateway. Every member is killed at t's
// cleanup.
func StartProcCluster(t testing.TB, n int) *ProcCluster {
	t.Helper()
	c := &ProcCluster{t: t, bin: os.Getenv("HASHLB_ETCD_BIN")}
	if c.bin == "" {
		if !hooked {
			t.Fatal("fleettest.StartProcCluster without HASHLB_ETCD_BIN needs TestMain to call fleettest.RunMemberIfAsked first")
		}
		c.bin, c.child = os.Args[0], true
	}
	base := t.TempDir()
	var err error
	for try := 1; try <= StartTries; try++ {
		c.Members = nil
		var peers []string
		for i := range n {
			m := &ProcMember{Name: fmt.Sprintf("m%d", i+1), Dir: filepath.Join(base, fmt.Sprintf("try%d-m%d", try, i+1)),
				Client: FreeAddr(t), Peer: FreeAddr(t)}
			peers = append(peers, m.Name+"=http://"+m.Peer)
			c.Members = append(c.Members, m)
		}
		initial := strings.Join(peers, ",")
		for _, m := range c.Members {
			if err = c.start(m, initial, "new"); err != nil {
				break
			}
		}
		if err == nil {
			err = c.Wait(ClusterStart)
		}
		if err == nil {
			break
		}
		c.killAll()
		if !PortTaken(err.Error()) && !c.portTaken() {
			t.Fatalf("starting a %d-member etcd cluster (%s): %v", n, EtcdImpl(), err)
		}
	}
	if err != nil {
		t.Fatalf("starting a %d-member etcd cluster (%s): %v", n, EtcdImpl(), err)
	}
	t.Cleanup(c.killAll)
	c.cli, err = clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cli.Close() })
	return c
}

// portTaken reports whether a member's output says a port it was given
// was taken before it bound it.
func (c *ProcCluster) portTaken() bool {
	for _, m := range c.Members {
		m.mu.Lock()
		out := m.out.String()
		m.mu.Unlock()
		if PortTaken(out) {
			return true
		}
	}
	return false
}

// start runs member m with --initial-cluster initial in state ("new" or
// "existing"; ignored by a member that has data).
func (c *ProcCluster) start(m *ProcMember, initial, state string) error {
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	client, peer := "http://"+m.Client, "http://"+m.Peer
	args := []string{"--name", m.Name, "--data-dir", filepath.Join(m.Dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", initial, "--initial-cluster-state", state,
		"--initial-cluster-token", "hashlb-test", "--log-level", "error"}
	cmd := exec.Command(c.bin, args...)
	cmd.Env = os.Environ()
	if c.child {
		cmd.Env = append(cmd.Env, memberEnv+"=1")
	} else {
		switch runtime.GOARCH {
		case "amd64", "ppc64le", "s390x": // etcd 3.4's supported architectures
		default:
			cmd.Env = append(cmd.Env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
		}
	}
	// A member outlives no test binary that dies without its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.out.Reset()
	cmd.Stdout, cmd.Stderr = &lockedWriter{m}, &lockedWriter{m}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	m.cmd, m.exited, m.stopped = cmd, make(chan struct{}), false
	go func(done chan struct{}) {
		cmd.Wait()
		close(done)
	}(m.exited)
	return nil
}

// lockedWriter appends a member's output under its lock.
type lockedWriter struct{ m *ProcMember }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if w.m.out.Len() < 1<<20 {
		w.m.out.Write(p)
	}
	return len(p), nil
}

// running reports whether m's process runs and is not stopped.
func (m *ProcMember) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.stopped {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Wait waits, at most limit, until every member that runs (and is not
// stopped) serves a linearizable read through its gateway.
func (c *ProcCluster) Wait(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, m := range c.Members {
		if !m.running() {
			continue
		}
		if err := WaitGateway(m.Client, time.Until(deadline), m.exited); err != nil {
			m.mu.Lock()
			out := m.out.String()
			m.mu.Unlock()
			return fmt.Errorf("etcd member %s: %v\n%s", m.Name, err, tail(out))
		}
	}
	return nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// Endpoints are the members' client addresses (host:port), in order.
func (c *ProcCluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Client)
	}
	return eps
}

// Leader is the index of the member that leads, as the first running
// member that answers its status within a second sees it; -1 when none
// does.
func (c *ProcCluster) Leader() int {
	ids := map[uint64]int{}
	var lead uint64
	for i, m := range c.Members {
		if !m.running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.cli.Status(ctx, m.Client)
		cancel()
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if lead == 0 {
			lead = st.Leader
		}
	}
	if i, ok := ids[lead]; ok && lead != 0 {
		return i
	}
	return -1
}

// Stop freezes member i (SIGSTOP): its process stays, its sockets stay
// open, and it answers nothing, to peers or clients, until Cont.
func (c *ProcCluster) Stop(i int) { c.signal(i, syscall.SIGSTOP, true) }

// Cont resumes member i after Stop (SIGCONT).
func (c *ProcCluster) Cont(i int) { c.signal(i, syscall.SIGCONT, false) }

func (c *ProcCluster) signal(i int, s syscall.Signal, stopped bool) {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	if err := m.cmd.Process.Signal(s); err != nil {
		c.t.Errorf("etcd member %s: %v: %v", m.Name, s, err)
	}
	m.stopped = stopped
}

// Kill ends member i at once (SIGKILL, after SIGCONT should it be stopped)
// and waits for its process.
func (c *ProcCluster) Kill(i int) { c.Members[i].kill() }

// Restart starts member i again on its ports and data, without waiting
// (Wait): a member whose peers are down has no quorum to be ready with.
func (c *ProcCluster) Restart(i int) error {
	return c.start(c.Members[i], c.initial(), "new") // a member with data ignores both
}

// initial is the cluster's --initial-cluster of all its members.
func (c *ProcCluster) initial() string {
	var peers []string
	for _, m := range c.Members {
		peers = append(peers, m.Name+"=http://"+m.Peer)
	}
	return strings.Join(peers, ",")
}

// Wipe replaces member i by an empty one, as an operator replaces a member
// whose disk is lost: the member is killed, removed from the cluster
// (etcd's member remove through the others), and its data deleted. Rejoin
// adds it back.
func (c *ProcCluster) Wipe(i int) error {
	m := c.Members[i]
	m.kill()
	id, err := c.memberID(m)
	if err != nil {
		return err
	}
	// The two left must commit the change: while they elect a leader (the
	// killed member may have led), or while the one the client asks has
	// not yet seen the member go (etcd answers "unhealthy cluster"), the
	// call fails or times out: ask again until rejoinLimit. An answer lost
	// after etcd applied the change makes the next ask find no such member:
	// removed all the same.
	deadline := time.Now().Add(rejoinLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.cli.MemberRemove(ctx, id)
		cancel()
		if err == nil || strings.Contains(err.Error(), "member not found") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member remove %s: %w", m.Name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return os.RemoveAll(filepath.Join(m.Dir, "data"))
}

// Rejoin adds member i, wiped, back to the cluster (etcd's member add on
// its peer address) and starts it empty with --initial-cluster-state
// existing, without waiting (Wait): it copies the cluster's data from the
// leader.
func (c *ProcCluster) Rejoin(i int) error {
	m := c.Members[i]
	// etcd refuses a member while one of the others has been connected for
	// less than its health interval (5 s: "unhealthy cluster"), as one
	// just resumed or restarted: ask again until rejoinLimit.
	deadline := time.Now().Add(rejoinLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.cli.MemberAdd(ctx, []string{"http://" + m.Peer})
		cancel()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
			return fmt.Errorf("etcd member add %s: %w", m.Name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return c.start(m, c.initial(), "existing")
}

// memberID is m's id in the cluster's member list.
func (c *ProcCluster) memberID(m *ProcMember) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.cli.MemberList(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd member list: %w", err)
	}
	for _, mm := range list.Members {
		for _, u := range mm.PeerURLs {
			if u == "http://"+m.Peer {
				return mm.ID, nil
			}
		}
	}
	return 0, errors.New("etcd member list: no member " + m.Name)
}

func (m *ProcMember) kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	KillWait(cmd, exited)
}

// KillWait ends a started process with SIGKILL (after SIGCONT, should it be
// stopped) and waits until exited, which its Wait's return closes, is
// closed. A nil cmd (never started) or one that has already exited is left
// alone.
func KillWait(cmd *exec.Cmd, exited <-chan struct{}) {
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	<-exited
}

func (c *ProcCluster) killAll() {
	for _, m := range c.Members {
		m.kill()
	}
}
