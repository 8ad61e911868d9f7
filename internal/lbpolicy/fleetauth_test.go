package lbpolicy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hashlb/hashlb/internal/fleettest"
)

// envOf is a getenv over m.
func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// writeFile writes s to a new file of t's and returns its path.
func writeFile(t *testing.T, name, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A partial or unreadable set of credentials refuses the configuration
// with the variable (and file) at fault, and never shows a secret; a whole
// set is taken, a password file's trailing newline dropped; a policy
// without a fleet reads nothing.
func TestEtcdCredentials(t *testing.T) {
	const secret = "s3cret-Pa55"
	pwFile := writeFile(t, "pw", secret+"\n")
	empty := writeFile(t, "empty", "\n")
	notPEM := writeFile(t, "ca.pem", secret)
	for _, tt := range []struct {
		env  map[string]string
		want string // "" for accepted
	}{
		{map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPassword: secret}, ""},
		{map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPasswordFile: pwFile}, ""},
		{map[string]string{}, ""},
		{map[string]string{EnvEtcdUser: "hashlb"}, "HASHLB_ETCD_USER is set without a password"},
		{map[string]string{EnvEtcdPassword: secret}, "a password is set without HASHLB_ETCD_USER"},
		{map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPassword: secret, EnvEtcdPasswordFile: pwFile}, "are both set"},
		{map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPasswordFile: "/nonexistent/pw"}, "HASHLB_ETCD_PASSWORD_FILE: open /nonexistent/pw"},
		{map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPasswordFile: empty}, "is empty"},
		{map[string]string{EnvEtcdCertFile: "/x.crt"}, "go together"},
		{map[string]string{EnvEtcdCAFile: notPEM}, "holds no PEM certificate"},
		{map[string]string{EnvEtcdCAFile: "/nonexistent/ca"}, "HASHLB_ETCD_CA_FILE: open /nonexistent/ca"},
		{map[string]string{EnvEtcdCertFile: notPEM, EnvEtcdKeyFile: notPEM}, "HASHLB_ETCD_CERT_FILE, HASHLB_ETCD_KEY_FILE"},
	} {
		p := mustPolicy(t, fleetJS("127.0.0.1:2379", "1s"))
		err := p.LoadEtcdCredentials(envOf(tt.env))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v", tt.env, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: %v, want an error saying %q", tt.env, err, tt.want)
		case err != nil && strings.Contains(err.Error(), secret):
			t.Errorf("%v: the error shows the secret: %v", tt.env, err)
		case tt.want == "" && tt.env[EnvEtcdUser] != "" && p.etcd.password != secret:
			t.Errorf("%v: password %q, want the secret without its newline", tt.env, p.etcd.password)
		}
	}
	local := mustPolicy(t, `{"lbMethod":"ROUNDROBIN"}`)
	if err := local.LoadEtcdCredentials(envOf(map[string]string{EnvEtcdUser: "hashlb"})); err != nil {
		t.Errorf("a policy without a fleet read the credentials: %v", err)
	}
}

// credProxy is a proxy of one worker over hosts with policy js and the
// etcd credentials of env, closed at t's cleanup.
func credProxy(t *testing.T, js string, hosts *fakeHosts, env map[string]string) *fleetProxy {
	t.Helper()
	p := mustPolicy(t, js)
	if err := p.LoadEtcdCredentials(envOf(env)); err != nil {
		t.Fatal(err)
	}
	p.store = newSharedStore()
	x := &fleetProxy{p: p, f: hosts}
	w := p.NewWorker("fleet")
	if _, err := w.Update(hosts); err != nil {
		t.Fatal(err)
	}
	x.ws = append(x.ws, w)
	t.Cleanup(x.close)
	return x
}

// waitAgree waits, at most 20 s, until b serves each of the keys tag+A…
// that a placed where a does.
func waitAgree(t *testing.T, a, b *fleetProxy, tag string, keys int) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for {
		apart := 0
		for k := range keys {
			u := tag + string(rune('A'+k))
			if a.choose(t, 0, u) != b.choose(t, 0, u) {
				apart++
			}
		}
		if apart == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d keys a placed are elsewhere on b, which uses the same credentials (b %+v)", apart, keys, b.ws[0].FleetStats())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPlaced waits, at most limit, until x has placed n keys: a failed
// send is kept and sent again, so failures do not end the wait.
func waitPlaced(x *fleetProxy, n uint64, limit time.Duration) FleetStats {
	end := time.Now().Add(limit)
	s := x.ws[0].FleetStats()
	for s.Placed < n && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
		s = x.ws[0].FleetStats()
	}
	return s
}

