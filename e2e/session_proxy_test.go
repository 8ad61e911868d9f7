package e2e

// hashlb-proxy serving an imported COOKIEINSERT vserver: the session key
// reaches its VMs by -env from its own environment, as Envoy's host_env_keys.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// TestSessionProxyImportedCookieInsert: hashlb import-nsconf turns a
// COOKIEINSERT vserver into a session block; hashlb-proxy -env
// HASHLB_SESSION_KEY serves it: the first response sets the vserver's
// cookie, and requests carrying it stay on one service while requests
// without it spread. Without -env the proxy refuses the configuration and
// says how to pass the key.
func TestSessionProxyImportedCookieInsert(t *testing.T) {
	bs := startBackends(t, "a", "b", "c")
	var conf strings.Builder
	conf.WriteString("add server lo 127.0.0.1\n")
	conf.WriteString("add lb vserver shop HTTP 10.0.0.1 80 -lbMethod ROUNDROBIN -persistenceType COOKIEINSERT -timeout 0\n")
	for _, b := range bs {
		_, port, _ := strings.Cut(b.addr, ":")
		fmt.Fprintf(&conf, "add service svc_%s lo HTTP %s\nbind lb vserver shop svc_%s\n", b.name, port, b.name)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ns.conf"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(buildHashlbCLI(t), "import-nsconf", "ns.conf", "-o", "out")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() > 1 {
		t.Fatalf("hashlb import-nsconf: %v\n%s", err, out)
	}
	js, err := os.ReadFile(filepath.Join(dir, "out", "shop.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"session"`) {
		t.Fatalf("the imported vserver has no session block:\n%s", js)
	}
	bin := buildProxy(t)
	t.Setenv(lbcore.SessionKeyEnv, "proxy-e2e-session-key-0123456789abcdef0123")

	// Without -env the VMs have no key: refused, with the way to pass it.
	cfgFile := filepath.Join(dir, "out", "shop.json")
	wasmFile := tempFile(t, "hashlb.wasm", module(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-wasm", wasmFile, "-config", cfgFile, "-backends=false", "-listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-env "+lbcore.SessionKeyEnv) {
		t.Errorf("hashlb-proxy without -env: %v\n%s\nwant a refusal naming -env %s", err, out, lbcore.SessionKeyEnv)
	}
	// A value on the command line is refused.
	out, err = exec.CommandContext(ctx, bin, "-wasm", wasmFile, "-config", cfgFile, "-env", lbcore.SessionKeyEnv+"=secret-on-the-command-line").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "never from the command line") || strings.Contains(string(out), "secret-on-the-command-line") {
		t.Errorf("hashlb-proxy -env NAME=VALUE: %v\n%s\nwant a refusal that does not show the value", err, out)
	}

	url := "http://" + startProxy(t, bin, js, listenLine, "-listen", "127.0.0.1:0", "-env", lbcore.SessionKeyEnv)
	c := &http.Client{Timeout: 30 * time.Second}
	first := proxyGet(t, c, url+"/cart")
	var cookie string
	for _, sc := range first.header.Values("Set-Cookie") {
		if strings.HasPrefix(sc, "NSC_shop=") {
			cookie, _, _ = strings.Cut(sc, ";")
		}
	}
	if first.status != 200 || cookie == "" {
		t.Fatalf("first request: %d %q, Set-Cookie %q; want 200 and a NSC_shop cookie", first.status, first.body, first.header.Values("Set-Cookie"))
	}
	if got := stickyBackend(t, c, 30, url+"/cart", "Cookie", cookie); got != first.backend {
		t.Errorf("requests with the session cookie went to %s, the first to %s", got, first.backend)
	}
	// Without the cookie round robin spreads them: the cookie, not chance, held them.
	seen := map[string]bool{}
	for range 12 {
		seen[proxyGet(t, c, url+"/cart").backend] = true
	}
	if len(seen) < 2 {
		t.Errorf("requests without a cookie reached %v, want round robin over several backends", seen)
	}
}
