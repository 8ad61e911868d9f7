package fleet

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestFleetRecord(t *testing.T) {
	r := Record{Stamp: 1767225600, Service: "cache a"}
	if got := r.String(); got != "1767225600 cache a" {
		t.Errorf("String() = %q", got)
	}
	back, ok := ParseRecord(r.String())
	if !ok || back != r {
		t.Errorf("ParseRecord(%q) = %+v, %v, want %+v", r.String(), back, ok, r)
	}
	for _, bad := range []string{"", "10.0.0.1:80", "x 10.0.0.1:80", "1767225600 ", "1767225600"} {
		if _, ok := ParseRecord(bad); ok {
			t.Errorf("ParseRecord(%q) ok, want refused", bad)
		}
	}
}

// TestFleetExpiryBound: an entry whose stamp was refreshed at the first use
// of each slot lives at least expire and at most expire + slot after its
// last use.
func TestFleetExpiryBound(t *testing.T) {
	expire := 10 * time.Minute
	slot := Slot(expire)
	if slot != 75*time.Second {
		t.Fatalf("Slot(10m) = %v, want 75s", slot)
	}
	t0 := time.Unix(1767225600, 0) // a slot boundary
	for _, lastUse := range []time.Duration{0, 10 * time.Second, 74 * time.Second, 75 * time.Second, 140 * time.Second} {
		u := t0.Add(lastUse)
		// The stamp is the first use in u's slot: its start at the earliest.
		stamp := SlotOf(u.Unix(), expire) * int64(slot/time.Second)
		r := Record{Stamp: stamp, Service: "a"}
		if !r.Alive(u.Add(expire), expire) {
			t.Errorf("last use +%v: dead at last use + expire", lastUse)
		}
		if r.Alive(u.Add(expire+slot+time.Second), expire) {
			t.Errorf("last use +%v: alive past last use + expire + slot", lastUse)
		}
		// etcd's lease outlives the rule.
		granted := stamp - 30
		if end := granted + LeaseTTL(SlotOf(stamp, expire), granted, expire); end < stamp+int64((expire+slot)/time.Second) {
			t.Errorf("lease ends at %d, before the entry's logical end %d", end, stamp+int64((expire+slot)/time.Second))
		}
	}
}

func TestFleetKey(t *testing.T) {
	a, b := Key("/hashlb/x/", []byte("10.1.2.3")), Key("/hashlb/x/", []byte("10.1.2.4"))
	if len(a) != len("/hashlb/x/")+16 || !strings.HasPrefix(a, "/hashlb/x/") || a == b {
		t.Errorf("Key = %q, %q: want the prefix and 16 hex digits, distinct", a, b)
	}
}

