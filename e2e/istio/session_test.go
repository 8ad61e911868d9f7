package istio

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// testSessionKey gives the shipped TrafficExtension a session block
// (cookie shop-session) and vmConfig.env naming HASHLB_SESSION_KEY with
// valueFrom HOST, as docs/persistence.md says, and starts a sidecar whose
// environment has the key from a Secret, as the kubelet sets a container's
// variable from one: istiod hands Envoy the variable's name
// (host_env_keys), hashlb signs a session cookie with the key, and a
// client bringing the cookie back stays on its service from any address.
func testSessionKey(t *testing.T, cl *cluster, r releaseSetup) {
	ctx := context.Background()
	key := make([]byte, 32)
	rand.Read(key)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hashlb-session", Namespace: "demo"},
		Data: map[string][]byte{"key": []byte(base64.RawURLEncoding.EncodeToString(key))}}
	if err := cl.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	var got corev1.Secret
	if err := cl.Client.Get(ctx, client.ObjectKeyFromObject(secret), &got); err != nil {
		t.Fatal(err)
	}
	file := "trafficextension/trafficextension.yaml"
	te := shipped(t, file)
	withSession := bytes.Replace(te, []byte("  wasm:\n"),
		[]byte("  wasm:\n    vmConfig:\n      env:\n      - name: HASHLB_SESSION_KEY\n        valueFrom: HOST\n"), 1)
	withSession = bytes.Replace(withSession, []byte("    pluginConfig:\n"),
		[]byte("    pluginConfig:\n      session:\n        type: cookie\n        name: shop-session\n"), 1)
	if bytes.Equal(withSession, te) || !bytes.Contains(withSession, []byte("shop-session")) {
		t.Fatalf("%s: no spec.wasm or pluginConfig to add to", file)
	}
	if err := cl.Apply(file, withSession); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Apply(file, te); err != nil {
			t.Error(err)
		}
	})
	sc := startSidecar(t, r, "frontend-1", map[string]string{"app": "frontend"}, "HASHLB_SESSION_KEY="+string(got.Data["key"]))
	cfg := pluginConfigJSON(t, withSession)
	checks := sidecarChecks(env.Module, file, cfg)
	checks = append(checks, check{file, func(dump gjson.Result) error {
		keys := section(dump, "EcdsConfigDump").Get(`ecds_filters.#(ecds_filter.name=="extensions.istio.io/trafficextension/demo.hashlb").ecds_filter.typed_config.config.vm_config.environment_variables.host_env_keys`)
		if ks := keys.Array(); len(ks) != 1 || ks[0].String() != "HASHLB_SESSION_KEY" {
			return fmt.Errorf("the filter's vm_config host_env_keys are %s, want [HASHLB_SESSION_KEY]", keys.Raw)
		}
		return nil
	}})
	if err := waitFor(sc, checks, 3*time.Minute, func(err error) bool { return err == nil }); err != nil {
		t.Fatalf("after 3 min, Envoy does not run the session block: %v", err)
	}

	first, err := clientRequest{srcIP: "127.0.0.5", method: "GET", target: "/"}.send(outboundAddr)
	if err != nil {
		t.Fatal(err)
	}
	var cookie string
	for _, c := range (&http.Response{Header: first.header}).Cookies() {
		if c.Name == "shop-session" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if cookie == "" {
		t.Fatalf("the first answer (from %s) has no shop-session cookie: %v", first.backend, first.header["Set-Cookie"])
	}
	// From other addresses, which SOURCEIPHASH spreads over the services,
	// the cookie keeps the client on its service.
	others := map[string]bool{}
	for i := range 30 {
		src := fmt.Sprintf("127.1.%d.7", i)
		a, err := clientRequest{srcIP: src, method: "GET", target: "/", headers: [][2]string{{"cookie", cookie}}}.send(outboundAddr)
		if err != nil {
			t.Fatal(err)
		}
		if a.backend != first.backend {
			t.Errorf("from %s with the session cookie: %s, want %s", src, a.backend, first.backend)
		}
		if strings.Contains(strings.Join(a.echo.Header["Cookie"], ";"), "shop-session") {
			t.Errorf("the backend received the session cookie: %q", a.echo.Header["Cookie"])
		}
		b, err := clientRequest{srcIP: src, method: "GET", target: "/"}.send(outboundAddr)
		if err != nil {
			t.Fatal(err)
		}
		others[b.backend] = true
	}
	if len(others) < 2 {
		t.Errorf("without the cookie the 30 addresses reach only %v: the test shows nothing", others)
	}
	t.Logf("session cookie from %s kept 30 other addresses on it (without it they reach %d services)", first.backend, len(others))
}
