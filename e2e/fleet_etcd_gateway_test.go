package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestEtcdGateway checks the fleet tests' etcd helpers and the JSON gateway
// encodings the module relies on, on the embedded etcd and on Debian's etcd
// 3.4 binary: a lease grant, a create-if-absent txn (compare create_revision
// = 0) that succeeds and then fails with the current value, a range read,
// a prefix listing, the same read through delayProxy, and (embedded) a
// restart on the same data directory and address.
func TestEtcdGateway(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T, dir string) (string, func())
	}{
		{"embedded", func(t *testing.T, dir string) (string, func()) { return startEtcd(t, dir) }},
		{"binary", func(t *testing.T, dir string) (string, func()) { return startEtcdBinary(t, etcdBinary(t), dir) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addr, stop := tc.start(t, dir)
			const key = "hashlb/fleet/test/k1"
			if v, ok := etcdGet(t, addr, key); ok {
				t.Fatalf("etcdGet(%q) on a new etcd = %q, want none", key, v)
			}
			lease := etcdGrant(t, addr, 60)
			if created, cur := etcdCreate(t, addr, key, "b1", lease); !created || cur != "b1" {
				t.Fatalf("etcdCreate(%q, b1) = %v, %q; want created", key, created, cur)
			}
			if created, cur := etcdCreate(t, addr, key, "b2", 0); created || cur != "b1" {
				t.Fatalf("second etcdCreate(%q, b2) = %v, %q; want not created, current b1", key, created, cur)
			}
			if v, ok := etcdGet(t, addr, key); !ok || v != "b1" {
				t.Fatalf("etcdGet(%q) = %q, %v; want b1", key, v, ok)
			}
			etcdCreate(t, addr, "hashlb/fleet/test/k2", "b2", 0)
			etcdCreate(t, addr, "hashlb/fleet/tesu", "outside", 0)
			if got := etcdKeys(t, addr, "hashlb/fleet/test/"); len(got) != 2 || got[key] != "b1" || got["hashlb/fleet/test/k2"] != "b2" {
				t.Fatalf("etcdKeys(hashlb/fleet/test/) = %q, want k1=b1 and k2=b2 only", got)
			}
			// Field names and encodings as a module parsing the raw JSON sees them
			// (3.7's protojson varies the spaces between fields: parse, never match bytes).
			var raw struct {
				Header map[string]any   `json:"header"`
				KVs    []map[string]any `json:"kvs"`
				Count  any              `json:"count"`
			}
			if err := json.Unmarshal([]byte(gatewayRaw(t, addr, "/v3/kv/range", `{"key":"`+b64(key)+`"}`)), &raw); err != nil {
				t.Fatal(err)
			}
			if len(raw.KVs) != 1 || raw.Count != "1" {
				t.Fatalf("range = %+v, want one kv and count \"1\" (a string)", raw)
			}
			for _, f := range []string{"create_revision", "mod_revision", "version", "lease", "key", "value"} {
				if _, ok := raw.KVs[0][f].(string); !ok {
					t.Errorf("range kvs[0].%s = %#v, want a JSON string", f, raw.KVs[0][f])
				}
			}
			if _, ok := raw.Header["revision"].(string); !ok {
				t.Errorf("range header.revision = %#v, want a JSON string", raw.Header["revision"])
			}
			var slow, delayed atomic.Int64
			slow.Store(int64(20 * time.Millisecond))
			via, _ := delayProxy(t, addr, func() time.Duration { delayed.Add(1); return time.Duration(slow.Load()) })
			if v, ok := etcdGet(t, via, key); !ok || v != "b1" || delayed.Load() < 2 {
				t.Fatalf("etcdGet(%q) through delayProxy = %q, %v after %d delays; want b1, the request and the answer delayed", key, v, ok, delayed.Load())
			}
			slow.Store(0)
			if v, ok := etcdGet(t, via, key); !ok || v != "b1" {
				t.Fatalf("etcdGet(%q) through delayProxy, no delay = %q, %v; want b1", key, v, ok)
			}
			if tc.name != "embedded" {
				return
			}
			stop()
			addr2, _ := startEtcdOn(t, dir, addr)
			if v, ok := etcdGet(t, addr2, key); addr2 != addr || !ok || v != "b1" {
				t.Fatalf("after a restart on %s: etcdGet(%q) on %s = %q, %v; want b1 on the same address", dir, key, addr2, v, ok)
			}
		})
	}
}

// gatewayRaw POSTs body to path and returns the raw answer.
func gatewayRaw(t *testing.T, addr, path, body string) string {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s %s = %d %s", path, body, resp.StatusCode, b)
	}
	return string(b)
}