// enableAuth turns etcd's auth on at addr with a root user and the user
// hashlb (password pw), allowed to read and write /hashlb/test/ only.
func enableAuth(t *testing.T, addr, pw string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "hashlb"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "hashlb", "/hashlb/test/", clientv3.GetPrefixRangeEnd("/hashlb/test/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "hashlb", pw); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "hashlb", "hashlb"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("enabling etcd auth, step %d: %v", i, err)
		}
	}
}

// With etcd's auth on, proxies whose user and password come from the
// environment (one from a password file) share placements as without it; a
// wrong password costs nothing but the fleet: every choice is answered,
// and its proposals fail (counted) instead of being placed.
func TestFleetEtcdAuth(t *testing.T) {
	addr, _ := fleettest.StartEmbedded(t, t.TempDir(), "")
	enableAuth(t, addr, "hashlb-pw")
	f := newFakeHosts(5)
	js := fleetJS(addr, "2s")
	a := credProxy(t, js, f, map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPassword: "hashlb-pw"})
	b := credProxy(t, js, reversed(f), map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPasswordFile: writeFile(t, "pw", "hashlb-pw\n")})
	wrong := credProxy(t, js, f, map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPassword: "not-it"})
	servedAndRefused(t, a, b, wrong, "with auth on", "a wrong password")
}

// servedAndRefused: keys chosen through a are placed in etcd and b agrees
// on them, while refused, whose credentials etcd does not accept, places
// none and counts its failures.
func servedAndRefused(t *testing.T, a, b, refused *fleetProxy, served, what string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // the watches open
	const keys = 50
	for k := range keys {
		a.choose(t, 0, "u"+string(rune('A'+k)))
		refused.choose(t, 0, "w"+string(rune('A'+k)))
	}
	if s := waitPlaced(a, keys, 30*time.Second); s.Placed != keys {
		t.Fatalf("a placed %d of %d keys %s: %+v", s.Placed, keys, served, s)
	}
	waitAgree(t, a, b, "u", keys)
	end := time.Now().Add(20 * time.Second)
	sr := refused.ws[0].FleetStats()
	for time.Now().Before(end) && sr.Failed == 0 {
		time.Sleep(50 * time.Millisecond)
		sr = refused.ws[0].FleetStats()
	}
	if sr.Placed != 0 || sr.Failed == 0 {
		t.Errorf("%s: %+v, want no key placed and failures counted", what, sr)
	}
}

// tlsFiles writes a CA, a server certificate for 127.0.0.1 and a client
// certificate (CN hashlb) signed by it, PEM, and returns their paths.
func tlsFiles(t *testing.T) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hashlb test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, name string) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(k)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER)
	serverCert, serverKey = leaf(2, "etcd", x509.ExtKeyUsageServerAuth, "server")
	clientCert, clientKey = leaf(3, "hashlb", x509.ExtKeyUsageClientAuth, "client")
	return
}

// Over TLS with client certificates (etcd's --client-cert-auth), proxies
// whose CA, certificate and key files the environment names share
// placements; a proxy without a client certificate places nothing and
// every choice is still answered.
func TestFleetEtcdTLS(t *testing.T) {
	ca, sc, sk, cc, ck := tlsFiles(t)
	addr, _ := fleettest.StartEmbeddedTLS(t, t.TempDir(), ca, sc, sk)
	f := newFakeHosts(5)
	js := fleetJS(addr, "2s")
	full := map[string]string{EnvEtcdCAFile: ca, EnvEtcdCertFile: cc, EnvEtcdKeyFile: ck}
	a := credProxy(t, js, f, full)
	b := credProxy(t, js, reversed(f), full)
	anon := credProxy(t, js, f, map[string]string{EnvEtcdCAFile: ca})
	servedAndRefused(t, a, b, anon, "over TLS", "no client certificate")
}

// A proxy with a user whose etcd is not there yet (Envoy started first)
// decides its keys locally meanwhile, and once etcd serves with auth on,
// its client is made and every key it placed is proposed and placed.
func TestFleetEtcdAuthLate(t *testing.T) {
	addr := fleettest.FreeAddr(t)
	x := credProxy(t, fleetJS(addr, "1s"), newFakeHosts(3), map[string]string{EnvEtcdUser: "hashlb", EnvEtcdPassword: "hashlb-pw"})
	const keys = 20
	for k := range keys {
		x.choose(t, 0, "late"+string(rune('A'+k)))
	}
	time.Sleep(1500 * time.Millisecond)
	if s := x.ws[0].FleetStats(); s.Placed != 0 {
		t.Fatalf("no etcd: %+v, want nothing placed", s)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("something listens where etcd is to start")
	}
	addr, _ = fleettest.StartEmbedded(t, t.TempDir(), addr)
	enableAuth(t, addr, "hashlb-pw")
	if s := waitPlaced(x, keys, 30*time.Second); s.Placed != keys {
		t.Errorf("etcd up with auth: %+v, want the %d kept proposals placed", s, keys)
	}
}
