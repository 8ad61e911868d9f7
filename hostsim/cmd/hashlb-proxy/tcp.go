package main

// With -tcp ADDR hashlb-proxy is a TCP proxy instead, for a configuration
// with filterType network: each accepted connection is a hostsim connection
// context on a worker (proxy_on_new_connection), and goes to the address the
// module set as the ORIGINAL_DST filter state, as Envoy's tcp_proxy with an
// ORIGINAL_DST cluster does; a connection the module closes or holds goes
// nowhere. The demo backends answer each connection with one line,
// "backend NAME", and close it.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// tcpDefaultConfig is the plugin configuration -tcp uses when -config is
// not given.
const tcpDefaultConfig = "configs/tcp.json"

// configFlag returns -config, or the TCP demo configuration when -tcp is
// used and -config was not given.
func configFlag(configPath string) string {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "config" })
	if given {
		return configPath
	}
	return tcpDefaultConfig
}

// runTCP serves TCP on listen until ctx ends (an interrupt). Nothing listens
// before the module has accepted the configuration.
func runTCP(ctx context.Context, wasmPath, configPath, listen string, workers int, profile string, backends bool, env *envFlags) error {
	wasm, raw, pc, err := load(wasmPath, configPath, profile, env)
	if err != nil {
		return err
	}
	if pc.FilterType != "network" {
		return fmt.Errorf("%s: an HTTP filter's configuration (filterType %q): -tcp serves a network filter (filterType network, e.g. -config %s); drop -tcp to serve it over HTTP", configPath, cmp.Or(pc.FilterType, "http"), tcpDefaultConfig)
	}
	if backends {
		if err := startBackends(os.Stdout, pc.Services, true); err != nil {
			return err
		}
	}
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{
		Workers: workers, Profile: profile, PluginConfig: raw, RealTime: true,
		LogLevel: hostsim.LogInfo, LogOutput: os.Stderr, HTTPCall: tcpProbe, Cache: compileCache(),
		Env: env.values(),
	})
	if err != nil {
		return err
	}
	defer h.Close(context.Background())
	go tick(ctx, h)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	fmt.Printf("hashlb-proxy: %s on tcp://%s, %d workers (%s), upstream in filter state\n", wasmPath, ln.Addr(), workers, h.Profile())
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	fmt.Printf("try (bash): cat </dev/tcp/%s/%s\n", host, port)
	t := &tcpProxy{host: h}
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				t.wg.Wait()
				return nil
			}
			return err
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(c.(*net.TCPConn))
		}()
	}
}

// tick fires the hosts' ticks on the wall clock, as Envoy's timers do.
func tick(ctx context.Context, hosts ...*hostsim.Host) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, h := range hosts {
				h.Tick()
			}
		}
	}
}

// tcpProxy is the TCP side: one hostsim connection per accepted connection.
type tcpProxy struct {
	host *hostsim.Host
	next atomic.Uint64
	wg   sync.WaitGroup
}

// serve runs one downstream connection: the module decides, the proxy
// dials the chosen address and copies both ways, and the module sees the
// data and the close as a network filter in Envoy would.
func (t *tcpProxy) serve(down *net.TCPConn) {
	worker := int(t.next.Add(1) % uint64(t.host.Workers()))
	c := t.host.Conn(worker)
	res := c.NewConnection(map[string][]byte{
		"source.address":      hostsim.PropString(down.RemoteAddr().String()),
		"destination.address": hostsim.PropString(down.LocalAddr().String()),
	})
	if !res.Routed() {
		// Closed by the module, held, or no destination: tcp_proxy is never
		// reached, the client sees the connection closed.
		down.Close()
		c.Close(hostsim.PeerLocal)
		return
	}
	up, err := net.DialTimeout("tcp", res.Upstream, 5*time.Second)
	if err != nil {
		// tcp_proxy closes the downstream connection when the upstream one fails.
		down.Close()
		c.Close(hostsim.PeerLocal)
		return
	}
	upc := up.(*net.TCPConn)
	// Who ended first decides the close Envoy reports: the client (a
	// RemoteClose event) or the upstream, after which tcp_proxy closes the
	// downstream connection itself (LocalClose).
	var first atomic.Int32
	const byClient, byUpstream = 1, 2
	done := make(chan struct{})
	go func() { // upstream → downstream
		defer close(done)
		pump(upc, down, func(b []byte, end bool) { c.UpstreamData(b, end) })
		first.CompareAndSwap(0, byUpstream)
		down.Close() // flushed: the writes above have returned
	}()
	pump(down, upc, func(b []byte, end bool) { c.DownstreamData(b, end) })
	first.CompareAndSwap(0, byClient)
	upc.Close()
	<-done
	peer := hostsim.PeerRemote
	if first.Load() == byUpstream {
		peer = hostsim.PeerLocal
	}
	c.Close(peer)
}

// pump copies src to dst, telling the module of each chunk, until src ends
// (or dst fails); then it tells the module of the end.
func pump(src, dst *net.TCPConn, seen func([]byte, bool)) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen(buf[:n], false)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			seen(nil, true)
			return
		}
	}
}

// tcpProbe answers the module's health probes (healthCheck) for TCP
// services: 200 when a TCP connection to the probed address (the upstream
// header of the probe) opens within the probe's timeout, else 503. The demo
// backends speak no HTTP. In Envoy the probes are HTTP requests on
// healthCheck.cluster: a TCP service needs an HTTP health endpoint there
// (docs/deploy.md).
func tcpProbe(req *hostsim.CallRequest) (*hostsim.CallResponse, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	status := "200"
	c, err := net.DialTimeout("tcp", req.Header("x-envoy-original-dst-host"), timeout)
	if err != nil {
		status = "503"
	} else {
		c.Close()
	}
	return &hostsim.CallResponse{Headers: [][2]string{{":status", status}}}, nil
}
