package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/controller"
	"github.com/hashlb/hashlb/cmd/hashlb-controller/internal/testenv"
	"github.com/hashlb/hashlb/cmd/hashlb-controller/services"
)

// freeAddr returns a loopback address with a port the kernel just handed
// out (the command's flags take an address, not a listener).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestCommand runs the command as an operator would, with -kubeconfig
// pointing at a real API server, and reads its health probes and metrics.
func TestCommand(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	metrics, probes := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-kubeconfig", kubeconfig, "-metrics-bind-address", metrics,
			"-health-probe-bind-address", probes, "-leader-elect", "-leader-elect-namespace", "default"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	get := func(url string) (int, string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(url)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
					return resp.StatusCode, string(body)
				}
			} else if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", url, err)
			}
			select {
			case err := <-done:
				done <- err
				t.Fatalf("the command stopped: %v", errors.Join(err, errors.New("before answering "+url)))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get("http://" + probes + path); code != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200", path, code, body)
		}
	}
	// It does its work: a WasmPlugin naming a missing Service gets the error
	// annotation.
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wp := controller.NewWasmPlugin()
	wp.SetNamespace("default")
	wp.SetName("hashlb")
	wp.SetAnnotations(map[string]string{services.AnnotationService: "nope"})
	wp.Object["spec"] = map[string]any{"pluginConfig": map[string]any{"services": []any{map[string]any{"name": "a", "address": "192.0.2.1:80"}}}}
	if err := c.Create(ctx, wp); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(wp), wp); err != nil {
			t.Fatal(err)
		}
		if got := wp.GetAnnotations()[controller.AnnotationError]; got == "hashlb.io/service: Service default/nope not found" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, WasmPlugin default/hashlb annotations = %v, want %s", wp.GetAnnotations(), controller.AnnotationError)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Its metrics say it leads and has reconciled. The annotation is
	// written inside the reconcile, and the count goes up once it returns:
	// read until both show, up to the same deadline.
	leads := `leader_election_master_status{name="hashlb-controller"} 1`
	const reconciled = `controller_runtime_reconcile_total{controller="hashlb-controller",result="success"}`
	for {
		_, body := get("http://" + metrics + "/metrics")
		ok := strings.Contains(body, leads) && strings.Contains(body, reconciled) && !strings.Contains(body, reconciled+" 0")
		if ok {
			break
		}
		if time.Now().After(deadline) {
			for _, want := range []string{leads, reconciled} {
				if !strings.Contains(body, want) {
					t.Errorf("GET /metrics: no line %s", want)
				}
			}
			if strings.Contains(body, reconciled+" 0") {
				t.Errorf("GET /metrics: hashlb-controller reconciled nothing")
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}
