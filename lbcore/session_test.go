package lbcore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

var testSessionKey = []byte("0123456789abcdef0123456789abcdef-test-key")

// sessionBalancer returns a Balancer of config js with the session key.
func sessionBalancer(t testing.TB, js string, key []byte, seed uint64) (*Config, *Balancer) {
	t.Helper()
	c := mustConfig(t, js)
	b := NewBalancer(c, seed)
	if err := b.EnableSession(key, ""); err != nil {
		t.Fatal(err)
	}
	return c, b
}

// cookieOf returns name=value of a Set-Cookie value, and its attributes.
func cookieOf(t testing.TB, setCookie string) (pair string, attrs map[string]string) {
	t.Helper()
	parts := strings.Split(setCookie, "; ")
	attrs = map[string]string{}
	for _, a := range parts[1:] {
		k, v, _ := strings.Cut(a, "=")
		attrs[k] = v
	}
	return parts[0], attrs
}

// issue decides r, which must carry no valid session, and returns the
// session value the response carries.
func issue(t testing.TB, b *Balancer, r *Request, now time.Time) (Decision, string) {
	t.Helper()
	d := b.Decide(r, now)
	if !d.SetsSession() {
		t.Fatalf("a decision without a valid session (%v) sets no session", d.Session)
	}
	return d, string(b.AppendSessionValue(nil, &d, now))
}

func withCookie(r Request, name, value string) *Request {
	r.Headers = append(append([][2]string(nil), r.Headers...), [2]string{"cookie", "a=1; " + name + "=" + value + "; z=2"})
	return &r
}

const sessionPool4 = `"session": {"type": "cookie", "absoluteTimeout": "1h", "idleTimeout": "10m"}, "upstreamCount": 3`

// TestSessionRoundTrip: a request without a cookie is decided by the
// method and its response carries a session; the value brought back picks
// that service on another Balancer (another worker or proxy with the same
// key), whatever its method and seed say.
func TestSessionRoundTrip(t *testing.T) {
	c, b := sessionBalancer(t, pool("URLHASH", 8, sessionPool4), testSessionKey, 1)
	moved := 0
	for i := range 50 {
		r := Request{Target: fmt.Sprintf("/u/%d", i)}
		d, v := issue(t, b, &r, epoch)
		if len(v) != sessionValueLen {
			t.Fatalf("value %q has %d bytes, want %d", v, len(v), sessionValueLen)
		}
		// Another proxy: another seed, and a method that would choose otherwise.
		c2, b2 := sessionBalancer(t, pool("ROUNDROBIN", 8, sessionPool4), testSessionKey, uint64(i))
		// Ask for another URL: the session, not the hash, decides.
		r2 := withCookie(Request{Target: fmt.Sprintf("/other/%d", i)}, "hashlb-session", v)
		d2 := b2.Decide(r2, epoch.Add(30*time.Second))
		if d2.Reason != ReasonSession || d2.Session != SessionValid || first(c2, d2) != first(c, d) {
			moved++
			t.Errorf("client %d: session for %s: decided %v (%v, %v)", i, first(c, d), names(c2, d2), d2.Reason, d2.Session)
		}
		if d2.SetsSession() {
			t.Errorf("client %d: a valid session used 30 s after issue (idle 10m) is re-issued", i)
		}
	}
	if moved != 0 {
		t.Errorf("%d clients moved", moved)
	}
}

// TestSessionFailoverFollowsRanking: with upstreamCount 3, the services
// after the session's are the method's ranking of the request, without it.
func TestSessionFailoverFollowsRanking(t *testing.T) {
	c, b := sessionBalancer(t, pool("URLHASH", 8, sessionPool4), testSessionKey, 1)
	for i := range 200 {
		r := Request{Target: fmt.Sprintf("/k/%d", i)}
		d, _ := issue(t, b, &r, epoch)
		// A session for another service than r's own first choice.
		other := Decision{}
		other.reset()
		other.add((d.At(0) + 1) % len(c.Services))
		v := string(b.AppendSessionValue(nil, &other, epoch))
		d2 := b.Decide(withCookie(r, "hashlb-session", v), epoch)
		want := []string{c.Services[other.At(0)].Name}
		for _, n := range names(c, b.hashOnly(t, &r)) {
			if n != want[0] && len(want) < 3 {
				want = append(want, n)
			}
		}
		if got := names(c, d2); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("request %s with a session for %s: %v, want %v", r.Target, want[0], got, want)
		}
	}
}

