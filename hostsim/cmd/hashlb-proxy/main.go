// Command hashlb-proxy is a loopback HTTP reverse proxy that runs the hashlb
// proxy-wasm module under hostsim, the way Envoy would: N workers (VMs),
// requests spread over them, each request forwarded to the first address of
// the configured upstream header, as Envoy's ORIGINAL_DST cluster does.
//
// With no flags it loads dist/hashlb.wasm and configs/demo.json, starts one
// demo backend on each service address of that config (each answers with its
// own name), listens on 127.0.0.1:10000 and prints a curl line to try. It is a
// test and demo host; production is Envoy or Istio.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// pluginConfig is the part of hashlb's JSON configuration the proxy needs.
type pluginConfig struct {
	UpstreamHeader string `json:"upstreamHeader"`
	Services       []struct {
		Name    string `json:"name"`
		Address string `json:"address"`
	} `json:"services"`
}

func main() {
	wasmPath := flag.String("wasm", "dist/hashlb.wasm", "compiled proxy-wasm module")
	configPath := flag.String("config", "configs/demo.json", "plugin configuration (JSON)")
	listen := flag.String("listen", "127.0.0.1:10000", "address to serve on")
	workers := flag.Int("workers", 4, "number of VMs (Envoy worker threads)")
	profile := flag.String("profile", hostsim.ProfileEnvoy133, "import profile: envoy-1.33 or envoy-1.39")
	backends := flag.Bool("backends", true, "start a demo backend on every service address of the config")
	backendsConfig := flag.String("backends-config", "", "start the demo backends on the service addresses of this config instead of -config's\n"+
		"(for a module whose configuration is not hashlb's, such as the benchmarks' same-calls baseline)")
	flag.Parse()
	if err := run(*wasmPath, *configPath, *backendsConfig, *listen, *workers, *profile, *backends); err != nil {
		log.Fatalf("hashlb-proxy: %v", err)
	}
}

func run(wasmPath, configPath, backendsConfig, listen string, workers int, profile string, backends bool) error {
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		return fmt.Errorf("%w (build it with: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o dist/hashlb.wasm ./filter)", err)
	}
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return err
	}
	var pc pluginConfig
	if err := json.Unmarshal(raw, &pc); err != nil {
		return fmt.Errorf("%s: %w", configPath, err)
	}
	if pc.UpstreamHeader == "" {
		pc.UpstreamHeader = "x-envoy-original-dst-host"
	}
	if backends && backendsConfig != "" {
		b, err := os.ReadFile(backendsConfig)
		if err != nil {
			return err
		}
		var bc pluginConfig
		if err := json.Unmarshal(b, &bc); err != nil {
			return fmt.Errorf("%s: %w", backendsConfig, err)
		}
		pc.Services = bc.Services
	}
	if backends {
		for _, s := range pc.Services {
			if err := startBackend(s.Name, s.Address); err != nil {
				return err
			}
		}
	}
	p := &proxy{header: pc.UpstreamHeader}
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{
		Workers: workers, Profile: profile, PluginConfig: raw, RealTime: true,
		LogLevel: hostsim.LogInfo, LogOutput: os.Stderr, HTTPCall: p.callout,
	})
	if err != nil {
		return err
	}
	p.host = h
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() { // Envoy's timers: ticks follow the wall clock
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				h.Tick()
			}
		}
	}()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Printf("hashlb-proxy: %s on http://%s, %d workers (%s), upstream header %s\n",
		wasmPath, ln.Addr(), workers, h.Profile(), pc.UpstreamHeader)
	fmt.Printf("try: curl -si http://%s/some/path\n", ln.Addr())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return h.Close(context.Background())
}

// startBackend serves "backend NAME (ADDR)" on addr.
func startBackend(name, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("demo backend %s: %w (run with -backends=false to use your own)", name, err)
	}
	msg := fmt.Sprintf("backend %s (%s)\n", name, ln.Addr())
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/plain")
		fmt.Fprint(w, msg)
	}))
	fmt.Printf("demo backend %s on %s\n", name, ln.Addr())
	return nil
}
