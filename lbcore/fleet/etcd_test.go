package fleet

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// fakeEtcd answers the calls Client makes as etcd's JSON gateway does
// (3.4's encoding: snake_case, int64 as strings, zero values left out), for
// the tests of the protocol without a host. Leases never expire; lose()
// forgets everything, as an etcd restarted on an empty data directory.
type fakeEtcd struct {
	kv     map[string]fakeKV
	rev    int64
	leases map[int64]bool
	lease  int64
	users  map[string]string // user -> password; auth is on when not empty
	tokens map[string]bool
	calls  int
}

type fakeKV struct {
	value              string
	create, mod, lease int64
}

func newFakeEtcd() *fakeEtcd {
	return &fakeEtcd{kv: map[string]fakeKV{}, rev: 1, leases: map[int64]bool{}, lease: 100, tokens: map[string]bool{}}
}

// lose forgets every key, lease and token (the revision restarts too).
func (e *fakeEtcd) lose() {
	e.kv, e.rev, e.leases, e.tokens = map[string]fakeKV{}, 1, map[int64]bool{}, map[string]bool{}
}

func (e *fakeEtcd) errorAnswer(code int, msg string) (int, []byte) {
	return 400, []byte(fmt.Sprintf(`{"error":%q,"code":%d,"message":%q}`, msg, code, msg))
}

// handle answers one call: its status and body.
func (e *fakeEtcd) handle(c Call) (int, []byte) {
	e.calls++
	r := gjson.ParseBytes(c.Body)
	if !r.IsObject() {
		return e.errorAnswer(3, "invalid JSON")
	}
	if c.Path == "/v3/auth/authenticate" {
		if len(e.users) == 0 {
			return e.errorAnswer(9, "etcdserver: authentication is not enabled")
		}
		if pw, ok := e.users[r.Get("name").String()]; !ok || pw != r.Get("password").String() {
			return e.errorAnswer(3, "etcdserver: authentication failed, invalid user ID or password")
		}
		tok := fmt.Sprintf("tok.%d", e.calls)
		e.tokens[tok] = true
		return 200, []byte(`{"header":{"cluster_id":"1","revision":"` + itoa(int(e.rev)) + `"},"token":"` + tok + `"}`)
	}
	if len(e.users) > 0 {
		if c.Token == "" {
			return e.errorAnswer(3, "etcdserver: user name is empty")
		}
		if !e.tokens[c.Token] {
			return e.errorAnswer(3, "etcdserver: invalid auth token")
		}
	}
	hdr := `{"header":{"cluster_id":"1","revision":"` + strconv.FormatInt(e.rev, 10) + `"}`
	switch c.Path {
	case "/v3/lease/grant":
		e.lease++
		e.leases[e.lease] = true
		return 200, []byte(hdr[:len(hdr)-1] + `},"ID":"` + strconv.FormatInt(e.lease, 10) + `","TTL":"` + r.Get("TTL").String() + `"}`)
	case "/v3/kv/range":
		return 200, []byte(hdr[:len(hdr)-1] + `}` + e.rangeOf(r.Get("key").String()) + `}`)
	case "/v3/lease/timetolive":
		ttl := "-1"
		if e.leases[r.Get("ID").Int()] {
			ttl = "60"
		}
		return 200, []byte(hdr[:len(hdr)-1] + `},"ID":"` + r.Get("ID").String() + `","TTL":"` + ttl + `"}`)
	case "/v3/kv/txn":
	default:
		return 404, []byte("Not Found")
	}
	cmp := r.Get("compare.0")
	key := unb64(cmp.Get("key").String())
	cur, exists := e.kv[key]
	ok := false
	switch cmp.Get("target").String() {
	case "CREATE":
		ok = cur.create == cmp.Get("create_revision").Int()
	case "MOD":
		ok = exists && cur.mod == cmp.Get("mod_revision").Int()
	}
	branch := "failure"
	if ok {
		branch = "success"
	}
	var resp []string
	for _, op := range r.Get(branch).Array() {
		if p := op.Get("request_put"); p.Exists() {
			lease := p.Get("lease").Int()
			if lease != 0 && !e.leases[lease] {
				return e.errorAnswer(5, "etcdserver: requested lease not found")
			}
			k := unb64(p.Get("key").String())
			old, had := e.kv[k]
			e.rev++
			create := e.rev
			if had {
				create = old.create
			}
			e.kv[k] = fakeKV{value: unb64(p.Get("value").String()), create: create, mod: e.rev, lease: lease}
			resp = append(resp, `{"response_put":{"header":{}}}`)
		} else if g := op.Get("request_range"); g.Exists() {
			resp = append(resp, `{"response_range":{"header":{}`+e.rangeOf(g.Get("key").String())+`}}`)
		}
	}
	hdr = `{"header":{"cluster_id":"1","revision":"` + strconv.FormatInt(e.rev, 10) + `"}`
	succeeded := ""
	if ok {
		succeeded = `,"succeeded":true`
	}
	return 200, []byte(hdr + succeeded + `,"responses":[` + strings.Join(resp, ",") + `]}`)
}

// rangeOf is the ,"kvs":[…],"count":"1" part of a range of key (base64),
// or "" when it does not exist.
func (e *fakeEtcd) rangeOf(key64 string) string {
	kv, ok := e.kv[unb64(key64)]
	if !ok {
		return ""
	}
	lease := ""
	if kv.lease != 0 {
		lease = `,"lease":"` + strconv.FormatInt(kv.lease, 10) + `"`
	}
	return `,"kvs":[{"key":"` + key64 + `","create_revision":"` + strconv.FormatInt(kv.create, 10) +
		`","mod_revision":"` + strconv.FormatInt(kv.mod, 10) + `","version":"1","value":"` +
		base64.StdEncoding.EncodeToString([]byte(kv.value)) + `"` + lease + `}],"count":"1"`
}

// service is the service named by key's record, "" when there is none.
func (e *fakeEtcd) service(key string) string {
	r, ok := ParseRecord(e.kv[key].value)
	if !ok {
		return ""
	}
	return r.Service
}

func unb64(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	return string(b)
}