// hashOnly is r's decision by the method alone, ranked to 8.
func (b *Balancer) hashOnly(t testing.TB, r *Request) Decision {
	c := *b.cfg
	c.Session, c.UpstreamCount = nil, 8
	return NewBalancer(&c, 1).Decide(r, epoch)
}

// TestSessionForgeries: no altered value ever selects a service: every
// character replaced in turn (by each of two others), every bit of the
// decoded value flipped in turn, truncated at every length, 16 KiB, padded, another proxy's key, another session name, a
// value of the right shape with a bad MAC.
func TestSessionForgeries(t *testing.T) {
	c, b := sessionBalancer(t, pool("URLHASH", 4, sessionPool4), testSessionKey, 1)
	r := Request{Target: "/x"}
	d, v := issue(t, b, &r, epoch)
	mustNot := func(what, value string) {
		t.Helper()
		got := b.Decide(withCookie(r, "hashlb-session", value), epoch)
		if got.Reason == ReasonSession || got.Session == SessionValid {
			t.Errorf("%s %q: chose %s by session", what, value, first(c, got))
		}
		if got.Session != SessionForged {
			t.Errorf("%s: session state %v, want forged", what, got.Session)
		}
		if !got.SetsSession() || first(c, got) != first(c, d) {
			t.Errorf("%s: decided %s (sets session %v), want the method's %s and a new session", what, first(c, got), got.SetsSession(), first(c, d))
		}
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	n := 0
	for i := range len(v) {
		for _, delta := range []int{1, 17} {
			j := (strings.IndexByte(alphabet, v[i]) + delta) % len(alphabet)
			mustNot(fmt.Sprintf("char %d replaced", i), v[:i]+alphabet[j:j+1]+v[i+1:])
			n++
		}
		mustNot(fmt.Sprintf("char %d flipped to '.'", i), v[:i]+"."+v[i+1:])
		mustNot(fmt.Sprintf("truncated to %d", i), v[:i])
	}
	// Every bit of the decoded value flipped in turn (version, tag, times, MAC), re-encoded.
	raw0, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		t.Fatal(err)
	}
	for bit := range len(raw0) * 8 {
		flipped := append([]byte(nil), raw0...)
		flipped[bit/8] ^= 1 << (bit % 8)
		mustNot(fmt.Sprintf("bit %d flipped", bit), base64.RawURLEncoding.EncodeToString(flipped))
	}
	mustNot("16 KiB", strings.Repeat(v, 16*1024/len(v)+1)[:16*1024])
	mustNot("one byte more", v+"A")
	mustNot("padded", v+"==")
	mustNot("quoted", `"`+v+`"`)
	_, other := sessionBalancer(t, pool("URLHASH", 4, sessionPool4), []byte("another-proxy's-key-of-32-bytes-or-more"), 1)
	_, ov := issue(t, other, &r, epoch)
	mustNot("another key", ov)
	_, renamed := sessionBalancer(t, pool("URLHASH", 4, `"session": {"type": "cookie", "name": "other", "absoluteTimeout": "1h"}`), testSessionKey, 1)
	_, rv := issue(t, renamed, &r, epoch)
	mustNot("another session name", rv)
	// A value with a version byte, tag and times of our own making, and a MAC guessed.
	raw := make([]byte, sessionRawLen)
	raw[0] = sessionVersion
	binary.BigEndian.PutUint64(raw[1:], b.sess.keys[0].tags[0])
	binary.BigEndian.PutUint32(raw[sessionTagEnd:], uint32(epoch.Unix()))
	binary.BigEndian.PutUint32(raw[sessionTagEnd+4:], uint32(epoch.Unix()))
	mustNot("a guessed MAC", base64.RawURLEncoding.EncodeToString(raw))
	t.Logf("%d replaced characters, %d truncations refused", n, len(v))
}

