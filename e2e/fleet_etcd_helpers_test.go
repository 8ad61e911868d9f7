package e2e

// Helpers of the fleet-persistence tests: etcd, embedded or an
// external binary (Debian's etcd 3.4 in CI, found through HASHLB_ETCD_BIN),
// a TCP proxy that delays what it forwards, and a tiny client of etcd's JSON
// gateway (base64 keys and values; int64 fields are JSON strings).
//
// The gateway as observed here on etcd 3.4.23 (Debian's etcd-server) and
// 3.7.3 (embedded), checked by TestEtcdGateway:
//   - both answer /v3/ paths (and still /v3beta/; /v3alpha/ is 404 on both);
//   - both accept request fields in snake_case (create_revision, request_put,
//     request_range) and in camelCase (createRevision, requestPut), int64 as
//     JSON strings or numbers, enums by name ("CREATE", "EQUAL") or number;
//   - both answer in snake_case (header.revision, kvs[].create_revision,
//     responses[].response_range, response_put) with every int64 a JSON
//     string ("revision":"2", "count":"1", lease "ID":"2324…", "TTL":"30");
//     the lease grant's own fields are "ID" and "TTL", upper case, on both;
//   - both omit fields at their zero value: a failed txn has no "succeeded"
//     (absent means false), a range of a missing key has no "kvs" and no
//     "count", a key without a lease has no "lease";
//   - differences: 3.7 (protojson) puts varying spaces after commas
//     (`"a":"1", "b":"2"`) where 3.4 writes none: parse, never match bytes;
//     an error answer is {"error":…,"message":…,"code":3} with HTTP 400 on
//     3.4 and {"code":3,"message":…} (no "error") on 3.7; a GET is 405
//     (plain text) on 3.4 and 501 with JSON code 12 on 3.7;
//     /v3/lease/keepalive (a gRPC stream) wraps its answer in {"result":…}
//     on both, and an unknown lease comes back with its ID and no TTL.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/fleettest"
)

// startEtcd runs the real etcd server in process on a free loopback port with
// its data in dir (reuse dir to restart on the same data), waits until it
// serves, and returns its client address (host:port) and a stop function
// (also run at t's cleanup; calling it twice is fine).
func startEtcd(t testing.TB, dir string) (clientAddr string, stop func()) {
	t.Helper()
	return startEtcdOn(t, dir, "")
}

// startEtcdOn is startEtcd on a given client address ("" for a free port),
// so that a test can restart etcd where a host's cluster already points.
func startEtcdOn(t testing.TB, dir, clientAddr string) (string, func()) {
	t.Helper()
	return fleettest.StartEmbedded(t, dir, clientAddr)
}

// etcdBinary returns HASHLB_ETCD_BIN (./build.sh test sets it after
// installing Debian's etcd-server); without it the test skips locally and
// fails under CI=true.
func etcdBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("HASHLB_ETCD_BIN")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("HASHLB_ETCD_BIN is not set: run the tests with ./build.sh test, which installs Debian's etcd-server")
		}
		t.Skip("HASHLB_ETCD_BIN is not set (./build.sh test sets it)")
	}
	return bin
}

// etcdCommand is the command that runs the etcd binary bin (3.4's flags), or
// the embedded etcd when bin is embeddedEtcd, as a one-member cluster with its data in dir on free loopback ports, and its
// client URL.
func etcdCommand(t testing.TB, bin, dir string) (*exec.Cmd, string) {
	if bin == embeddedEtcd {
		return embeddedEtcdCommand(t, dir)
	}
	client, peer := "http://"+fleettest.FreeAddr(t), "http://"+fleettest.FreeAddr(t)
	cmd := exec.Command(bin, fleettest.EtcdArgs("hashlb-e2e", dir, client, peer)...)
	cmd.Env = os.Environ()
	switch runtime.GOARCH {
	case "amd64", "ppc64le", "s390x": // etcd 3.4's supported architectures
	default:
		cmd.Env = append(cmd.Env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	return cmd, client
}

// startEtcdBinary runs the etcd binary bin (3.4's flags) with its data in dir
// on free loopback ports, waits until its JSON gateway answers, and returns
// its client address and a stop function (also run at t's cleanup).
func startEtcdBinary(t testing.TB, bin, dir string) (clientAddr string, stop func()) {
	t.Helper()
	e := startEtcdProc(t, bin, dir)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			e.cmd.Process.Signal(os.Interrupt)
			select {
			case <-e.exited:
			case <-time.After(10 * time.Second):
				e.kill()
			}
		})
	}
	t.Cleanup(stop) // before startEtcdProc's kill: cleanups run last first
	return e.addr, stop
}

// etcdStartTries is how often an etcd whose port was taken is started.
const etcdStartTries = fleettest.StartTries

// portTaken reports whether an etcd that exited before it answered lost a
// port it was given (fleettest.FreeAddr) to another process before it
// bound it: on a busy machine an outgoing connection can get that port
// as its own. It is then started again on other ports.
func portTaken(out string) bool { return fleettest.PortTaken(out) }

