package lbcore

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"
)

// Fleet-wide persistence (docs/persistence.md#fleet-wide-persistence-through-etcd).
//
// One etcd key per persistence key: Fleet.Prefix, then the key's xxhash64 in
// 16 hex digits (the local table's fingerprint: fixed size, and no client data
// in etcd). Its value is a FleetRecord, "<stamp> <service>": the Unix second
// of its last refresh and the service's identity (hashId, else address), so
// that etcdctl shows which service a key went to.
//
// Time is cut into slots of FleetSlot(expire). An entry is alive while
// now − stamp ≤ expire + slot; a proxy that uses a key in a slot later than
// its previous use refreshes the stamp (once per slot and proxy), so after
// its last use anywhere an entry lives at least expire and at most
// expire + slot. etcd forgets it later still, through a lease per slot
// (FleetLeaseTTL): the lease is etcd's garbage collector, the stamp the
// rule, so expiry follows the proxies' clocks (and a test's virtual one).
//
// The calls go to etcd's JSON gateway (grpc-gateway over the v3 API, etcd
// 3.4 and later): POST /v3/kv/txn, /v3/kv/range, /v3/lease/grant and
// /v3/auth/authenticate (with etcd's auth on), keys and
// values base64, int64 fields as JSON strings; answers use the proto field
// names (create_revision) or, from some gateways, camelCase (createRevision):
// both are read.

// FleetPrefix is the start of every etcd key of a table: f.Prefix, or
// "/hashlb/<rootID>/" when it is not set.
func FleetPrefix(f *Fleet, rootID string) string {
	if f.Prefix != "" {
		return f.Prefix
	}
	return "/hashlb/" + rootID + "/"
}

// FleetSlot is the refresh slot for entries that expire after expire.
func FleetSlot(expire time.Duration) time.Duration { return max(expire/8, time.Second) }

// FleetKey is the etcd key of persistence key key under prefix.
func FleetKey(prefix string, key []byte) string {
	return string(appendFleetKey(nil, prefix, PersistKeyHash(key)))
}

// appendFleetKey appends the etcd key under prefix of the persistence key
// whose PersistKeyHash is h.
func appendFleetKey(dst []byte, prefix string, h uint64) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, prefix...)
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(h>>shift)&15])
	}
	return dst
}

// FleetRecord is the value of a fleet entry.
type FleetRecord struct {
	// Stamp is the Unix second of the entry's creation or last refresh.
	Stamp int64
	// Service is the service's identity: its hashId, or else its address.
	Service string
}

// String encodes the record as stored in etcd.
func (r FleetRecord) String() string { return string(appendRecord(nil, r.Stamp, r.Service)) }

func appendRecord(dst []byte, stamp int64, service string) []byte {
	return append(append(strconv.AppendInt(dst, stamp, 10), ' '), service...)
}

// ParseFleetRecord decodes a stored record; ok is false for any other shape
// (which the caller treats as an entry to replace).
func ParseFleetRecord(v string) (r FleetRecord, ok bool) {
	stamp, svc, found := strings.Cut(v, " ")
	n, ok := parseStamp(stamp)
	if !found || !ok || svc == "" {
		return FleetRecord{}, false
	}
	return FleetRecord{Stamp: n, Service: svc}, true
}

