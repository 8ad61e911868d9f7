package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashlb/hashlb/internal/deploycheck"
	"github.com/hashlb/hashlb/lbcore"
)

// headerFlag collects repeated -header flags.
type headerFlag [][2]string

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if strings.HasPrefix(s, ":") { // a pseudo-header such as ":authority: x"
		n, v, ok2 := strings.Cut(s[1:], ":")
		name, value, ok = ":"+n, v, ok2
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("%q is not 'name: value'", s)
	}
	switch name {
	case ":path", ":method", ":scheme":
		return fmt.Errorf("%q: give %s with -url or -method", s, name)
	case ":authority":
		name = "host"
	}
	*h = append(*h, [2]string{name, strings.TrimSpace(value)})
	return nil
}

// explainInput is what the flags and arguments of "hashlb explain" ask for.
type explainInput struct {
	file           string // CONFIG
	which          string // -config
	target, method string // -url, -method
	authority      string // -authority
	authoritySet   bool   // -authority was given (even empty)
	client, dest   string // -client, -dest
	headers        headerFlag
	down           string // -down
	ramp           string // -ramp
	keyFile        string // -session-key-file
	rootID         string // -root-id
	seed           uint64
	asJSON         bool
	now            time.Time // -at, or now
}

// parseExplain reads the flags and arguments; with done set, the command is
// over and code is its exit status (0 for -h, 2 for a usage error).
func parseExplain(args []string, stdout, stderr io.Writer) (in *explainInput, code int, done bool) {
	in = &explainInput{}
	c := newCommand("explain", "CONFIG -url URL [flags]", explainAbout, stdout, stderr)
	fset := c.flags
	fset.StringVar(&in.target, "url", "", "the request target `URL` as the module receives it (:path): a path and query, or an absolute\n"+
		"URL, whose host is then :authority unless -authority or a host header says otherwise.\n"+
		"Required; -url '' is a request without one (or a connection)")
	fset.StringVar(&in.authority, "authority", "", "the request's :authority (its Host header), `HOST`")
	fset.StringVar(&in.method, "method", "GET", "the request's :method, `METHOD`")
	fset.StringVar(&in.client, "client", "", "the connection's peer (source.address), `IP:PORT`")
	fset.StringVar(&in.dest, "dest", "", "the address the request was received on (destination.address), `IP:PORT`")
	fset.StringVar(&in.down, "down", "", "services marked DOWN, as health checks would, `NAME,…`")
	fset.StringVar(&in.ramp, "ramp", "", "services in a slow-start ramp (the configuration's slowStart), each started ELAPSED before\n"+
		"-at or now, `NAME=ELAPSED,…` (ELAPSED a duration such as 15s)")
	fset.StringVar(&in.which, "config", "", "the configuration of CONFIG to explain, `N|TEXT`: its number, or its place as \"hashlb check\"\n"+
		"prints it (or a part of it naming one)")
	fset.Uint64Var(&in.seed, "seed", 0, "the worker's seed `N`: round robin and least connection depend on the worker, and what a\n"+
		"fresh worker with this seed picks is shown")
	fset.BoolVar(&in.asJSON, "json", false, "print the report as JSON")
	fset.StringVar(&in.keyFile, "session-key-file", "", "read the session key from `FILE` (its bytes, a final newline dropped)\n"+
		"instead of the environment variable "+lbcore.SessionKeyEnv)
	fset.StringVar(&in.rootID, "root-id", "", "the plugin's Envoy root_id, `ID`, which a session is signed for (\"\": \"default\", as for\n"+
		"a filter without one)")
	at := fset.String("at", "", "decide as at `TIME` (RFC 3339, e.g. 2026-01-01T12:00:00Z) instead of now: a session's\n"+
		"issue and last-use times are compared with it")
	fset.Var(&in.headers, "header", "a request header `'name: value'` (repeatable); host is :authority, as Envoy stores\n"+
		"HTTP/1's Host; client copies of upstreamHeader and serviceHeader are removed, as the module does")
	files, code, done := c.parse(args)
	if done {
		return nil, code, true
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(files) != 1:
		return nil, c.usageErr("want one CONFIG, got %d", len(files)), true
	case !set["url"]:
		return nil, c.usageErr("-url is required (the request target, such as /some/path)"), true
	}
	for _, a := range []struct{ flag, value string }{{"client", in.client}, {"dest", in.dest}} {
		if a.value != "" {
			if err := lbcore.AddrPortError(a.value); err != nil {
				return nil, c.usageErr("-%s %s: %v", a.flag, a.value, err), true
			}
		}
	}
	in.now = time.Now()
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return nil, c.usageErr("-at %s: not an RFC 3339 time such as 2026-01-01T12:00:00Z", *at), true
		}
		in.now = t
	}
	in.file, in.authoritySet = files[0], set["authority"]
	return in, 0, false
}

// config reads CONFIG and parses the configuration -config chooses; with
// done set, the command is over with exit status code (1 for a file that
// cannot be read or an invalid configuration, 2 for a -config that names
// none).
func (in *explainInput) config(stderr io.Writer) (e deploycheck.Item, cfg *lbcore.Config, code int, done bool) {
	src, err := deploycheck.ScanFile(in.file)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", in.file, err)
		return e, nil, 1, true
	}
	configs := src.Configs()
	switch pick, err := chooseConfig(configs, in.which); {
	case len(configs) == 0:
		fmt.Fprintf(stderr, "%s: no hashlb configuration\n", in.file)
		return e, nil, 1, true
	case err != nil:
		var b strings.Builder
		for i, c := range configs {
			fmt.Fprintf(&b, "  -config %d   %s\n", i+1, c.Where)
		}
		fmt.Fprintf(stderr, "hashlb explain: %s: %v; its configurations:\n%s", in.file, err, b.String())
		return e, nil, 2, true
	default:
		e = configs[pick]
	}
	cfg, problems := e.Parse()
	if problems != nil {
		for _, p := range problems {
			fmt.Fprintf(stderr, "%s%s\n", e.Prefix(in.file), p)
		}
		return e, nil, 1, true
	}
	return e, cfg, 0, false
}