// delayProxy forwards TCP connections from a loopback address to target,
// holding each chunk of data, in both directions, for delay() before passing
// it on (0: at once), so a test can slow etcd down and back while it runs.
// stop closes the listener and every connection and waits for them (also
// run at t's cleanup).
func delayProxy(t testing.TB, target string, delay func() time.Duration) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-done:
			c.Close()
			return false
		default:
		}
		conns[c] = true
		return true
	}
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if d := delay(); d > 0 {
					select {
					case <-time.After(d):
					case <-done:
						return
					}
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in) || !track(out) {
				in.Close()
				out.Close()
				return
			}
			wg.Add(2)
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			mu.Lock()
			close(done)
			ln.Close()
			for c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// b64 is the gateway's encoding of keys and values.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// etcdKV is one key-value of a gateway response (int64 fields are strings).
type etcdKV struct {
	Key            string `json:"key"`
	Value          string `json:"value"`
	CreateRevision string `json:"create_revision"`
	ModRevision    string `json:"mod_revision"`
	Version        string `json:"version"`
	Lease          string `json:"lease"`
}

// etcdRangeResponse is the gateway's RangeResponse.
type etcdRangeResponse struct {
	Header struct {
		Revision string `json:"revision"`
	} `json:"header"`
	KVs   []etcdKV `json:"kvs"`
	Count string   `json:"count"`
}

// etcdTxnResponse is the gateway's TxnResponse.
type etcdTxnResponse struct {
	Header struct {
		Revision string `json:"revision"`
	} `json:"header"`
	Succeeded bool `json:"succeeded"`
	Responses []struct {
		ResponseRange *etcdRangeResponse `json:"response_range"`
		ResponsePut   *struct{}          `json:"response_put"`
	} `json:"responses"`
}

// etcdCall POSTs body as JSON to the gateway path on addr and decodes the
// answer into out; non-200 answers fail the test.
func etcdCall(t testing.TB, addr, path string, body, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+addr+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s%s: %v", addr, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s%s %s = %d %s", addr, path, b, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("POST %s%s: decoding %s: %v", addr, path, raw, err)
		}
	}
}

// etcdGet reads key through the gateway's /v3/kv/range.
func etcdGet(t testing.TB, addr, key string) (value string, ok bool) {
	t.Helper()
	var r etcdRangeResponse
	etcdCall(t, addr, "/v3/kv/range", map[string]string{"key": b64(key)}, &r)
	if len(r.KVs) == 0 {
		return "", false
	}
	v, err := base64.StdEncoding.DecodeString(r.KVs[0].Value)
	if err != nil {
		t.Fatalf("etcdGet(%q): value %q is not base64: %v", key, r.KVs[0].Value, err)
	}
	return string(v), true
}

// etcdCreate puts key=value only if key does not exist (compare
// create_revision = 0), with lease (0 for none), in one /v3/kv/txn, and
// returns whether it created the key and the value key holds afterwards.
func etcdCreate(t testing.TB, addr, key, value string, lease int64) (created bool, current string) {
	t.Helper()
	put := map[string]any{"key": b64(key), "value": b64(value)}
	if lease != 0 {
		put["lease"] = fmt.Sprint(lease)
	}
	txn := map[string]any{
		"compare": []any{map[string]any{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}},
		"success": []any{map[string]any{"request_put": put}},
		"failure": []any{map[string]any{"request_range": map[string]any{"key": b64(key)}}},
	}
	var r etcdTxnResponse
	etcdCall(t, addr, "/v3/kv/txn", txn, &r)
	if r.Succeeded {
		return true, value
	}
	if len(r.Responses) != 1 || r.Responses[0].ResponseRange == nil || len(r.Responses[0].ResponseRange.KVs) != 1 {
		t.Fatalf("etcdCreate(%q): a failed txn without the range of the key: %+v", key, r)
	}
	v, _ := base64.StdEncoding.DecodeString(r.Responses[0].ResponseRange.KVs[0].Value)
	return false, string(v)
}

// etcdGrant grants a lease of ttl seconds through /v3/lease/grant and returns its id.
func etcdGrant(t testing.TB, addr string, ttl int) int64 {
	t.Helper()
	var r struct {
		ID  string `json:"ID"`
		TTL string `json:"TTL"`
	}
	etcdCall(t, addr, "/v3/lease/grant", map[string]string{"TTL": fmt.Sprint(ttl)}, &r)
	var id int64
	if _, err := fmt.Sscan(r.ID, &id); err != nil || id == 0 || r.TTL != fmt.Sprint(ttl) {
		t.Fatalf("lease grant = %+v, want an id and TTL %d as strings", r, ttl)
	}
	return id
}

// etcdKeys returns every key under prefix with its value, through one
// /v3/kv/range with range_end the prefix's successor.
func etcdKeys(t testing.TB, addr, prefix string) map[string]string {
	t.Helper()
	end := []byte(prefix)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	body := map[string]string{"key": b64(prefix)}
	if len(end) == 0 {
		body["range_end"] = b64("\x00") // every key
	} else {
		end[len(end)-1]++
		body["range_end"] = b64(string(end))
	}
	var r etcdRangeResponse
	etcdCall(t, addr, "/v3/kv/range", body, &r)
	out := make(map[string]string, len(r.KVs))
	for _, kv := range r.KVs {
		k, err1 := base64.StdEncoding.DecodeString(kv.Key)
		v, err2 := base64.StdEncoding.DecodeString(kv.Value)
		if err1 != nil || err2 != nil {
			t.Fatalf("etcdKeys(%q): %+v is not base64", prefix, kv)
		}
		out[string(k)] = string(v)
	}
	return out
}