// parseStamp reads a non-negative decimal of at most 18 digits (strconv's
// errors allocate, and a record is read on every answer).
func parseStamp(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// Alive reports whether the record still holds at now for entries that
// expire after expire.
func (r FleetRecord) Alive(now time.Time, expire time.Duration) bool {
	return now.Unix()-r.Stamp <= int64((expire+FleetSlot(expire))/time.Second)
}

// FleetSlotOf numbers the slot of Unix second t.
func FleetSlotOf(t int64, expire time.Duration) int64 {
	return t / int64(FleetSlot(expire)/time.Second)
}

// FleetLeaseTTL is the TTL, in seconds, of the lease that entries written
// during slot k are attached to, granted at Unix second granted (in slot k or
// before it): it outlives every stamp of slot k by expire + slot, plus a
// minute for clocks that disagree.
func FleetLeaseTTL(k, granted int64, expire time.Duration) int64 {
	s := int64(FleetSlot(expire) / time.Second)
	end := (k + 1) * s
	return end - granted + int64(expire/time.Second) + s + 60
}

// ServiceKey is service i's identity in fleet records: hashId or address.
func (s *Service) ServiceKey() string {
	if s.HashID != "" {
		return s.HashID
	}
	return s.Address
}

// EtcdKV is one key-value of an etcd answer.
type EtcdKV struct {
	Value       string
	ModRevision int64
	Lease       int64
}

// EtcdCreateOrGet is the body of a /v3/kv/txn that creates key with value
// (attached to lease, if not 0) if it does not exist, and else reads it.
func EtcdCreateOrGet(key, value string, lease int64) []byte {
	return appendTxn(nil, []byte(key), 0, []byte(value), lease)
}

// EtcdReplace is the body of a /v3/kv/txn that overwrites key with value if
// its mod_revision is still modRevision, and else reads it: every proxy that
// finds the same stale entry moves the key to one new service.
func EtcdReplace(key string, modRevision int64, value string, lease int64) []byte {
	return appendTxn(nil, []byte(key), modRevision, []byte(value), lease)
}

// appendTxn appends the body of EtcdReplace for modRevision, or of
// EtcdCreateOrGet when it is 0.
func appendTxn(b, key []byte, modRevision int64, value []byte, lease int64) []byte {
	b = append(b, `{"compare":[{"key":"`...)
	b = base64.StdEncoding.AppendEncode(b, key)
	if modRevision == 0 {
		b = append(b, `","target":"CREATE","result":"EQUAL","create_revision":"0"}],"success":[`...)
	} else {
		b = append(b, `","target":"MOD","result":"EQUAL","mod_revision":"`...)
		b = strconv.AppendInt(b, modRevision, 10)
		b = append(b, `"}],"success":[`...)
	}
	b = append(b, `{"request_put":{"key":"`...)
	b = base64.StdEncoding.AppendEncode(b, key)
	b = append(b, `","value":"`...)
	b = base64.StdEncoding.AppendEncode(b, value)
	b = append(b, '"')
	if lease != 0 {
		b = append(b, `,"lease":"`...)
		b = strconv.AppendInt(b, lease, 10)
		b = append(b, '"')
	}
	b = append(b, `}}],"failure":[{"request_range":{"key":"`...)
	b = base64.StdEncoding.AppendEncode(b, key)
	return append(b, `"}}]}`...)
}

// EtcdRange is the body of a /v3/kv/range reading key.
func EtcdRange(key string) []byte { return appendRange(nil, []byte(key)) }

func appendRange(b, key []byte) []byte {
	b = append(b, `{"key":"`...)
	b = base64.StdEncoding.AppendEncode(b, key)
	return append(b, `"}`...)
}

// EtcdLeaseGrant is the body of a /v3/lease/grant for a lease of ttl seconds.
func EtcdLeaseGrant(ttl int64) []byte { return appendLeaseGrant(nil, ttl) }

func appendLeaseGrant(b []byte, ttl int64) []byte {
	b = append(b, `{"TTL":"`...)
	b = strconv.AppendInt(b, ttl, 10)
	return append(b, `","ID":"0"}`...)
}

// EtcdAuthenticate is the body of a /v3/auth/authenticate for user and
// password; its answer's token goes into the Authorization header of every
// later call.
func EtcdAuthenticate(user, password string) []byte { return appendAuthenticate(nil, user, password) }

func appendAuthenticate(b []byte, user, password string) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONQuoted(b, user)
	b = append(b, `,"password":`...)
	b = appendJSONQuoted(b, password)
	return append(b, '}')
}