// TestSessionMAC: the value is HMAC-SHA256 (truncated to 16 bytes) over
// the domain, type, name and body, under the key, and its tag an HMAC of
// the service's identity (hashId, else address): computed here with
// crypto/hmac independently.
func TestSessionMAC(t *testing.T) {
	c, b := sessionBalancer(t, `{"lbMethod":"URLHASH","session":{"type":"cookie","name":"sid"},"services":[{"name":"a","address":"10.0.0.1:80","hashId":"pod-a"},{"name":"b","address":"10.0.0.2:80"}]}`, testSessionKey, 1)
	r := Request{Target: "/"}
	d, v := issue(t, b, &r, epoch)
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) != sessionRawLen {
		t.Fatalf("value %q: %v, %d bytes", v, err, len(raw))
	}
	id := c.Services[d.At(0)].HashID
	if id == "" {
		id = c.Services[d.At(0)].Address
	}
	m := hmac.New(sha256.New, testSessionKey)
	m.Write([]byte("hashlb-session-service\x00" + id))
	if got, want := binary.BigEndian.Uint64(raw[1:]), binary.BigEndian.Uint64(m.Sum(nil)); got != want {
		t.Errorf("tag %x, want HMAC(key, identity) %x", got, want)
	}
	m = hmac.New(sha256.New, testSessionKey)
	m.Write([]byte("hashlb-session\x00cookie\x00sid\x00default\x00"))
	m.Write(raw[:sessionBody])
	if !hmac.Equal(m.Sum(nil)[:sessionMACLen], raw[sessionBody:]) {
		t.Error("the MAC is not HMAC-SHA256(key, domain|type|name|root_id|body) truncated")
	}
	if strings.Contains(v, "10.0.0") || strings.Contains(string(raw), "10.0.0") {
		t.Error("the value shows the address")
	}
	if got := binary.BigEndian.Uint32(raw[sessionTagEnd:]); got != uint32(epoch.Unix()) {
		t.Errorf("issue time %d, want %d", got, epoch.Unix())
	}
}

// TestSessionTimeouts: absoluteTimeout and idleTimeout end a session (the
// request then falls back and gets a new one); a use after a tenth of the
// idle timeout re-issues it with the same issue time, and a client using
// it every 9 minutes of a 10-minute idle timeout keeps it until the
// absolute timeout.
func TestSessionTimeouts(t *testing.T) {
	c, b := sessionBalancer(t, pool("ROUNDROBIN", 4, sessionPool4), testSessionKey, 1)
	r := Request{}
	d, v := issue(t, b, &r, epoch)
	svc := first(c, d)
	at := func(v string, after time.Duration) Decision {
		return b.Decide(withCookie(r, "hashlb-session", v), epoch.Add(after))
	}
	if got := at(v, 59*time.Second); got.Session != SessionValid || got.SetsSession() {
		t.Errorf("59 s later: %v, sets %v; want valid, not re-issued", got.Session, got.SetsSession())
	}
	if got := at(v, 60*time.Second); got.Session != SessionValid || !got.SetsSession() || !got.Refreshes() {
		t.Errorf("60 s later (a tenth of idle 10m): %v, sets %v; want valid and re-issued", got.Session, got.SetsSession())
	}
	if got := at(v, 10*time.Minute); got.Session != SessionIdle || !got.SetsSession() {
		t.Errorf("10 m unused: %v, sets %v; want idle and a new session", got.Session, got.SetsSession())
	}
	// Used every 9 minutes, re-issued each time: valid until the absolute timeout (1h).
	cur, now := v, time.Duration(0)
	for now+9*time.Minute < time.Hour {
		now += 9 * time.Minute
		got := at(cur, now)
		if got.Session != SessionValid || first(c, got) != svc {
			t.Fatalf("at %v: %v on %s, want valid on %s", now, got.Session, first(c, got), svc)
		}
		cur = string(b.AppendSessionValue(nil, &got, epoch.Add(now)))
		raw, _ := base64.RawURLEncoding.DecodeString(cur)
		if binary.BigEndian.Uint32(raw[sessionTagEnd:]) != uint32(epoch.Unix()) {
			t.Fatal("a refresh changed the issue time")
		}
	}
	if got := at(cur, time.Hour); got.Session != SessionExpired || !got.SetsSession() {
		t.Errorf("1 h after issue: %v, want expired and a new session", got.Session)
	}
	// The new session after expiry starts a new hour.
	got := at(cur, time.Hour)
	nv := string(b.AppendSessionValue(nil, &got, epoch.Add(time.Hour)))
	if got := at(nv, time.Hour+30*time.Minute-time.Second); got.Session == SessionExpired {
		t.Error("the session issued after expiry is expired at once")
	}
}

