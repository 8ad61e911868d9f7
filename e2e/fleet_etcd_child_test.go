package e2e

// etcd 3.7 (go.mod's go.etcd.io/etcd/server/v3, embedded) as a process of
// its own, so that the fault tests can kill, freeze and restart it as they
// do Debian's 3.4 binary: the test binary runs itself with
// HASHLB_E2E_ETCD_CHILD set, and TestMain then serves etcd until killed.

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
)

// embeddedEtcd, given where an etcd binary's path goes (etcdCommand,
// startEtcdProc), runs the embedded etcd in a child process instead.
const embeddedEtcd = "embedded etcd 3.7 (child process)"

// The child's data dir, and its client and peer URLs (space-separated).
const (
	etcdChildEnv     = "HASHLB_E2E_ETCD_CHILD"
	etcdChildURLsEnv = "HASHLB_E2E_ETCD_URLS"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(etcdChildEnv); v != "" {
		os.Exit(runEtcdChild(v, os.Getenv(etcdChildURLsEnv)))
	}
	code := m.Run()
	envoyrun.RemoveModules() // the modules buildModule built
	os.Exit(code)
}

// embeddedEtcdCommand is the command that runs the embedded etcd with its
// data in dir on free loopback ports, and its client URL.
func embeddedEtcdCommand(t testing.TB, dir string) (*exec.Cmd, string) {
	client, peer := "http://"+fleettest.FreeAddr(t), "http://"+fleettest.FreeAddr(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), etcdChildEnv+"="+dir, etcdChildURLsEnv+"="+client+" "+peer)
	return cmd, client
}

func runEtcdChild(dir, urls string) int {
	client, peer, ok := strings.Cut(urls, " ")
	if !ok {
		fmt.Fprintf(os.Stderr, "etcd child: %s=%q, want the client and peer URLs\n", etcdChildURLsEnv, urls)
		return 2
	}
	cu, err1 := url.Parse(client)
	pu, err2 := url.Parse(peer)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "etcd child: bad URLs", client, peer)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "hashlb-e2e"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cfg.UnsafeNoFsync = true // test data only
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd child:", err)
		return 1
	}
	err = <-e.Err() // until killed
	fmt.Fprintln(os.Stderr, "etcd child:", err)
	return 1
}
