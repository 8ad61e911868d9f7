package envoy

// etcd for the real-Envoy fleet tests: Debian's etcd 3.4 binary
// (HASHLB_ETCD_BIN, else /usr/bin/etcd) as a process on free loopback
// ports that a test can SIGKILL and start again on the same ports and data
// directory, so that the Envoys' hashlb_etcd cluster keeps pointing at it.
// The flags are those of e2e/fleet_etcd_helpers_test.go (etcdCommand).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/fleettest"
)

// fleetEtcd is one etcd member.
type fleetEtcd struct {
	t            testing.TB
	bin, dir     string
	client, peer string // host:port
	mu           sync.Mutex
	cmd          *exec.Cmd
	exited       chan struct{}
	out          *bytes.Buffer
}

// fleetEtcdBinary is HASHLB_ETCD_BIN, else Debian's /usr/bin/etcd. Without
// either the test fails: a real-Envoy test never skips once Envoy is there.
func fleetEtcdBinary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("HASHLB_ETCD_BIN"); b != "" {
		return b
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	t.Fatal("no etcd: set HASHLB_ETCD_BIN (./build.sh test installs Debian's etcd-server)")
	return ""
}

// fleetDataDir is a fresh directory for etcd's data, on tmpfs when there
// is one: etcd 3.4 fsyncs every write, and a disk shared with other jobs
// makes calls slow for reasons no fault of the test explains.
func fleetDataDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "hashlb-envoy-etcd-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// startFleetEtcd runs etcd with a fresh data directory on free loopback
// ports and waits until its JSON gateway answers; it is killed when the
// test ends.
func startFleetEtcd(t testing.TB) *fleetEtcd {
	t.Helper()
	for try := 1; ; try++ {
		e := &fleetEtcd{t: t, bin: fleetEtcdBinary(t), dir: fleetDataDir(t), client: fleettest.FreeAddr(t), peer: fleettest.FreeAddr(t)}
		err := e.start()
		if err == nil {
			t.Cleanup(e.kill)
			return e
		}
		// On a busy machine an outgoing connection can take a port between
		// FreeAddr and etcd's bind: started again on others.
		if try < 3 && strings.Contains(err.Error(), "address already in use") {
			t.Logf("etcd lost a port before it bound it; started again on others: %v", err)
			continue
		}
		t.Fatal(err)
	}
}

func (e *fleetEtcd) start() error {
	client, peer := "http://"+e.client, "http://"+e.peer
	cmd := exec.Command(e.bin, fleettest.EtcdArgs("hashlb-envoy", e.dir, client, peer)...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %v", e.bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	e.mu.Lock()
	e.cmd, e.exited, e.out = cmd, exited, out
	e.mu.Unlock()
	if err := fleettest.WaitGateway(e.client, 60*time.Second, exited); err != nil {
		e.kill()
		return fmt.Errorf("%s: %v\n%s", e.bin, err, out.String())
	}
	return nil
}

// kill ends etcd with SIGKILL (no shutdown of its own) and waits for it.
func (e *fleetEtcd) kill() {
	e.mu.Lock()
	cmd, exited := e.cmd, e.exited
	e.mu.Unlock()
	fleettest.KillWait(cmd, exited)
}

// restart starts etcd again on the same ports and data directory.
func (e *fleetEtcd) restart() error { return e.start() }

// keys returns every key under prefix with its value (one range read).
func (e *fleetEtcd) keys(prefix string) (map[string]string, error) {
	end := []byte(prefix)
	end[len(end)-1]++ // a prefix ending in 0xff is not used here
	body, _ := json.Marshal(map[string]string{
		"key":       base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString(end),
	})
	resp, err := http.Post("http://"+e.client+"/v3/kv/range", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("etcd range %q: %d %s", prefix, resp.StatusCode, raw)
	}
	var r struct {
		KVs []struct{ Key, Value string } `json:"kvs"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("etcd range %q: %v: %s", prefix, err, raw)
	}
	out := map[string]string{}
	for _, kv := range r.KVs {
		k, _ := base64.StdEncoding.DecodeString(kv.Key)
		v, _ := base64.StdEncoding.DecodeString(kv.Value)
		out[string(k)] = string(v)
	}
	return out, nil
}
