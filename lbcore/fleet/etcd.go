package fleet

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"unsafe"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/tidwall/gjson"
)

// The codec of etcd's JSON gateway (grpc-gateway over the v3 API, etcd 3.4
// and later), which the Client's calls go to: POST /v3/kv/txn, /v3/kv/range,
// /v3/lease/grant, /v3/lease/timetolive and /v3/auth/authenticate (with
// etcd's auth on), keys and values base64, int64 fields as JSON strings;
// answers use the proto field names (create_revision) or, from some
// gateways, camelCase (createRevision): both are read.

// MaxAnswerBytes is the largest etcd answer the fleet level reads; a larger
// one is a failed call, unread. The largest answer the protocol asks for (a
// txn with one key's range) is under 1 KiB. Etcd answers get
// lbcore.MaxJSONDepth too: every proxy of a fleet reads the same etcd, so
// one hostile answer must not kill them all.
const MaxAnswerBytes = 64 << 10

// etcdKV is one key-value of an etcd answer.
type etcdKV struct {
	Value       string
	ModRevision int64
	Lease       int64
}

// createOrGetRequest is the body of a /v3/kv/txn that creates key with value
// (attached to lease, if not 0) if it does not exist, and else reads it.
func createOrGetRequest(key, value string, lease int64) []byte {
	return appendTxn(nil, []byte(key), 0, []byte(value), lease)
}

// replaceRequest is the body of a /v3/kv/txn that overwrites key with value if
// its mod_revision is still modRevision, and else reads it: every proxy that
// finds the same stale entry moves the key to one new service.
func replaceRequest(key string, modRevision int64, value string, lease int64) []byte {
	return appendTxn(nil, []byte(key), modRevision, []byte(value), lease)
}

// appendTxn appends the body of replaceRequest for modRevision, or of
// createOrGetRequest when it is 0.
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

// rangeRequest is the body of a /v3/kv/range reading key.
func rangeRequest(key string) []byte { return appendRange(nil, []byte(key)) }

func appendRange(b, key []byte) []byte {
	b = append(b, `{"key":"`...)
	b = base64.StdEncoding.AppendEncode(b, key)
	return append(b, `"}`...)
}

// leaseGrantRequest is the body of a /v3/lease/grant for a lease of ttl seconds.
func leaseGrantRequest(ttl int64) []byte { return appendLeaseGrant(nil, ttl) }

func appendLeaseGrant(b []byte, ttl int64) []byte {
	b = append(b, `{"TTL":"`...)
	b = strconv.AppendInt(b, ttl, 10)
	return append(b, `","ID":"0"}`...)
}

// authenticateRequest is the body of a /v3/auth/authenticate for user and
// password; its answer's token goes into the Authorization header of every
// later call.
func authenticateRequest(user, password string) []byte {
	return appendAuthenticate(nil, user, password)
}

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