// TestSessionUnselectable: a session naming a disabled, DOWN or removed
// service falls back to the method, names the service it had
// (sessionService), and the response carries a new session for the
// fallback; the service's return makes its old sessions valid again.
func TestSessionUnselectable(t *testing.T) {
	c, b := sessionBalancer(t, pool("URLHASH", 4, sessionPool4), testSessionKey, 1)
	r := Request{Target: "/y"}
	d, v := issue(t, b, &r, epoch)
	i := d.At(0)
	b.SetDown(i, true)
	got := b.Decide(withCookie(r, "hashlb-session", v), epoch)
	if got.Session != SessionUnselectable || got.sessionService() != i || first(c, got) == c.Services[i].Name || !got.SetsSession() {
		t.Fatalf("session for DOWN %s: %v, names %d, chose %s, sets %v", c.Services[i].Name, got.Session, got.sessionService(), first(c, got), got.SetsSession())
	}
	nv := string(b.AppendSessionValue(nil, &got, epoch))
	if again := b.Decide(withCookie(r, "hashlb-session", nv), epoch); again.Session != SessionValid || again.At(0) != got.At(0) {
		t.Errorf("the new session: %v on %s, want valid on %s", again.Session, first(c, again), first(c, got))
	}
	b.SetDown(i, false)
	if back := b.Decide(withCookie(r, "hashlb-session", v), epoch); back.Session != SessionValid || back.At(0) != i {
		t.Errorf("the old session after %s is UP: %v on %s", c.Services[i].Name, back.Session, first(c, back))
	}
	// Removed: a configuration without the service (the same key).
	var keep []string
	for j, s := range c.Services {
		if j != i {
			keep = append(keep, fmt.Sprintf(`{"name":%q,"address":%q}`, s.Name, s.Address))
		}
	}
	c3, b3 := sessionBalancer(t, `{"lbMethod":"URLHASH",`+sessionPool4+`,"services":[`+strings.Join(keep, ",")+`]}`, testSessionKey, 1)
	if gone := b3.Decide(withCookie(r, "hashlb-session", v), epoch); gone.Session != SessionUnknown || !gone.SetsSession() || gone.Len() == 0 {
		t.Errorf("session for a removed service: %v on %s, sets %v", gone.Session, first(c3, gone), gone.SetsSession())
	}
}

