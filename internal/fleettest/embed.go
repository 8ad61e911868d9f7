package fleettest

import (
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