// parseAuth reads a /v3/auth/authenticate answer: the token.
func parseAuth(body []byte) (token string, err error) {
	if err := answerError(body); err != nil {
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
	errAuthToken  = errors.New("etcd: auth token missing, invalid or expired")
	errAuthFailed = errors.New("etcd: authentication failed: wrong user or password")
	errPermission = errors.New("etcd: permission denied (the user's role lacks read/write on the prefix)")
)

// errLeaseNotFound is etcd's refusal of a put on a lease it does not
// know (expired, or revoked): grant a new one.
var errLeaseNotFound = errors.New("etcd: requested lease not found")

// Answers refused before any parse: gjson's validator and getters recurse
// once per nesting level, and a deep enough answer overflows the engine's
// stack (a trap, which kills the VM).
var (
	errAnswerTooLarge = errors.New("etcd: answer larger than 64 KiB")
	errAnswerTooDeep  = errors.New("etcd: answer nested deeper than 32 levels")
)

// checkAnswer refuses an answer of size bytes, or body, that no parser
// here may read: over MaxAnswerBytes, or nested deeper than
// MaxJSONDepth. It recurses nowhere.
func checkAnswer(body []byte, size int) error {
	if size > MaxAnswerBytes || len(body) > MaxAnswerBytes {
		return errAnswerTooLarge
	}
	if !lbcore.JSONDepthOK(body, lbcore.MaxJSONDepth) {
		return errAnswerTooDeep
	}
	return nil
}

// answerError reads an error answer of the gateway ({"error": …,
// "message": …, "code": …}); nil when the body has none. Every parse of an
// answer starts here, so every answer is checked (checkAnswer) first.
func answerError(body []byte) error {
	if err := checkAnswer(body, len(body)); err != nil {
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
		return errLeaseNotFound
	case strings.Contains(msg, "invalid auth token"), strings.Contains(msg, "user name is empty"),
		strings.Contains(msg, "auth token is expired"), strings.Contains(msg, "revision of auth store is old"):
		return errAuthToken
	case strings.Contains(msg, "authentication failed"):
		return errAuthFailed
	case strings.Contains(msg, "permission denied"):
		return errPermission
	}
	return etcdRefusal(clip(msg))
}

// etcdRefusal is an error answer of etcd's own that none of the cases
// above names: "no leader", "leader changed", "request timed out", "too
// many requests", a full quota. etcd answered, and what it refused for is
// a state of the cluster that the next try may not meet.
type etcdRefusal string

func (e etcdRefusal) Error() string { return "etcd: " + string(e) }

// parseTxn reads a /v3/kv/txn answer of createOrGetRequest or
// replaceRequest: succeeded says the put was done (kv is then the written
// revision), else kv is the key's current value, found false when it has
// none (it expired between the compare and the read, or never existed).
// It reads body in place, with kv.Value decoded into *scratch (when not
// nil; valid until its next use), so that the client reads an answer
// without allocating.
func parseTxn(body []byte, scratch *[]byte) (succeeded bool, kv etcdKV, found bool, err error) {
	if err := answerError(body); err != nil {
		return false, etcdKV{}, false, err
	}
	r := gjson.Parse(bytesString(body))
	if r.Get("succeeded").Bool() {
		rev := r.Get("header.revision").Int()
		if rev == 0 {
			return false, etcdKV{}, false, errTxnNoRevision
		}
		return true, etcdKV{ModRevision: rev}, true, nil
	}
	rr := pick(r.Get("responses.0"), "response_range", "responseRange")
	if !rr.Exists() {
		return false, etcdKV{}, false, errTxnNoRange
	}
	kv, found, err = parseKVs(rr, scratch)
	return false, kv, found, err
}

// parseRange reads a /v3/kv/range answer, as parseTxn reads.
func parseRange(body []byte, scratch *[]byte) (kv etcdKV, found bool, err error) {
	if err := answerError(body); err != nil {
		return etcdKV{}, false, err
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
func parseKVs(r gjson.Result, scratch *[]byte) (etcdKV, bool, error) {
	first := r.Get("kvs.0")
	if !first.Exists() {
		return etcdKV{}, false, nil
	}
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	v, err := base64.StdEncoding.AppendDecode(buf, stringBytes(first.Get("value").Str))
	if err != nil {
		return etcdKV{}, false, errNotBase64
	}
	if scratch != nil {
		*scratch = v
	}
	kv := etcdKV{Value: bytesString(v), ModRevision: pick(first, "mod_revision", "modRevision").Int(),
		Lease: first.Get("lease").Int()}
	if kv.ModRevision == 0 {
		return etcdKV{}, false, errNoModRevision
	}
	return kv, true, nil
}

// parseLease reads a /v3/lease/grant answer.
func parseLease(body []byte) (id int64, err error) {
	if err := answerError(body); err != nil {
		return 0, err
	}
	id = gjson.Get(bytesString(body), "ID").Int()
	if id == 0 {
		return 0, errNoLeaseID
	}
	return id, nil
}

// timeToLiveRequest is the body of a /v3/lease/timetolive for lease id.
func timeToLiveRequest(id int64) []byte {
	return []byte(`{"ID":"` + strconv.FormatInt(id, 10) + `"}`)
}

// parseTimeToLive reads a /v3/lease/timetolive answer: known is false
// for a lease etcd does not have (TTL -1).
func parseTimeToLive(body []byte) (known bool, err error) {
	if err := answerError(body); err != nil {
		return false, err
	}
	ttl := gjson.Get(bytesString(body), "TTL")
	if !ttl.Exists() {
		return false, fleetError("etcd: lease timetolive answer without TTL")
	}
	return ttl.Int() >= 0, nil
}

// pick returns r's field a, or else b.
func pick(r gjson.Result, a, b string) gjson.Result {
	if v := r.Get(a); v.Exists() {
		return v
	}
	return r.Get(b)
}

// clip shortens etcd's message for an error.
func clip(msg string) string {
	if len(msg) > 64 {
		return msg[:61] + "..."
	}
	return msg
}

// bytesString and stringBytes view one as the other without a copy, so that
// an answer is read in place: the caller keeps the bytes unchanged while the
// view lives.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
