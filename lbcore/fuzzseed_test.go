package lbcore

import (
	"strings"
	"testing"

	"github.com/hashlb/hashlb/internal/hostile"
)

// hostileExprs are the expressions FuzzExpr evaluates the hostile corpus
// with: every function that reads request bytes.
var hostileExprs = []string{
	`${request.header.authorization|jwt("sub")||request.cookie.session|jwt("sub")}`,
	`${request.path|replace("a.*b|a","x")}-${request.cookie.session|replace("(a)(b)?","$2$1")}`,
	`${client.ip|mask(24)}${request.query.user|suffix(8)}${sip.callid|hash}${request.host|lower}`,
}

// hostileFields splits a hostile request into its path, authority and the
// other headers.
func hostileFields(r hostile.Request) (path, auth string, rest [][2]string) {
	for _, h := range r.Headers {
		switch h[0] {
		case ":path":
			path = h[1]
		case ":authority":
			auth = h[1]
		case ":method", ":scheme":
		default:
			rest = append(rest, h)
		}
	}
	return path, auth, rest
}

// addHostileExprSeeds and addHostileRequestSeeds seed FuzzExpr and
// FuzzRequest with the hostile corpus (internal/hostile): its requests run as
// ordinary tests on every go test, and the fuzzers start from them.
func addHostileExprSeeds(f *testing.F) {
	for _, r := range hostile.Requests() {
		path, auth, rest := hostileFields(r)
		// exprFuzzRequest's layout: NUL-separated fields, pairs are headers;
		// fields 1–5 are also dest, target, authority, method and source.
		fields := []string{"x-a", r.Dest, path, auth, "GET", r.Source}
		for _, h := range rest[:min(len(rest), 3)] {
			fields = append(fields, h[0], h[1])
		}
		data := []byte(strings.Join(fields, "\x00"))
		for _, e := range hostileExprs {
			f.Add(e, data)
		}
	}
}

func addHostileRequestSeeds(f *testing.F) {
	for _, r := range hostile.Requests() {
		path, auth, rest := hostileFields(r)
		if len(rest) == 0 {
			rest = [][2]string{{"x-none", ""}}
		}
		for _, h := range rest[:min(len(rest), 2)] {
			f.Add(path, auth, r.Source, r.Dest, h[0], h[1])
		}
	}
}
