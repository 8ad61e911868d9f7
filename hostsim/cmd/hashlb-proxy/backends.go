package main

// The demo backends: one small server on each service address of a
// configuration, on loopback only. -backends-only starts just them, for a
// real Envoy in front (envoy.yaml and the configs/envoy-*.yaml files name the
// same addresses as configs/demo.json and configs/tcp.json).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
)

// loopbackAddr checks that addr is a loopback ip:port a demo backend may
// bind: the demo never listens on another interface.
func loopbackAddr(name, addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("demo backend %s: address %q is not an ip:port", name, addr)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("demo backend %s: %s is not a loopback address; the demo backends bind loopback only (run with -backends=false and start your own)", name, addr)
	}
	return nil
}

// startBackends checks every address, then starts the demo backends of
// services: HTTP ones that answer "backend NAME (ADDR)", or with tcp TCP ones
// that answer each connection with "backend NAME".
func startBackends(out io.Writer, services []service, tcp bool) error {
	for _, s := range services {
		if err := loopbackAddr(s.Name, s.Address); err != nil {
			return err
		}
	}
	for _, s := range services {
		var err error
		if tcp {
			err = startTCPBackend(out, s.Name, s.Address)
		} else {
			err = startBackend(out, s.Name, s.Address)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runBackendsOnly starts the demo backends of the configuration, once the
// module has accepted it, and serves them until ctx ends.
func runBackendsOnly(ctx context.Context, out io.Writer, wasmPath, configPath, profile string, env *envFlags) error {
	_, _, pc, err := load(wasmPath, configPath, profile, env)
	if err != nil {
		return err
	}
	tcp := pc.FilterType == "network"
	if err := startBackends(out, pc.Services, tcp); err != nil {
		return err
	}
	kind := "HTTP"
	if tcp {
		kind = "TCP"
	}
	fmt.Fprintf(out, "hashlb-proxy: %d %s demo backends of %s, no proxy (put Envoy in front); Ctrl-C stops them\n", len(pc.Services), kind, configPath)
	<-ctx.Done()
	return nil
}

// startBackend serves "backend NAME (ADDR)" on addr.
func startBackend(out io.Writer, name, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("demo backend %s: %w (run with -backends=false to use your own)", name, err)
	}
	msg := fmt.Sprintf("backend %s (%s)\n", name, ln.Addr())
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/plain")
		fmt.Fprint(w, msg)
	}))
	fmt.Fprintf(out, "demo backend %s on %s\n", name, ln.Addr())
	return nil
}

// startTCPBackend answers each connection on addr with "backend NAME\n" and
// closes it.
func startTCPBackend(out io.Writer, name, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("demo backend %s: %w (run with -backends=false to use your own)", name, err)
	}
	line := []byte("backend " + name + "\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write(line)
			c.Close()
		}
	}()
	fmt.Fprintf(out, "demo TCP backend %s on %s\n", name, ln.Addr())
	return nil
}
