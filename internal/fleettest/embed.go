package fleettest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// StartTries is how often an etcd whose port was taken between its pick and
// the bind is started.
const StartTries = 3

// PortTaken reports whether etcd's error or output says its port was taken.
func PortTaken(out string) bool { return strings.Contains(out, "address already in use") }

// StartEmbedded runs go.mod's etcd server in process on clientAddr ("" for
// a free loopback port) with its data in dir (reuse dir to restart on the
// same data), waits until it serves, and returns its client address
// (host:port) and a stop function (also run at t's cleanup; calling it
// twice is fine).
func StartEmbedded(t testing.TB, dir, clientAddr string) (string, func()) {
	t.Helper()
	return startEmbedded(t, dir, clientAddr, nil)
}

// StartEmbeddedTLS is StartEmbedded on a free port serving clients over
// TLS only, with the server certificate cert and key, and requiring a
// client certificate signed by the CA in file ca (etcd's
// --client-cert-auth).
func StartEmbeddedTLS(t testing.TB, dir, ca, cert, key string) (string, func()) {
	t.Helper()
	return startEmbedded(t, dir, "", &transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: ca, ClientCertAuth: true})
}

func startEmbedded(t testing.TB, dir, clientAddr string, tlsInfo *transport.TLSInfo) (string, func()) {
	t.Helper()
	scheme := "http"
	free := clientAddr == ""
	if free {
		clientAddr = FreeAddr(t)
	}
	cfg := embed.NewConfig()
	cfg.Name = "hashlb-e2e"
	cfg.Dir = dir
	// etcd logs errors of its own shutdown; keep its log beside the data.
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cfg.UnsafeNoFsync = true // test data only; keeps the tests fast on slow disks
	if tlsInfo != nil {
		scheme = "https"
		cfg.ClientTLSInfo = *tlsInfo
	}
	client := url.URL{Scheme: scheme, Host: clientAddr}
	peer := url.URL{Scheme: "http", Host: FreeAddr(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	for try := 1; err != nil && try < StartTries && PortTaken(err.Error()); try++ {
		// A port taken between its pick and the bind: others.
		if free {
			clientAddr = FreeAddr(t)
			client = url.URL{Scheme: scheme, Host: clientAddr}
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		}
		peer = url.URL{Scheme: "http", Host: FreeAddr(t)}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err = embed.StartEtcd(cfg)
	}
	if err != nil {
		log, _ := os.ReadFile(cfg.LogOutputs[0])
		t.Fatalf("starting embedded etcd in %s: %v\n%s", dir, err, log)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		t.Fatalf("embedded etcd: %v", err)
	case <-time.After(60 * time.Second):
		e.Close()
		t.Fatal("embedded etcd was not ready within 60s")
	}
	// A TLS server's gateway needs a client certificate: it is ready with
	// ReadyNotify.
	if tlsInfo == nil {
		if err := WaitGateway(clientAddr, 30*time.Second, nil); err != nil {
			e.Close()
			t.Fatal(err)
		}
	}
	var once sync.Once
	stop := func() { once.Do(func() { closeEmbedded(t, e) }) }
	t.Cleanup(stop)
	return clientAddr, stop
}

// closeEmbedded stops an embedded etcd, waiting at most 20 s: embed.Etcd.Close
// was seen to block for good once in a while (in its loop over the servers
// it started, etcd 3.7.3) after the server had served for seconds. A test
// must not hang on that; the leaked goroutines die with the test binary.
func closeEmbedded(t testing.TB, e *embed.Etcd) {
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Logf("embedded etcd did not finish closing within 20s; going on without it")
	}
}

// ClusterStart bounds a cluster's start (every member ready, every
// gateway answering) and a restarted member's return.
const ClusterStart = 60 * time.Second

// Cluster is an etcd cluster of members of go.mod's etcd server embedded in
// the test process, each on loopback ports of its own, with its data in a
// directory of its own: the cluster a user runs, as three or five
// processes, in one. A member can be killed (Kill: the server stops with
// no word to its peers, as SIGKILL leaves them, and its ports close) and
// started again on the same ports and data (Restart).
type Cluster struct {
	t       testing.TB
	Members []*Member
}

// Member is one member of a Cluster.
type Member struct {
	Name         string
	Dir          string
	Client, Peer string // host:port
	initial      string // the cluster's --initial-cluster
	mu           sync.Mutex
	e            *embed.Etcd
}

// StartCluster starts a cluster of n members on free loopback ports and
// waits, at most ClusterStart, until it has a leader and every member's
// gateway answers a linearizable read. Every member is killed at t's
// cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	base := t.TempDir()
	var err error
	for try := 1; try <= StartTries; try++ {
		c := &Cluster{t: t}
		var peers []string
		for i := range n {
			m := &Member{Name: fmt.Sprintf("m%d", i+1), Dir: filepath.Join(base, fmt.Sprintf("try%d-m%d", try, i+1)),
				Client: FreeAddr(t), Peer: FreeAddr(t)}
			peers = append(peers, m.Name+"=http://"+m.Peer)
			c.Members = append(c.Members, m)
		}
		for _, m := range c.Members {
			m.initial = strings.Join(peers, ",")
		}
		if err = c.start(); err == nil {
			t.Cleanup(c.kill)
			return c
		}
		c.kill()
		if !PortTaken(err.Error()) {
			break
		}
		// A port taken between its pick and the bind: others.
	}
	t.Fatalf("starting a %d-member etcd cluster: %v", n, err)
	return nil
}