// appendJSONQuoted appends s as a quoted JSON string (UTF-8 passes through; quotes,
// backslashes and control bytes are escaped).
func appendJSONQuoted(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// ParseEtcdAuth reads a /v3/auth/authenticate answer: the token.
func ParseEtcdAuth(body []byte) (token string, err error) {
	if err := EtcdAnswerError(body); err != nil {
		return "", err
	}
	token = gjson.GetBytes(body, "token").String()
	if token == "" || !visibleASCII(token) {
		return "", errors.New("etcd: authenticate answer without a token")
	}
	return token, nil
}

// visibleASCII reports whether s is printable ASCII without spaces (a safe
// header value).
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Auth errors of etcd: a token that etcd no longer accepts (expired, etcd
// restarted, or none sent) is renewed by authenticating again; wrong
// credentials are not.
var (
	ErrEtcdAuthToken  = errors.New("etcd: auth token missing, invalid or expired")
	ErrEtcdAuthFailed = errors.New("etcd: authentication failed: wrong user or password")
	ErrEtcdPermission = errors.New("etcd: permission denied (the user's role lacks read/write on the prefix)")
)

// ErrEtcdLeaseNotFound is etcd's refusal of a put on a lease it does not
// know (expired, or revoked): grant a new one.
var ErrEtcdLeaseNotFound = errors.New("etcd: requested lease not found")

// Answers refused before any parse: gjson's validator and getters recurse
// once per nesting level, and a deep enough answer overflows the engine's
// stack (a trap, which kills the VM).
var (
	ErrEtcdAnswerTooLarge = errors.New("etcd: answer larger than 64 KiB")
	ErrEtcdAnswerTooDeep  = errors.New("etcd: answer nested deeper than 32 levels")
)

// CheckEtcdAnswer refuses an answer of size bytes, or body, that no parser
// here may read: over MaxEtcdAnswerBytes, or nested deeper than
// MaxJSONDepth. It recurses nowhere.
func CheckEtcdAnswer(body []byte, size int) error {
	if size > MaxEtcdAnswerBytes || len(body) > MaxEtcdAnswerBytes {
		return ErrEtcdAnswerTooLarge
	}
	if !jsonDepthOK(body, MaxJSONDepth) {
		return ErrEtcdAnswerTooDeep
	}
	return nil
}

// EtcdAnswerError reads an error answer of the gateway ({"error": …,
// "message": …, "code": …}); nil when the body has none. Every parse of an
// answer starts here, so every answer is checked (CheckEtcdAnswer) first.
func EtcdAnswerError(body []byte) error {
	if err := CheckEtcdAnswer(body, len(body)); err != nil {
		return err
	}
	// Read in place (ParseBytes copies the body): every string kept from
	// it below is a copy.
	js := bytesString(body)
	if !gjson.Valid(js) {
		return errors.New("etcd: answer is not JSON")
	}
	r := gjson.Parse(js)
	msg := r.Get("message").String()
	if msg == "" {
		msg = r.Get("error").String()
	}
	switch {
	case msg == "":
		return nil
	case strings.Contains(msg, "lease not found"):
		return ErrEtcdLeaseNotFound
	case strings.Contains(msg, "invalid auth token"), strings.Contains(msg, "user name is empty"),
		strings.Contains(msg, "auth token is expired"), strings.Contains(msg, "revision of auth store is old"):
		return ErrEtcdAuthToken
	case strings.Contains(msg, "authentication failed"):
		return ErrEtcdAuthFailed
	case strings.Contains(msg, "permission denied"):
		return ErrEtcdPermission
	}
	return errors.New("etcd: " + clip(msg))
}

// ParseEtcdTxn reads a /v3/kv/txn answer of EtcdCreateOrGet or EtcdReplace:
// succeeded says the put was done (kv is then the written revision), else
// kv is the key's current value, found false when it has none (it expired
// between the compare and the read, or never existed).
func ParseEtcdTxn(body []byte) (succeeded bool, kv EtcdKV, found bool, err error) {
	return parseEtcdTxn(body, nil)
}

// parseEtcdTxn is ParseEtcdTxn reading body in place, with kv.Value decoded
// into *scratch (when not nil; valid until its next use), so that the client
// reads an answer without allocating.
func parseEtcdTxn(body []byte, scratch *[]byte) (succeeded bool, kv EtcdKV, found bool, err error) {
	if err := EtcdAnswerError(body); err != nil {
		return false, EtcdKV{}, false, err
	}
	r := gjson.Parse(bytesString(body))
	if r.Get("succeeded").Bool() {
		rev := r.Get("header.revision").Int()
		if rev == 0 {
			return false, EtcdKV{}, false, errTxnNoRevision
		}
		return true, EtcdKV{ModRevision: rev}, true, nil
	}
	rr := pick(r.Get("responses.0"), "response_range", "responseRange")
	if !rr.Exists() {
		return false, EtcdKV{}, false, errTxnNoRange
	}
	kv, found, err = parseKVs(rr, scratch)
	return false, kv, found, err
}

// ParseEtcdRange reads a /v3/kv/range answer.
func ParseEtcdRange(body []byte) (kv EtcdKV, found bool, err error) {
	return parseEtcdRange(body, nil)
}

// parseEtcdRange is ParseEtcdRange as parseEtcdTxn reads.
func parseEtcdRange(body []byte, scratch *[]byte) (kv EtcdKV, found bool, err error) {
	if err := EtcdAnswerError(body); err != nil {
		return EtcdKV{}, false, err
	}
	return parseKVs(gjson.Parse(bytesString(body)), scratch)
}

// Errors of answers that are JSON but not what etcd sends.
var (
	errTxnNoRevision = errors.New("etcd: txn answer without header.revision")
	errTxnNoRange    = errors.New("etcd: txn answer without its range")
	errNotBase64     = errors.New("etcd: value is not base64")
	errNoModRevision = errors.New("etcd: kv without mod_revision")
	errNoLeaseID     = errors.New("etcd: lease grant answer without ID")
)

// parseKVs reads the first kv of r; its value is decoded into *scratch, or
// into new memory when scratch is nil.
func parseKVs(r gjson.Result, scratch *[]byte) (EtcdKV, bool, error) {
	first := r.Get("kvs.0")
	if !first.Exists() {
		return EtcdKV{}, false, nil
	}
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	v, err := base64.StdEncoding.AppendDecode(buf, stringBytes(first.Get("value").Str))
	if err != nil {
		return EtcdKV{}, false, errNotBase64
	}
	if scratch != nil {
		*scratch = v
	}
	kv := EtcdKV{Value: bytesString(v), ModRevision: pick(first, "mod_revision", "modRevision").Int(),
		Lease: first.Get("lease").Int()}
	if kv.ModRevision == 0 {
		return EtcdKV{}, false, errNoModRevision
	}
	return kv, true, nil
}

// ParseEtcdLease reads a /v3/lease/grant answer.
func ParseEtcdLease(body []byte) (id int64, err error) {
	if err := EtcdAnswerError(body); err != nil {
		return 0, err
	}
	id = gjson.Get(bytesString(body), "ID").Int()
	if id == 0 {
		return 0, errNoLeaseID
	}
	return id, nil
}

// pick returns r's field a, or else b.
func pick(r gjson.Result, a, b string) gjson.Result {
	if v := r.Get(a); v.Exists() {
		return v
	}
	return r.Get(b)
}

// ServiceByKey returns the index of the service whose ServiceKey is key.
func (b *Balancer) ServiceByKey(key string) (int, bool) {
	i, ok := b.ids[xxhash.Sum64String(key)]
	if ok && b.services[i].ServiceKey() != key {
		return 0, false
	}
	return i, ok
}

// FleetService is service i's identity in fleet records (ServiceKey).
func (b *Balancer) FleetService(i int) string { return b.services[i].ServiceKey() }