// balancer is a fresh worker's Balancer for cfg, with the session key, the
// services -down names and those -ramp puts in a slow-start ramp; with done set, the command is over with exit
// status code.
func (in *explainInput) balancer(cfg *lbcore.Config, stderr io.Writer) (b *lbcore.Balancer, code int, done bool) {
	b = lbcore.NewBalancer(cfg, in.seed)
	if cfg.Session != nil {
		if err := in.enableSession(b); err != nil {
			fmt.Fprintf(stderr, "hashlb explain: %v\n", err)
			return nil, 1, true
		}
	}
	named := func(flag, name string) int {
		i := serviceNamed(cfg, strings.TrimSpace(name))
		if i < 0 {
			var names []string
			for _, s := range cfg.Services {
				names = append(names, s.Name)
			}
			fmt.Fprintf(stderr, "hashlb explain: -%s: no service named %q (services: %s)\n", flag, name, strings.Join(names, ", "))
		}
		return i
	}
	if in.down != "" {
		for _, name := range strings.Split(in.down, ",") {
			i := named("down", name)
			if i < 0 {
				return nil, 2, true
			}
			b.SetDown(i, true)
		}
	}
	if in.ramp == "" {
		return b, 0, false
	}
	if cfg.SlowStart == nil {
		fmt.Fprintf(stderr, "hashlb explain: -ramp: the configuration has no slowStart\n")
		return nil, 2, true
	}
	for _, item := range strings.Split(in.ramp, ",") {
		name, elapsed, ok := strings.Cut(item, "=")
		d, err := lbcore.ParseDuration(strings.TrimSpace(elapsed))
		if !ok || err != nil {
			fmt.Fprintf(stderr, "hashlb explain: -ramp: %q is not NAME=ELAPSED, such as web-3=15s\n", item)
			return nil, 2, true
		}
		i := named("ramp", name)
		if i < 0 {
			return nil, 2, true
		}
		if !b.Selectable(i) || cfg.Services[i].Weight == 0 {
			fmt.Fprintf(stderr, "hashlb explain: -ramp: %s is not selectable with a weight above 0: it does not ramp\n", name)
			return nil, 2, true
		}
		b.Ramp(i, in.now.Add(-d))
	}
	return b, 0, false
}

// enableSession gives b the session key, from -session-key-file or the
// environment; without one the session is not checked.
func (in *explainInput) enableSession(b *lbcore.Balancer) error {
	key := os.Getenv(lbcore.SessionKeyEnv)
	if in.keyFile != "" {
		k, err := os.ReadFile(in.keyFile)
		if err != nil {
			return fmt.Errorf("-session-key-file: %v", err)
		}
		key = strings.TrimSuffix(string(k), "\n")
	}
	if key == "" {
		return nil
	}
	return b.EnableSession([]byte(key), in.rootID)
}

// request is the request the flags describe, as the module would see it:
// client copies of cfg's upstream and service headers are removed (stripped
// names them), and a host header or an absolute URL gives :authority when
// -authority does not.
func (in *explainInput) request(cfg *lbcore.Config) (req lbcore.Request, stripped []string) {
	req = lbcore.Request{Target: in.target, Method: in.method, Source: in.client, Dest: in.dest}
	for _, h := range in.headers {
		switch {
		case h[0] == cfg.UpstreamHeader || h[0] == cfg.ServiceHeader && cfg.ServiceHeader != "":
			stripped = append(stripped, h[0])
		case h[0] == "host":
			if req.Authority == "" {
				req.Authority = h[1]
			}
		default:
			req.Headers = append(req.Headers, h)
		}
	}
	if in.authoritySet {
		req.Authority = in.authority
	} else if req.Authority == "" {
		req.Authority = absoluteHost(in.target)
	}
	return req, stripped
}

// chooseConfig picks the configuration -config names: its number (1-based,
// in file order), its place exactly, or the one place that contains it.
// Without -config the file must hold exactly one.
func chooseConfig(configs []deploycheck.Item, which string) (int, error) {
	if which == "" {
		if len(configs) > 1 {
			return 0, fmt.Errorf("holds %d hashlb configurations: choose one with -config", len(configs))
		}
		return 0, nil
	}
	if n, err := strconv.Atoi(which); err == nil {
		if n < 1 || n > len(configs) {
			return 0, fmt.Errorf("-config %d: there is no configuration %d", n, n)
		}
		return n - 1, nil
	}
	found := -1
	for i, c := range configs {
		if c.Where == which {
			return i, nil
		}
		if strings.Contains(c.Where, which) {
			if found >= 0 {
				return 0, fmt.Errorf("-config %q names more than one configuration", which)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("-config %q names no configuration", which)
	}
	return found, nil
}

func serviceNamed(cfg *lbcore.Config, name string) int {
	for i, s := range cfg.Services {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// absoluteHost returns the host[:port] of an absolute URL, or "".
func absoluteHost(target string) string {
	if !strings.Contains(target, "://") {
		return ""
	}
	u, err := url.Parse(target)
	if err != nil {
		return ""
	}
	return u.Host
}