// TestSessionWeightZero: a service of weight 0 takes no new keys (hash,
// round robin, least connection, persistence misses) but keeps its
// sessions and persistence entries.
func TestSessionWeightZero(t *testing.T) {
	for _, method := range []string{"URLHASH", "ROUNDROBIN", "LEASTCONNECTION"} {
		t.Run(method, func(t *testing.T) {
			js := func(w int) string {
				return fmt.Sprintf(`{"lbMethod":%q,%s,"persistence":{"keys":["${request.header.x-id}"]},"services":[{"name":"a","address":"10.0.0.1:80","weight":%d},{"name":"b","address":"10.0.0.2:80"},{"name":"c","address":"10.0.0.3:80"}]}`, method, sessionPool4, w)
			}
			_, full := sessionBalancer(t, js(1), testSessionKey, 1)
			full.EnablePersistence(NewMemStore(), "t")
			c0, drained := sessionBalancer(t, js(0), testSessionKey, 1)
			store := NewMemStore()
			drained.EnablePersistence(store, "t")
			var onA []string
			for i := range 300 {
				r := Request{Target: fmt.Sprintf("/%d", i), Headers: [][2]string{{"x-id", fmt.Sprint("id", i)}}}
				d, v := issue(t, full, &r, epoch)
				if d.At(0) == 0 {
					onA = append(onA, v)
				}
				if nd := drained.Decide(&Request{Target: fmt.Sprintf("/new/%d", i)}, epoch); first(c0, nd) == "a" {
					t.Fatalf("a new request went to a, of weight 0: %v", names(c0, nd))
				} else if nd.Len() != 2 {
					t.Fatalf("upstreamCount 3 over two pickable services: %v", names(c0, nd))
				}
			}
			if len(onA) == 0 {
				t.Fatal("no session on a")
			}
			for _, v := range onA {
				if d := drained.Decide(withCookie(Request{Target: "/z"}, "hashlb-session", v), epoch); d.Session != SessionValid || first(c0, d) != "a" {
					t.Fatalf("a session on a (weight 0): %v on %s, want kept", d.Session, first(c0, d))
				}
			}
			// A persistence entry on a, written before a was drained, stays.
			r := Request{Target: "/p", Headers: [][2]string{{"x-id", "kept"}}}
			drained.RememberHash(PersistKeyHash([]byte("kept")), epoch, 0)
			if d := drained.Decide(&r, epoch); first(c0, d) != "a" || d.Reason != ReasonPersistence {
				t.Errorf("a persistence entry on a (weight 0): %v (%v), want kept", names(c0, d), d.Reason)
			}
		})
	}
	// Every service at weight 0: new requests have no service.
	c := mustConfig(t, `{"lbMethod":"ROUNDROBIN","services":[{"name":"a","address":"10.0.0.1:80","weight":0}]}`)
	if d := NewBalancer(c, 7).Decide(&Request{}, epoch); d.Reason != ReasonNoService {
		t.Errorf("all weights 0: %v, want no service", d.Reason)
	}
}