// start starts every member, then waits for all of them.
func (c *Cluster) start() error {
	for _, m := range c.Members {
		if err := m.start(); err != nil {
			return err
		}
	}
	return c.Wait(ClusterStart)
}

// Wait waits, at most limit, until every running member serves a
// linearizable read through its gateway (the cluster has a leader and the
// member has joined it).
func (c *Cluster) Wait(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, m := range c.Members {
		e := m.etcd()
		if e == nil {
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			return fmt.Errorf("etcd member %s: %v", m.Name, err)
		case <-time.After(time.Until(deadline)):
			return fmt.Errorf("etcd member %s was not ready within %v%s", m.Name, limit, m.logTail())
		}
		if err := WaitGateway(m.Client, time.Until(deadline), nil); err != nil {
			return fmt.Errorf("etcd member %s: %v%s", m.Name, err, m.logTail())
		}
	}
	return nil
}

// Endpoints are the members' client addresses (host:port), in order.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Client)
	}
	return eps
}

// Leader is the index of the member that leads, as a running member sees
// it; -1 when none does.
func (c *Cluster) Leader() int {
	for _, m := range c.Members {
		e := m.etcd()
		if e == nil {
			continue
		}
		lead := e.Server.Leader()
		for j, o := range c.Members {
			if oe := o.etcd(); oe != nil && oe.Server.MemberID() == lead {
				return j
			}
		}
	}
	return -1
}

// Kill stops member i at once (no leadership transfer, no word to the
// peers), closes its ports and waits for it, at most 20 s.
func (c *Cluster) Kill(i int) { c.Members[i].kill(c.t) }

// Restart starts member i again on its ports and data, without waiting:
// a member whose peers are down has no quorum to be ready with (Wait).
func (c *Cluster) Restart(i int) error { return c.Members[i].start() }

func (c *Cluster) kill() {
	for _, m := range c.Members {
		m.kill(c.t)
	}
}

func (m *Member) etcd() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e
}

// start starts the member on its ports and data directory.
func (m *Member) start() error {
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = filepath.Join(m.Dir, "data")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(m.Dir, "etcd.log")}
	cfg.UnsafeNoFsync = true // test data only
	client := url.URL{Scheme: "http", Host: m.Client}
	peer := url.URL{Scheme: "http", Host: m.Peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = m.initial // ignored by a member that has data
	cfg.InitialClusterToken = "hashlb-test"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	m.mu.Lock()
	m.e = e
	m.mu.Unlock()
	return nil
}

// kill stops the server without coordination, then closes its listeners.
func (m *Member) kill(t testing.TB) {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		e.Server.HardStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Logf("etcd member %s did not stop within 20s; going on without it", m.Name)
	}
	closeEmbedded(t, e)
}

// logTail is the end of the member's log, for a failure.
func (m *Member) logTail() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "etcd.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return ""
	}
	return "\n" + string(b)
}
