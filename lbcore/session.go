package lbcore

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// Session configures session persistence: on a response hashlb inserts a
// cookie (or header) naming the chosen service, and a request that brings
// a valid one back goes to that service, whatever the method, the
// persistence table or the weights say, while the service is selectable
// (docs/persistence.md#session-persistence).
//
// Exported whole as part of Config, the parsed configuration that the filter,
// nsconf and hashlb explain read: a field no package outside reads yet
// is exported with its siblings.
type Session struct {
	// Type is SessionCookie or SessionHeader (required).
	Type string
	// Name is the cookie's name, or the header's (lower-case) name
	// (default hashlb-session).
	Name string
	// Path is the cookie's Path attribute (default /).
	Path string
	// Domain is the cookie's Domain attribute; "" leaves it out (host-only cookie).
	Domain string
	// Secure adds the cookie attribute Secure (default false).
	Secure bool
	// HTTPOnly adds the cookie attribute HttpOnly (default true).
	HTTPOnly bool
	// SameSite is the cookie's SameSite attribute, Strict, Lax or None; ""
	// leaves it out.
	SameSite string
	// Lifetime is "session" (no Max-Age: the browser drops the cookie when it
	// closes) or "permanent" (Max-Age = AbsoluteTimeout) (default session).
	Lifetime string
	// AbsoluteTimeout is how long after its issue a session is honoured
	// (default 1d, 1m–365d).
	AbsoluteTimeout time.Duration
	// IdleTimeout, when not 0, ends a session unused that long (1m–365d, at
	// most AbsoluteTimeout); 0: no idle expiry.
	IdleTimeout time.Duration
	// ClockSkew is how far ahead of the proxy's clock a value's signed
	// times may be (default 5m, 10s–1h); further ahead it is refused.
	ClockSkew time.Duration
}

// The session types.
const (
	SessionCookie = "cookie"
	SessionHeader = "header"
)

// The session lifetimes of a cookie.
// Each is exported with the others, whether or not a package outside names
// it.
const (
	LifetimeSession   = "session"
	LifetimePermanent = "permanent"
)

// SessionKeyEnv is the VM's environment variable (Envoy:
// vm_config.environment_variables) that holds the keys sessions are signed
// with: the current key, then up to MaxSessionKeys-1 previous ones, separated
// by SessionKeySep (ParseSessionKeys). Proxies that share a key honour each
// other's sessions.
const SessionKeyEnv = "HASHLB_SESSION_KEY"

// SessionKeySep separates the keys in SessionKeyEnv: "current,previous".
// base64 and hex keys never hold it.
const SessionKeySep = ","

// MaxSessionKeys bounds the keys in SessionKeyEnv, the current one
// included: a value that verifies under none costs one HMAC per key.
const MaxSessionKeys = 4

// MinSessionKeyBytes is the shortest key EnableSession accepts: 32 bytes,
// e.g. the 44 characters of `openssl rand -base64 32`.
const MinSessionKeyBytes = 32

