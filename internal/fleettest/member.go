package fleettest

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/server/v3/embed"
)

// RunMemberIfAsked serves, when the test binary was started as a
// ProcCluster's member, go.mod's embedded etcd with the flags it was given
// (etcd 3.4's, the subset ProcCluster passes) until the process is
// killed, and exits; otherwise it returns at once. A package whose tests
// start a ProcCluster without HASHLB_ETCD_BIN calls it first in TestMain.
func RunMemberIfAsked() {
	hooked = true
	if os.Getenv(memberEnv) == "" {
		return
	}
	os.Exit(runMember(os.Args[1:]))
}

func runMember(args []string) int {
	fs := flag.NewFlagSet("etcd member", flag.ContinueOnError)
	name := fs.String("name", "", "")
	dir := fs.String("data-dir", "", "")
	listenClient := fs.String("listen-client-urls", "", "")
	advClient := fs.String("advertise-client-urls", "", "")
	listenPeer := fs.String("listen-peer-urls", "", "")
	advPeer := fs.String("initial-advertise-peer-urls", "", "")
	initial := fs.String("initial-cluster", "", "")
	state := fs.String("initial-cluster-state", "new", "")
	token := fs.String("initial-cluster-token", "", "")
	level := fs.String("log-level", "error", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	urls := map[string]url.URL{}
	for flag, s := range map[string]string{"listen-client-urls": *listenClient, "advertise-client-urls": *advClient,
		"listen-peer-urls": *listenPeer, "initial-advertise-peer-urls": *advPeer} {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			fmt.Fprintf(os.Stderr, "etcd member: --%s %q: want one URL\n", flag, s)
			return 2
		}
		urls[flag] = *u
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.LogLevel = *level
	cfg.LogOutputs = []string{filepath.Join(filepath.Dir(*dir), "etcd.log")}
	cfg.UnsafeNoFsync = true // test data only
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{urls["listen-client-urls"]}, []url.URL{urls["advertise-client-urls"]}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{urls["listen-peer-urls"]}, []url.URL{urls["initial-advertise-peer-urls"]}
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = *initial, *state, *token
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		return 1
	}
	err = <-e.Err() // until killed
	fmt.Fprintln(os.Stderr, "etcd member:", err)
	return 1
}