// TestSessionCookieAttributes: a session cookie has no Max-Age; a
// permanent one Max-Age = absoluteTimeout; the attributes are the
// configured ones.
func TestSessionCookieAttributes(t *testing.T) {
	_, b := sessionBalancer(t, pool("URLHASH", 2, `"session":{"type":"cookie","name":"sid","path":"/shop","domain":"example.com","secure":true,"sameSite":"None","lifetime":"permanent","absoluteTimeout":"2h","idleTimeout":"20m"}`), testSessionKey, 1)
	r := Request{Target: "/"}
	d := b.Decide(&r, epoch)
	sc := string(b.AppendSetCookie(nil, &d, epoch))
	pair, attrs := cookieOf(t, sc)
	if !strings.HasPrefix(pair, "sid=") || len(pair) != len("sid=")+sessionValueLen {
		t.Errorf("Set-Cookie %q: want sid=<%d characters>", sc, sessionValueLen)
	}
	want := map[string]string{"Path": "/shop", "Domain": "example.com", "Max-Age": "7200", "Secure": "", "HttpOnly": "", "SameSite": "None"}
	if fmt.Sprint(attrs) != fmt.Sprint(want) {
		t.Errorf("Set-Cookie %q: attributes %v, want %v", sc, attrs, want)
	}
	_, s := sessionBalancer(t, pool("URLHASH", 2, `"session":{"type":"cookie"}`), testSessionKey, 1)
	d = s.Decide(&r, epoch)
	sc = string(s.AppendSetCookie(nil, &d, epoch))
	if _, attrs := cookieOf(t, sc); attrs["Max-Age"] != "" || attrs["Expires"] != "" || attrs["Path"] != "/" || !hasKey(attrs, "HttpOnly") || hasKey(attrs, "Secure") || hasKey(attrs, "SameSite") {
		t.Errorf("default session cookie %q: want Path=/ and HttpOnly only", sc)
	}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// TestSessionRefreshMaxAge: a permanent cookie re-issued for the idle
// refresh carries what is left of absoluteTimeout.
func TestSessionRefreshMaxAge(t *testing.T) {
	_, b := sessionBalancer(t, pool("URLHASH", 2, `"session":{"type":"cookie","lifetime":"permanent","absoluteTimeout":"2h","idleTimeout":"1h"}`), testSessionKey, 1)
	r := Request{Target: "/"}
	_, v := issue(t, b, &r, epoch)
	d := b.Decide(withCookie(r, "hashlb-session", v), epoch.Add(30*time.Minute))
	if !d.Refreshes() {
		t.Fatalf("30 minutes after the last use (idle 1h): %v, want a refresh", d.Session)
	}
	if _, attrs := cookieOf(t, string(b.AppendSetCookie(nil, &d, epoch.Add(30*time.Minute)))); attrs["Max-Age"] != "5400" {
		t.Errorf("refreshed Max-Age %q, want 5400 (2h - 30m)", attrs["Max-Age"])
	}
}

// TestSessionHeader: a header session reads the named header (any case),
// its first copy only.
func TestSessionHeader(t *testing.T) {
	c, b := sessionBalancer(t, pool("ROUNDROBIN", 4, `"session":{"type":"header","name":"X-Session"}`), testSessionKey, 1)
	if c.Session.Name != "x-session" {
		t.Errorf("header name %q, want lower case", c.Session.Name)
	}
	r := Request{}
	d, v := issue(t, b, &r, epoch)
	for range 20 {
		got := b.Decide(&Request{Headers: [][2]string{{"X-Session", v}, {"x-session", "junk"}}}, epoch)
		if got.Session != SessionValid || got.At(0) != d.At(0) {
			t.Fatalf("header session: %v on %s, want %s", got.Session, first(c, got), first(c, d))
		}
	}
	// A cookie of that name is not a header session.
	if got := b.Decide(withCookie(r, "x-session", v), epoch); got.Session != SessionAbsent {
		t.Errorf("a cookie x-session under a header session: %v, want absent", got.Session)
	}
}

// TestSessionKeyRequired: without a key, or with a short one, the
// session cannot start.
func TestSessionKeyRequired(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 2, `"session":{"type":"cookie"}`))
	for _, key := range []string{"", "short", strings.Repeat("k", MinSessionKeyBytes-1)} {
		if err := NewBalancer(c, 1).EnableSession([]byte(key), ""); err == nil || !strings.Contains(err.Error(), SessionKeyEnv) {
			t.Errorf("key of %d bytes: %v, want an error naming %s", len(key), err, SessionKeyEnv)
		}
	}
	if err := NewBalancer(c, 1).EnableSession([]byte(strings.Repeat("k", MinSessionKeyBytes)), ""); err != nil {
		t.Error(err)
	}
}

// TestSessionConfigErrors: what the session block refuses, each error
// naming the field.
func TestSessionConfigErrors(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{`"session":{}`, "session.type: is required"},
		{`"session":{"type":"cookie","sameSite":"None"}`, "session.sameSite: None needs secure true"},
		{`"session":{"type":"cookie","absoluteTimeout":"1h","idleTimeout":"2h"}`, `session.idleTimeout: "2h" is longer than absoluteTimeout "1h"`},
		{`"session":{"type":"cookie","path":"/a;b"}`, `session.path: "/a;b" has`},
		{`"session":{"type":"cookie","path":"a"}`, `session.path: "a" is not an absolute path`},
		{`"session":{"type":"cookie","name":"a b"}`, `session.name: "a b" is not a valid`},
		{`"session":{"type":"cookie","domain":"a;b"}`, `session.domain: "a;b" is not a domain`},
		{`"session":{"type":"header","path":"/"}`, "session.path: is a cookie attribute, and type is header"},
		{`"session":{"type":"header","name":"x-hashlb-service"}`, `session.name: "x-hashlb-service" is serviceHeader`},
		{`"session":{"type":"header","name":"Cookie"}`, `session.name: "cookie" is a header`},
		{`"session":{"type":"cookie","name":"sid"},"persistence":{"keys":["${request.cookie.sid}"]}`, `persistence.keys[0]: "${request.cookie.sid}" reads the session's cookie "sid"`},
		{`"session":{"type":"header","name":"x-s"},"persistence":{"keys":["${request.header.x-s}"]}`, `reads the session's header "x-s"`},
		{`"session":{"type":"cookie"},"filterType":"network","lbMethod":"SOURCEIPHASH"`, "session: not served by the network filter (filterType network): it needs HTTP request and response headers"},
		{`"session":{"type":"cookie","clockSkew":"2h"}`, `session.clockSkew: "2h" is out of range [10s, 1h]`},
		{`"session":{"type":"cookie","clockSkew":"1s"}`, `session.clockSkew: "1s" is out of range [10s, 1h]`},
	} {
		js := pool("URLHASH", 2, tc.extra)
		if strings.Contains(tc.extra, `"lbMethod"`) {
			js = strings.Replace(js, `"lbMethod":"URLHASH",`, "", 1)
		}
		_, err := ParseConfig([]byte(js))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.extra, err, tc.want)
		}
	}
}