// TestEtcdBodies: the bodies are JSON in the v3 gateway's shape.
func TestEtcdBodies(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tt := range []struct {
		name, body, want string
	}{
		{"create", string(createOrGetRequest("/k", "1 a", 42)),
			`{"compare":[{"create_revision":"0","key":"` + enc("/k") + `","result":"EQUAL","target":"CREATE"}],"failure":[{"request_range":{"key":"` + enc("/k") + `"}}],"success":[{"request_put":{"key":"` + enc("/k") + `","lease":"42","value":"` + enc("1 a") + `"}}]}`},
		{"replace", string(replaceRequest("/k", 7, "2 b", 0)),
			`{"compare":[{"key":"` + enc("/k") + `","mod_revision":"7","result":"EQUAL","target":"MOD"}],"failure":[{"request_range":{"key":"` + enc("/k") + `"}}],"success":[{"request_put":{"key":"` + enc("/k") + `","value":"` + enc("2 b") + `"}}]}`},
		{"range", string(rangeRequest("/k")), `{"key":"` + enc("/k") + `"}`},
		{"grant", string(leaseGrantRequest(600)), `{"ID":"0","TTL":"600"}`},
	} {
		var v any
		if err := json.Unmarshal([]byte(tt.body), &v); err != nil {
			t.Fatalf("%s: %v in %s", tt.name, err, tt.body)
		}
		got, _ := json.Marshal(v) // sorted keys
		if string(got) != tt.want {
			t.Errorf("%s body = %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

func TestParseEtcdAnswers(t *testing.T) {
	val := base64.StdEncoding.EncodeToString([]byte("1767225600 10.0.0.1:80"))
	for _, tt := range []struct {
		name      string
		body      string
		succeeded bool
		found     bool
		kv        etcdKV
		err       string
	}{
		{"created", `{"header":{"revision":"12"},"succeeded":true,"responses":[{"response_put":{"header":{}}}]}`, true, true, etcdKV{ModRevision: 12}, ""},
		{"existing, proto names", `{"header":{"revision":"12"},"responses":[{"response_range":{"kvs":[{"key":"eA==","create_revision":"3","mod_revision":"9","version":"2","value":"` + val + `","lease":"77"}],"count":"1"}}]}`,
			false, true, etcdKV{Value: "1767225600 10.0.0.1:80", ModRevision: 9, Lease: 77}, ""},
		{"existing, camelCase", `{"header":{"revision":"12"},"responses":[{"responseRange":{"kvs":[{"key":"eA==","modRevision":"9","value":"` + val + `"}]}}]}`,
			false, true, etcdKV{Value: "1767225600 10.0.0.1:80", ModRevision: 9}, ""},
		{"gone meanwhile", `{"header":{"revision":"12"},"responses":[{"response_range":{"header":{}}}]}`, false, false, etcdKV{}, ""},
		{"lease not found", `{"error":"etcdserver: requested lease not found","code":5,"message":"etcdserver: requested lease not found"}`, false, false, etcdKV{}, "lease not found"},
		{"not JSON", `<html>`, false, false, etcdKV{}, "not JSON"},
		{"bad value", `{"responses":[{"response_range":{"kvs":[{"mod_revision":"9","value":"%%%"}]}}]}`, false, false, etcdKV{}, "not base64"},
	} {
		ok, kv, found, err := parseTxn([]byte(tt.body), nil)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: parseTxn error %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || ok != tt.succeeded || found != tt.found || kv != tt.kv {
			t.Errorf("%s: parseTxn = %v, %+v, %v, %v; want %v, %+v, %v", tt.name, ok, kv, found, err, tt.succeeded, tt.kv, tt.found)
		}
	}
	if id, err := parseLease([]byte(`{"header":{},"ID":"7587883421836473355","TTL":"675"}`)); err != nil || id != 7587883421836473355 {
		t.Errorf("parseLease = %d, %v", id, err)
	}
}

// TestEtcdAnswerLimits: answers too large or nested too deep are refused
// before any parse, whatever their status or shape.
func TestEtcdAnswerLimits(t *testing.T) {
	for _, tt := range []struct {
		name string
		body string
		size int // 0: len(body)
		want error
	}{
		{"an etcd answer", `{"header":{"revision":"2"},"kvs":[{"value":"YQ==","mod_revision":"2"}]}`, 0, nil},
		{"[ x 10^4", strings.Repeat("[", 10000), 0, errAnswerTooDeep},
		{`{"a": x 10^4`, strings.Repeat(`{"a":`, 10000), 0, errAnswerTooDeep},
		{"32 levels", strings.Repeat("[", 32) + strings.Repeat("]", 32), 0, nil},
		{"33 levels", strings.Repeat("[", 33) + strings.Repeat("]", 33), 0, errAnswerTooDeep},
		{"brackets in a string", `{"message":"` + strings.Repeat("[", 100) + `"}`, 0, nil},
		{"1 MiB", strings.Repeat(" ", 1<<20), 0, errAnswerTooLarge},
		{"1 MiB announced, not read", "", 1 << 20, errAnswerTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			size := tt.size
			if size == 0 {
				size = len(tt.body)
			}
			if err := checkAnswer([]byte(tt.body), size); err != tt.want {
				t.Errorf("checkAnswer(%.20q…, %d) = %v, want %v", tt.body, size, err, tt.want)
			}
			if tt.want != nil && tt.size == 0 {
				if _, _, err := parseRange([]byte(tt.body), nil); err != tt.want {
					t.Errorf("parseRange(%.20q…) = %v, want %v", tt.body, err, tt.want)
				}
			}
		})
	}
}

// TestEtcdAuthCodec: the authenticate body escapes what JSON needs, the
// token is read back, and etcd's auth errors are told apart.
func TestEtcdAuthCodec(t *testing.T) {
	if got, want := string(authenticateRequest("u\"1", "p\\w\n")), `{"name":"u\"1","password":"p\\w\u000a"}`; got != want {
		t.Errorf("authenticateRequest = %s, want %s", got, want)
	}
	if tok, err := parseAuth([]byte(`{"header":{},"token":"abc.12"}`)); tok != "abc.12" || err != nil {
		t.Errorf("parseAuth = %q, %v, want abc.12", tok, err)
	}
	if _, err := parseAuth([]byte(`{"token":"a b"}`)); err == nil {
		t.Error("parseAuth accepted a token that is no header value")
	}
	for _, tt := range []struct {
		msg  string
		want error
	}{
		{"etcdserver: user name is empty", errAuthToken},
		{"etcdserver: invalid auth token", errAuthToken},
		{"etcdserver: authentication failed, invalid user ID or password", errAuthFailed},
		{"etcdserver: permission denied", errPermission},
		{"etcdserver: requested lease not found", errLeaseNotFound},
	} {
		if err := answerError([]byte(`{"code":3,"message":"` + tt.msg + `"}`)); err != tt.want {
			t.Errorf("answerError(%q) = %v, want %v", tt.msg, err, tt.want)
		}
	}
}

// KeyHash reads back the hash AppendKey wrote, and refuses other shapes.
func TestKeyHash(t *testing.T) {
	for _, h := range []uint64{0, 1, 0xdeadbeef, ^uint64(0)} {
		if got, ok := KeyHash("/p/", string(AppendKey(nil, "/p/", h))); !ok || got != h {
			t.Errorf("KeyHash(AppendKey(%x)) = %x, %v", h, got, ok)
		}
	}
	for _, k := range []string{"/q/0000000000000001", "/p/000000000000001", "/p/000000000000000G", "/p/0000000000000001" + AltSuffix} {
		if _, ok := KeyHash("/p/", k); ok {
			t.Errorf("KeyHash(%q) accepted", k)
		}
	}
}
