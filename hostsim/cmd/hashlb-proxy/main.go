package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/tetratelabs/wazero"
)

// pluginConfig is the part of hashlb's JSON configuration the proxy needs:
// the host's own settings (which header or filter state it follows, which
// clusters it must reach), never a decision.
type pluginConfig struct {
	FilterType     string    `json:"filterType"`
	UpstreamHeader string    `json:"upstreamHeader"`
	Services       []service `json:"services"`
	Persistence    *struct {
		Fleet *struct {
			Cluster string `json:"cluster"`
		} `json:"fleet"`
	} `json:"persistence"`
}

// service is one entry of the configuration's services.
type service struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// fleetCluster is persistence.fleet.cluster, or "".
func (pc *pluginConfig) fleetCluster() string {
	if pc.Persistence == nil || pc.Persistence.Fleet == nil {
		return ""
	}
	return pc.Persistence.Fleet.Cluster
}

// readPluginConfig reads the host's part of a configuration file.
func readPluginConfig(path string) (*pluginConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pc pluginConfig
	if err := json.Unmarshal(raw, &pc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &pc, nil
}

// options are the command's flags.
type options struct {
	wasmPath, configPath, backendsConfig, listen string
	workers                                      int
	profile                                      string
	backends, backendsOnly                       bool
	clusters                                     clusterFlags
	etcd                                         bool
	etcdDir                                      string
	fleet                                        int
	env                                          envFlags  // -env: the VMs' environment variables, by name
	out                                          io.Writer // where what runs where is printed
}

func main() {
	o := options{clusters: clusterFlags{}, out: os.Stdout}
	flag.StringVar(&o.wasmPath, "wasm", "dist/hashlb.wasm", "compiled proxy-wasm module")
	flag.StringVar(&o.configPath, "config", "configs/demo.json", "plugin configuration (JSON)")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:10000", "address to serve on (with -fleet N, the first of N consecutive ports)")
	flag.IntVar(&o.workers, "workers", 4, "number of VMs (Envoy worker threads)")
	flag.StringVar(&o.profile, "profile", hostsim.ProfileEnvoy133, "import profile: envoy-1.33 or envoy-1.39")
	flag.BoolVar(&o.backends, "backends", true, "start a demo backend on every service address of the config (loopback addresses only)")
	flag.BoolVar(&o.backendsOnly, "backends-only", false, "start only the demo backends of -config, no proxy: for a real Envoy in front\n"+
		"(envoy.yaml's services are configs/demo.json's; configs/envoy-tcp.yaml's are configs/tcp.json's)")
	flag.StringVar(&o.backendsConfig, "backends-config", "", "start the demo backends on the service addresses of this config instead of -config's\n"+
		"(for a module whose configuration is not hashlb's, such as the benchmarks' same-calls baseline)")
	flag.Var(o.clusters, "cluster", "an Envoy cluster the module's callouts reach, `NAME=HOST:PORT`, answered asynchronously (repeatable)")
	flag.BoolVar(&o.etcd, "etcd", false, "start an etcd server in process on a free loopback port and map cluster \"etcd\" to it")
	flag.StringVar(&o.etcdDir, "etcd-dir", "", "with -etcd: etcd's data directory, kept (default: a temporary one, removed at exit)")
	flag.Var(&o.env, "env", "give the VMs this process's environment variable `NAME` (repeatable), as Envoy's\n"+
		"vm_config.environment_variables.host_env_keys does; the value is never taken from a flag\n"+
		"(HASHLB_SESSION_KEY=... hashlb-proxy -env HASHLB_SESSION_KEY -config shop.json)")
	flag.IntVar(&o.fleet, "fleet", 1, "run N independent proxies (separate shared data, as N Envoy processes) on consecutive ports")
	tcpListen := flag.String("tcp", "", "serve TCP on this address instead of HTTP, for a configuration with filterType network\n"+
		"(default -config "+tcpDefaultConfig+"); the demo backends then answer each connection with one line, backend NAME")
	flag.Parse()
	if err := o.env.check(); err != nil {
		log.Fatalf("hashlb-proxy: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.backendsOnly {
		if err := runBackendsOnly(ctx, o.out, o.wasmPath, o.configPath, o.profile, &o.env); err != nil {
			log.Fatalf("hashlb-proxy: %v", err)
		}
		return
	}
	if *tcpListen != "" {
		if err := runTCP(ctx, o.wasmPath, configFlag(o.configPath), *tcpListen, o.workers, o.profile, o.backends, &o.env); err != nil {
			log.Fatalf("hashlb-proxy: %v", err)
		}
		return
	}
	if err := run(ctx, o); err != nil {
		log.Fatalf("hashlb-proxy: %v", err)
	}
}

// run serves until ctx ends or a member's server fails. Nothing listens
// before the module has accepted the configuration.
func run(ctx context.Context, o options) error {
	wasm, raw, pc, err := load(o.wasmPath, o.configPath, o.profile, &o.env)
	if err != nil {
		return err
	}
	if err := checkHTTP(o, pc); err != nil {
		return err
	}
	addrs, err := fleetAddrs(o.listen, o.fleet)
	if err != nil {
		return err
	}
	if err := serveBackends(o, pc); err != nil {
		return err
	}
	if o.etcd {
		stopEtcd, err := embedEtcd(o)
		if err != nil {
			return err
		}
		defer stopEtcd()
	}
	if len(o.clusters) > 0 {
		fmt.Fprintf(o.out, "clusters (callouts answered asynchronously): %s\n", o.clusters)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var hosts []*hostsim.Host
	defer func() {
		for _, h := range hosts {
			h.Close(context.Background())
		}
	}()
	errs := make(chan error, len(addrs))
	for i := range addrs {
		h, err := serveMember(ctx, o, wasm, raw, pc, i, addrs, errs)
		if h != nil {
			hosts = append(hosts, h)
		}
		if err != nil {
			return err
		}
	}
	go tick(ctx, hosts...)
	var first error
	for range addrs {
		if err := <-errs; err != nil && first == nil {
			first = err
			stop() // one member failed: stop them all
		}
	}
	return first
}

// checkHTTP checks the options and the plugin configuration for serving
// HTTP, and gives pc the module's default upstream header when it names
// none.
func checkHTTP(o options, pc *pluginConfig) error {
	if pc.FilterType == "network" {
		return fmt.Errorf("%s: filterType network is a network filter's configuration: serve it with -tcp ADDR (hashlb-proxy -tcp 127.0.0.1:10001 -config %s)", o.configPath, o.configPath)
	}
	if pc.UpstreamHeader == "" {
		pc.UpstreamHeader = "x-envoy-original-dst-host"
	}
	if o.fleet < 1 {
		return fmt.Errorf("-fleet %d: want at least 1", o.fleet)
	}
	if c := pc.fleetCluster(); c != "" && o.clusters[c] == "" && !(o.etcd && c == "etcd") {
		hint := "-cluster " + c + "=HOST:PORT (an etcd's client port)"
		if c == "etcd" {
			hint = "-etcd (an etcd server in process) or " + hint
		}
		return fmt.Errorf("%s: persistence.fleet.cluster %q reaches no etcd: add %s; without it every proxy would decide alone", o.configPath, c, hint)
	}
	return nil
}

// serveBackends starts the echo backends -backends asks for, at the
// services of -backends-config when given, else of pc (whose services
// become those).
func serveBackends(o options, pc *pluginConfig) error {
	if !o.backends {
		return nil
	}
	if o.backendsConfig != "" {
		bc, err := readPluginConfig(o.backendsConfig)
		if err != nil {
			return err
		}
		pc.Services = bc.Services
	}
	return startBackends(o.out, pc.Services, false)
}

// embedEtcd starts the in-process etcd of -etcd as cluster "etcd" and
// returns its stop.
func embedEtcd(o options) (stop func(), err error) {
	if _, dup := o.clusters["etcd"]; dup {
		return nil, fmt.Errorf("-etcd maps cluster etcd itself; drop -cluster etcd=%s", o.clusters["etcd"])
	}
	e, err := startEtcd(o.etcdDir)
	if err != nil {
		return nil, err
	}
	o.clusters["etcd"] = e.addr
	fmt.Fprintf(o.out, "etcd: embedded etcd server on http://%s (cluster \"etcd\"), data in %s\n", e.addr, e.dir)
	return e.stop, nil
}

// serveMember starts fleet member i of addrs: its host (returned, to be
// closed, even when listening then fails) and its HTTP server at addrs[i],
// which sends its end to errs and closes when ctx ends.
func serveMember(ctx context.Context, o options, wasm, raw []byte, pc *pluginConfig, i int, addrs []string, errs chan<- error) (*hostsim.Host, error) {
	p := &proxy{header: pc.UpstreamHeader}
	var props map[string][]byte
	if len(addrs) > 1 { // each Envoy of a fleet has its own node id
		props = map[string][]byte{"node.id": hostsim.PropString(fmt.Sprintf("hashlb-proxy-%d", i+1))}
	}
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{
		Workers: o.workers, Profile: o.profile, PluginConfig: raw, RealTime: true,
		LogLevel: hostsim.LogInfo, LogOutput: os.Stderr, HTTPCall: p.callout, Clusters: o.clusters,
		Properties: props, Cache: compileCache(), Env: o.env.values(),
	})
	if err != nil {
		return nil, err
	}
	p.host = h
	ln, err := net.Listen("tcp", addrs[i])
	if err != nil {
		return h, err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	member := ""
	if len(addrs) > 1 {
		member = fmt.Sprintf(" (fleet member %d of %d: its own shared data, node.id hashlb-proxy-%d)", i+1, len(addrs), i+1)
	}
	fmt.Fprintf(o.out, "hashlb-proxy: %s on http://%s, %d workers (%s), upstream header %s%s\n",
		o.wasmPath, ln.Addr(), o.workers, h.Profile(), pc.UpstreamHeader, member)
	fmt.Fprintf(o.out, "try: curl -si http://%s/some/path\n", ln.Addr())
	go func() {
		if err := srv.Serve(ln); err != http.ErrServerClosed {
			errs <- err
			return
		}
		errs <- nil
	}()
	return h, nil
}

// compileCache keeps the module's compiled code in the user's cache
// directory, so that a second start (and the validating VM's twin) does not
// compile it again; without a cache directory it is the process's alone.
var compileCache = sync.OnceValue(func() wazero.CompilationCache {
	if dir, err := os.UserCacheDir(); err == nil {
		if c, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "hashlb-proxy", "wazero")); err == nil {
			return c
		}
	}
	return wazero.NewCompilationCache()
})

// load reads the module and the configuration and has the module check the
// configuration on one VM, as Envoy configures a filter before it serves:
// the module's own validation, every problem it logs, before anything
// listens. pc is the host's part of the accepted configuration.
func load(wasmPath, configPath, profile string, env *envFlags) (wasm, raw []byte, pc *pluginConfig, err error) {
	wasm, err = os.ReadFile(wasmPath)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w (build it with: ./build.sh wasm)", err)
	}
	raw, err = os.ReadFile(configPath)
	if err != nil {
		return nil, nil, nil, err
	}
	var logs strings.Builder
	h, err := hostsim.New(context.Background(), wasm, hostsim.Config{
		Workers: 1, Profile: profile, PluginConfig: raw, LogLevel: hostsim.LogWarn, LogOutput: &logs, Cache: compileCache(),
		Env: env.values(),
	})
	if err != nil {
		var lines []string // the module's error lines, without hostsim's own
		for _, l := range strings.Split(logs.String(), "\n") {
			if _, msg, ok := strings.Cut(l, "] error: "); ok {
				lines = append(lines, "  "+msg)
			}
		}
		if len(lines) == 0 {
			return nil, nil, nil, fmt.Errorf("%s: the module did not start: %w", configPath, err)
		}
		msg := strings.Join(lines, "\n")
		if strings.Contains(msg, sessionKeyEnv) && !env.has(sessionKeyEnv) {
			msg += fmt.Sprintf("\n(the VMs get only the variables -env names: %s=... hashlb-proxy -env %s)", sessionKeyEnv, sessionKeyEnv)
		}
		return nil, nil, nil, fmt.Errorf("%s: the module refused the configuration:\n%s", configPath, msg)
	}
	h.Close(context.Background())
	pc = &pluginConfig{}
	if err := json.Unmarshal(raw, pc); err != nil {
		// The module accepted it, so this is not hashlb's JSON (-backends-config).
		pc = &pluginConfig{}
	}
	return wasm, raw, pc, nil
}