// ParseSessionKeys splits the value of SessionKeyEnv into its keys, the
// current one first. It fails for an empty value, an empty or short key, a
// repeated key and more than MaxSessionKeys keys; the error names the
// position of the key, never its bytes.
func ParseSessionKeys(v []byte) ([][]byte, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("session: no key: set the VM's environment variable %s to a secret of %d bytes or more (the same on every proxy that shares sessions)", SessionKeyEnv, MinSessionKeyBytes)
	}
	var keys [][]byte
	for i, k := range bytes.Split(v, []byte(SessionKeySep)) {
		what := "the key"
		if i > 0 {
			what = fmt.Sprintf("previous key %d", i)
		}
		switch {
		case i >= MaxSessionKeys:
			return nil, fmt.Errorf("session: %s holds more than %d keys (the current one and %d previous)", SessionKeyEnv, MaxSessionKeys, MaxSessionKeys-1)
		case len(k) < MinSessionKeyBytes:
			return nil, fmt.Errorf("session: %s in %s has %d bytes, want %d or more (e.g. openssl rand -base64 32; keys are separated by %q)", what, SessionKeyEnv, len(k), MinSessionKeyBytes, SessionKeySep)
		}
		for j, o := range keys {
			if bytes.Equal(o, k) {
				return nil, fmt.Errorf("session: %s in %s repeats key %d", what, SessionKeyEnv, j)
			}
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// maxSessionName bounds a session's cookie or header name.
const maxSessionName = 128

// sessionRefreshDivisor: a valid session whose last use is older than
// IdleTimeout/sessionRefreshDivisor is re-issued on the response with the
// time of this use, so a client active at least every 90 % of IdleTimeout
// keeps its session (docs/persistence.md#session-persistence).
const sessionRefreshDivisor = 10

// The session value: version, the service's tag, issue and last-use time
// (Unix seconds, big-endian), then the MAC of what precedes it under the
// session's scope (sessionKeys.ctx); base64url without padding. Version 1
// values, whose MAC covered no root_id, are refused as forged.
const (
	sessionVersion = 2
	sessionTagEnd  = 1 + 8
	sessionBody    = sessionTagEnd + 4 + 4 // what the MAC covers
	sessionMACLen  = 16                    // HMAC-SHA256 truncated to 128 bits
	sessionRawLen  = sessionBody + sessionMACLen
	// sessionValueLen is the length of a session value as hashlb writes it.
	sessionValueLen = (sessionRawLen*8 + 5) / 6
)

var sessionB64 = base64.RawURLEncoding

// SessionState is what a request's session value came to.
// Exported as the type of Decision.Session and SessionExplanation.State.
type SessionState uint8

// The session states.
// Each is exported with its type, whether or not a package outside names
// it.
const (
	// SessionOff: the configuration has no session block.
	SessionOff SessionState = iota
	// SessionAbsent: the request carried no session value.
	SessionAbsent
	// SessionValid: a valid session named a selectable service, which
	// was chosen.
	SessionValid
	// SessionForged: the value is not one hashlb wrote with these keys and
	// this scope (malformed, truncated, too long, tampered with, signed with
	// another key, or under another session name or root_id); it selects
	// nothing.
	SessionForged
	// SessionExpired: issued absoluteTimeout ago or more.
	SessionExpired
	// SessionIdle: unused for idleTimeout or more.
	SessionIdle
	// SessionUnknown: signed by hashlb but names no service of this
	// configuration (the service is gone).
	SessionUnknown
	// SessionUnselectable: names a service that is disabled, DOWN or ejected.
	SessionUnselectable
	// SessionFuture: signed with an issue or last-use time more than
	// clockSkew ahead of this proxy's clock; it selects nothing.
	SessionFuture
)

var sessionStateNames = [...]string{"off", "absent", "valid", "forged", "expired", "idle", "unknown_service", "unselectable", "future"}

// String returns the state's name, for example "forged".
func (s SessionState) String() string { return nameOf(sessionStateNames[:], int(s)) }

// SessionStates returns every state's name, in SessionState order.
func SessionStates() []string { return sessionStateNames[:] }

// sessionKeys is what a Balancer needs to check and issue sessions.
type sessionKeys struct {
	cfg  *Session
	keys []sessionKey // the current key first, then the previous ones
	ctx  []byte       // what the MAC covers before the value: domain separation and the scope
	skew int64        // cfg.ClockSkew in seconds
	raw  [sessionRawLen]byte
	sum  [sha256.Size]byte
	out  [sessionValueLen]byte
}

// sessionKey is one key of SessionKeyEnv.
type sessionKey struct {
	mac  hash.Hash      // HMAC-SHA256 with the key; Reset before each use
	tags []uint64       // per service: its tag in a value under this key
	idx  map[uint64]int // tag → service index
}

// EnableSession attaches the keys sessions are signed with (the VM's
// HASHLB_SESSION_KEY, ParseSessionKeys) and the scope they are signed for:
// the plugin's root_id, "" read as "default" as the filter names its shared
// data. It does nothing without a session block, and fails without a usable
// key: without one nobody can tell a session hashlb issued from one a client
// wrote, and a client must never choose its upstream.
//
// The MAC covers the type, the name and the root_id, so a value issued by a
// plugin of another name or root_id is forged here, with the same key and
// services of the same identity (RATIONALE.md, "Session persistence").
func (b *Balancer) EnableSession(keys []byte, rootID string) error {
	s := b.cfg.Session
	if s == nil {
		return nil
	}
	ks, err := ParseSessionKeys(keys)
	if err != nil {
		return err
	}
	if rootID == "" {
		rootID = "default"
	}
	k := &sessionKeys{cfg: s, skew: int64(s.ClockSkew / time.Second)}
	k.ctx = append(append(append([]byte(nil), "hashlb-session\x00"...), s.Type...), 0)
	k.ctx = append(append(k.ctx, s.Name...), 0)
	k.ctx = append(append(k.ctx, rootID...), 0)
	for _, key := range ks {
		sk := sessionKey{mac: hmac.New(sha256.New, key), tags: make([]uint64, len(b.services)), idx: make(map[uint64]int, len(b.services))}
		for i := range b.services {
			sv := &b.services[i]
			id := sv.HashID
			if id == "" {
				id = sv.Address
			}
			// The tag is keyed: a value shows no address, and without the key
			// nobody can tell which service a value names.
			sk.mac.Reset()
			sk.mac.Write([]byte("hashlb-session-service\x00"))
			sk.mac.Write([]byte(id))
			sum := sk.mac.Sum(k.sum[:0])
			t := binary.BigEndian.Uint64(sum)
			if j, dup := sk.idx[t]; dup {
				return fmt.Errorf("session: services %s and %s have the same session tag (a 2^-64 event): change a hashId", b.services[j].Name, sv.Name)
			}
			sk.tags[i], sk.idx[t] = t, i
		}
		// The first Reset of an HMAC keeps its padded key's state, so later
		// ones copy it back (no allocation per request).
		sk.mac.Reset()
		k.keys = append(k.keys, sk)
	}
	b.sess = k
	return nil
}

// sign writes the MAC of k.raw's body under key i into k.sum.
func (k *sessionKeys) sign(i int) []byte {
	m := k.keys[i].mac
	m.Reset()
	m.Write(k.ctx)
	m.Write(k.raw[:sessionBody])
	return m.Sum(k.sum[:0])[:sessionMACLen]
}

// verify returns the index of the key k.raw's MAC verifies under, the
// current key first, or -1.
func (k *sessionKeys) verify() int {
	var mac [sessionMACLen]byte
	copy(mac[:], k.raw[sessionBody:])
	for i := range k.keys {
		if subtle.ConstantTimeCompare(k.sign(i), mac[:]) == 1 {
			return i
		}
	}
	return -1
}

// sessionValue finds the request's session value: the first cookie called
// Name in the cookie headers (the first MaxScanBytes), or the first copy of
// the header Name. ok is false when there is none.
func (s *Session) value(r *Request, x *evalCtx) (v string, ok bool) {
	if s.Type == SessionHeader {
		for _, h := range r.Headers {
			if len(h[0]) == len(s.Name) && strings.EqualFold(h[0], s.Name) {
				return h[1], true
			}
		}
		return "", false
	}
	v, ok, _ = cookieValue(r, s.Name, x)
	return v, ok
}

// sessionDecide checks the request's session. A valid one naming a
// selectable service fills d (ReasonSession) and returns true; otherwise it
// notes in d what the value came to and the method decides.
func (b *Balancer) sessionDecide(d *Decision, r *Request, now time.Time) bool {
	k := b.sess
	d.Session, d.sessSvc = SessionAbsent, -1
	v, ok := k.cfg.value(r, &b.x)
	if !ok {
		return false
	}
	d.Session = SessionForged
	if len(v) != sessionValueLen {
		return false
	}
	// Decoded into the fixed buffer: the length above makes it exactly
	// sessionRawLen bytes, or an error.
	n, err := sessionB64.Decode(k.raw[:], stringBytes(v))
	if err != nil || n != sessionRawLen || k.raw[0] != sessionVersion {
		return false
	}
	ki := k.verify()
	if ki < 0 {
		return false
	}
	d.sessKey = int8(ki)
	tag := binary.BigEndian.Uint64(k.raw[1:sessionTagEnd])
	issued := binary.BigEndian.Uint32(k.raw[sessionTagEnd:])
	last := binary.BigEndian.Uint32(k.raw[sessionTagEnd+4:])
	i, known := k.keys[ki].idx[tag]
	if known {
		d.sessSvc = int32(i)
	}
	nowS := now.Unix()
	// A time a little ahead of this proxy's clock (another proxy's) counts
	// as now; one further ahead than clockSkew was signed by a clock that
	// is wrong, and would otherwise live that much longer.
	if int64(issued) > nowS+k.skew || int64(last) > nowS+k.skew {
		d.Session = SessionFuture
		return false
	}
	age, idle := max(nowS-int64(issued), 0), max(nowS-int64(last), 0)
	switch {
	case age >= int64(k.cfg.AbsoluteTimeout/time.Second):
		d.Session = SessionExpired
		return false
	case k.cfg.IdleTimeout > 0 && idle >= int64(k.cfg.IdleTimeout/time.Second):
		d.Session = SessionIdle
		return false
	case !known:
		d.Session = SessionUnknown
		return false
	case !b.selectable(i):
		d.Session = SessionUnselectable
		return false
	}
	d.Session, d.sessIssued = SessionValid, issued
	// A value signed with a previous key is re-issued with the current
	// one, so removing that key later ends no active session.
	d.sessRefresh = ki > 0 || k.cfg.IdleTimeout > 0 && idle >= max(int64(k.cfg.IdleTimeout/time.Second)/sessionRefreshDivisor, 1)
	d.Reason, d.Method = ReasonSession, b.cfg.LBMethod
	d.add(i)
	if b.want > 1 {
		b.failover(d, r, i)
	}
	return true
}

// explainSession describes r's session for Explain: d is w's decision.
func (b *Balancer) explainSession(r *Request, d *Decision, now time.Time) *SessionExplanation {
	s := b.cfg.Session
	se := &SessionExplanation{Service: d.sessionService(), State: d.Session, Checked: b.sess != nil}
	var x evalCtx
	se.Value, se.Found = s.value(r, &x)
	if !se.Checked {
		se.Service = -1
		return se
	}
	if d.Session != SessionForged && d.Session != SessionAbsent {
		// Signed: the times are those the check read.
		k := b.sess
		sessionB64.Decode(k.raw[:], stringBytes(se.Value))
		se.Issued = time.Unix(int64(binary.BigEndian.Uint32(k.raw[sessionTagEnd:])), 0)
		se.LastUse = time.Unix(int64(binary.BigEndian.Uint32(k.raw[sessionTagEnd+4:])), 0)
		se.Expires = se.Issued.Add(s.AbsoluteTimeout)
		if s.IdleTimeout > 0 {
			se.IdleEnds = se.LastUse.Add(s.IdleTimeout)
		}
	}
	if d.SetsSession() {
		if s.Type == SessionCookie {
			se.Header = [2]string{"set-cookie", string(b.AppendSetCookie(nil, d, now))}
		} else {
			se.Header = [2]string{s.Name, string(b.AppendSessionValue(nil, d, now))}
		}
	}
	return se
}

// SessionKey returns which key of SessionKeyEnv the request's session value
// verified under: 0 the current key, 1 the first previous one, and so on;
// -1 when it carried no value that verified.
func (d *Decision) SessionKey() int { return int(d.sessKey) }

// sessionService returns the index of the service the request's session
// named (also an expired or idle one), or -1 (none, forged, or a service
// the configuration does not have).
func (d *Decision) sessionService() int { return int(d.sessSvc) }

// SetsSession reports whether the response to the request carries a session
// value: the decision names a service and the request had no valid session
// for it, or its session is due for the idle refresh.
func (d *Decision) SetsSession() bool {
	return d.Session != SessionOff && d.n > 0 && !d.Ask && (d.Session != SessionValid || d.sessRefresh)
}

// Refreshes reports whether the response re-issues a valid session (the
// idle refresh, or a value signed with a previous key) rather than starting
// a new one.
func (d *Decision) Refreshes() bool { return d.Session == SessionValid && d.sessRefresh }

// AppendSessionValue appends the session value the response to decision d
// carries (SetsSession) to dst: d's first service, issued now (or when the
// valid session it refreshes was issued), last used now. It allocates
// nothing when dst has room for sessionValueLen bytes.
func (b *Balancer) AppendSessionValue(dst []byte, d *Decision, now time.Time) []byte {
	k := b.sess
	if k == nil || d.n == 0 {
		return dst
	}
	nowS := uint32(max(now.Unix(), 0))
	issued := nowS
	if d.Session == SessionValid {
		issued = d.sessIssued
	}
	k.raw[0] = sessionVersion
	binary.BigEndian.PutUint64(k.raw[1:], k.keys[0].tags[d.ranked[0]])
	binary.BigEndian.PutUint32(k.raw[sessionTagEnd:], issued)
	binary.BigEndian.PutUint32(k.raw[sessionTagEnd+4:], nowS)
	copy(k.raw[sessionBody:], k.sign(0))
	sessionB64.Encode(k.out[:], k.raw[:])
	return append(dst, k.out[:]...)
}

// AppendSetCookie appends the Set-Cookie header value of the response to
// decision d (a cookie session) to dst: name=value and the configured
// attributes, Max-Age for a permanent cookie (absoluteTimeout, or what is
// left of it for a refreshed session).
func (b *Balancer) AppendSetCookie(dst []byte, d *Decision, now time.Time) []byte {
	k := b.sess
	if k == nil || d.n == 0 {
		return dst
	}
	s := k.cfg
	dst = append(append(dst, s.Name...), '=')
	dst = b.AppendSessionValue(dst, d, now)
	dst = append(append(dst, "; Path="...), s.Path...)
	if s.Domain != "" {
		dst = append(append(dst, "; Domain="...), s.Domain...)
	}
	if s.Lifetime == LifetimePermanent {
		left := int64(s.AbsoluteTimeout / time.Second)
		if d.Session == SessionValid {
			left -= max(now.Unix()-int64(d.sessIssued), 0)
		}
		dst = strconv.AppendInt(append(dst, "; Max-Age="...), max(left, 1), 10)
	}
	if s.Secure {
		dst = append(dst, "; Secure"...)
	}
	if s.HTTPOnly {
		dst = append(dst, "; HttpOnly"...)
	}
	if s.SameSite != "" {
		dst = append(append(dst, "; SameSite="...), s.SameSite...)
	}
	return dst
}

// StripSessionCookie appends cookie header line without the cookies called
// name to dst, pairs separated by "; ". found is false, and dst unchanged,
// when the line has no such cookie (the line then goes on as it is).
func StripSessionCookie(dst []byte, line, name string) (out []byte, found bool) {
	start := len(dst)
	rest, first := line, true
	for rest != "" {
		var pair string
		pair, rest, _ = strings.Cut(rest, ";")
		k, _, _ := strings.Cut(pair, "=")
		if strings.TrimSpace(k) == name {
			found = true
			continue
		}
		p := strings.TrimSpace(pair)
		if p == "" {
			continue
		}
		if !first {
			dst = append(dst, "; "...)
		}
		dst, first = append(dst, p...), false
	}
	if !found {
		return dst[:start], false
	}
	return dst, true
}