// TestStripSessionCookie: the session's cookies leave the Cookie line, the
// others stay, in order.
func TestStripSessionCookie(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"a=1; sid=x; b=2", "a=1; b=2"},
		{"sid=x", ""},
		{"sid=x;sid=y; c=3", "c=3"},
		{" sid = x ;a=1", "a=1"},
		{"a=1; sidx=2; xsid=3", "-"},
		{"", "-"},
	} {
		got, found := StripSessionCookie([]byte("prefix:"), tc.in, "sid")
		if tc.out == "-" {
			if found || string(got) != "prefix:" {
				t.Errorf("%q: found %v, %q; want not found, dst unchanged", tc.in, found, got)
			}
			continue
		}
		if !found || string(got) != "prefix:"+tc.out {
			t.Errorf("%q: %q (found %v), want %q", tc.in, got, found, tc.out)
		}
	}
}

// TestSessionAllocatesNothing: deciding with a valid, a forged, an
// expired and no session, and writing the Set-Cookie, allocate nothing.
func TestSessionAllocatesNothing(t *testing.T) {
	for _, method := range []string{"URLHASH", "ROUNDROBIN", "SOURCEIPHASH"} {
		_, b := sessionBalancer(t, pool(method, 16, sessionPool4+`, "persistence": {"keys": ["${client.ip}"]}`), testSessionKey, 1)
		b.EnablePersistence(NewMemStore(), "x")
		r := Request{Target: "/a", Source: "10.1.1.1:5000"}
		_, v := issue(t, b, &r, epoch)
		buf := make([]byte, 0, 256)
		for name, req := range map[string]*Request{
			"valid":   withCookie(r, "hashlb-session", v),
			"forged":  withCookie(r, "hashlb-session", "A"+v[1:]),
			"garbage": withCookie(r, "hashlb-session", strings.Repeat("x", 300)),
			"none":    &r,
		} {
			var d Decision
			for _, now := range []time.Time{epoch.Add(time.Minute), epoch.Add(2 * time.Hour)} {
				b.DecideInto(&d, req, now)
				if n := testing.AllocsPerRun(20, func() {
					b.DecideInto(&d, req, now)
					buf = b.AppendSetCookie(buf[:0], &d, now)
				}); n > 0 {
					t.Errorf("%s, %s session at %v: %.0f allocations per decision, want 0", method, name, now.Sub(epoch), n)
				}
			}
		}
	}
}

// BenchmarkSession: a decision with a valid session, with a forged one and
// without one (round robin decides), and writing a Set-Cookie.
func BenchmarkSession(b *testing.B) {
	_, bal := sessionBalancer(b, pool("ROUNDROBIN", 16, `"session": {"type": "cookie", "idleTimeout": "10m"}`), testSessionKey, 1)
	r := Request{Target: "/a"}
	_, v := issue(b, bal, &r, epoch)
	var d Decision
	for _, c := range []struct {
		name string
		r    *Request
	}{{"none", &r}, {"valid", withCookie(r, "hashlb-session", v)}, {"forged", withCookie(r, "hashlb-session", "A"+v[1:])}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				bal.DecideInto(&d, c.r, epoch)
			}
		})
	}
	buf := make([]byte, 0, 256)
	b.Run("set-cookie", func(b *testing.B) {
		bal.DecideInto(&d, &r, epoch)
		for range b.N {
			buf = bal.AppendSetCookie(buf[:0], &d, epoch)
		}
	})
}
