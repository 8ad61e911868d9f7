package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdServer is the real etcd server run in process for -etcd (a demo and
// test aid: the module reaches it through its JSON gateway as it would a
// fleet's etcd, over the Envoy cluster "etcd").
type etcdServer struct {
	addr string // client address, host:port
	dir  string // data directory
	e    *embed.Etcd
	temp bool // dir is ours to remove
}

// startEtcd starts etcd on free loopback ports with its data in dir (a new
// temporary directory when dir is ""), logging errors to etcd.log there, and
// waits until it serves.
func startEtcd(dir string) (*etcdServer, error) {
	s := &etcdServer{dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "hashlb-etcd-")
		if err != nil {
			return nil, err
		}
		s.dir, s.temp = d, true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "hashlb-proxy"
	cfg.Dir = s.dir
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(s.dir, "etcd.log")}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if s.e, err = embed.StartEtcd(cfg); err != nil {
		s.stop()
		return nil, fmt.Errorf("etcd: %w (log in %s)", err, cfg.LogOutputs[0])
	}
	select {
	case <-s.e.Server.ReadyNotify():
	case err := <-s.e.Err():
		s.stop()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("etcd was not ready within 60s (log in %s)", cfg.LogOutputs[0])
	}
	s.addr = client.Host
	return s, nil
}

// stop closes etcd and removes a temporary data directory.
func (s *etcdServer) stop() {
	if s.e != nil {
		s.e.Close()
	}
	if s.temp {
		os.RemoveAll(s.dir)
	}
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer ln.Close()
	return url.URL{Scheme: "http", Host: ln.Addr().String()}, nil
}
