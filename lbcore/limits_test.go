package lbcore

import (
	"encoding/base64"
	"strings"
	"testing"
)

// jwtWith builds an unsigned JWT whose payload is the given JSON text.
func jwtWith(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return "Bearer " + enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(payload)) + ".sig"
}

// nested returns {"sub":"u1","x":[[…]]} with the arrays depth deep in total.
func nested(depth int) string {
	return `{"sub":"u1","x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

// TestCaps: every cap of limits.go cuts where it says, deterministically, and
// the decision says it was hit.
func TestCaps(t *testing.T) {
	long := strings.Repeat("a", 16<<10)
	tests := []struct {
		name, expr string
		req        Request
		want       string
		capped     bool
	}{
		{"jwt at the depth limit", `${request.header.authorization|jwt("sub")}`,
			Request{Headers: [][2]string{{"authorization", jwtWith(nested(MaxJSONDepth))}}}, "u1", false},
		{"jwt one level deeper", `${request.header.authorization|jwt("sub")}`,
			Request{Headers: [][2]string{{"authorization", jwtWith(nested(MaxJSONDepth + 1))}}}, "", true},
		{"jwt thousands deep (killed V8 before the cap)", `${request.header.authorization|jwt("sub")}`,
			Request{Headers: [][2]string{{"authorization", jwtWith(strings.Repeat("[", 6000) + strings.Repeat("]", 6000))}}}, "", true},
		{"brackets inside strings do not count", `${request.header.authorization|jwt("sub")}`,
			Request{Headers: [][2]string{{"authorization", jwtWith(`{"sub":"u2","p":"` + strings.Repeat(`[{\"`, 100) + `"}`)}}}, "u2", false},
		{"jwt longer than MaxJWTBytes", `${request.header.authorization|jwt("sub")}`,
			Request{Headers: [][2]string{{"authorization", jwtWith(`{"sub":"u3","pad":"` + strings.Repeat("p", MaxJWTBytes) + `"}`)}}}, "", true},
		{"replace: at most MaxReplacements matches", `${request.path|replace("a","x")}`,
			Request{Target: "/" + long}, "/" + strings.Repeat("x", MaxReplacements) + strings.Repeat("a", MaxReplaceInput-1-MaxReplacements), true},
		{"replace: at most MaxReplaceSteps steps", `${request.path|replace("a.*b|a","x")}`,
			Request{Target: "/" + long}, "/" + strings.Repeat("x", 10) + strings.Repeat("a", MaxReplaceInput-1-10), true}, // the matches the budget allows
		{"replace: input cut at MaxReplaceInput", `${request.path|replace("z","y")}`,
			Request{Target: "/" + strings.Repeat("b", 2000)}, "/" + strings.Repeat("b", MaxReplaceInput-1), true},
		{"replace: within the caps, every match", `${request.path|replace("a(.)","$1")}`,
			Request{Target: "/a1a2a3"}, "/123", false},
		{"variable cut at MaxValueBytes", `${request.header.x-id}`,
			Request{Headers: [][2]string{{"x-id", strings.Repeat("v", MaxValueBytes+5)}}}, strings.Repeat("v", MaxValueBytes), true},
		{"cookie beyond MaxScanBytes is not found", `${request.cookie.s}`,
			Request{Headers: [][2]string{{"cookie", "pad=" + strings.Repeat("p", MaxScanBytes)}, {"cookie", "s=1"}}}, "", true},
		{"cookie in a second line is found", `${request.cookie.s}`,
			Request{Headers: [][2]string{{"cookie", "a=1"}, {"cookie", "s=2"}}}, "2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustConfig(t, pool("TOKEN", 3, `"token":`+quoteJSON(tt.expr)))
			e := c.Token
			r := tt.req
			if got := string(e.appendFresh(nil, &r)); got != tt.want {
				t.Errorf("Eval(%s) = %.80q (%d bytes), want %.80q (%d bytes)", tt.expr, got, len(got), tt.want, len(tt.want))
			}
			r = tt.req
			if d := NewBalancer(c, 1).Decide(&r, epoch); d.Capped != tt.capped {
				t.Errorf("Decide(%s).Capped = %v, want %v", tt.name, d.Capped, tt.capped)
			}
		})
	}
}

func quoteJSON(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func TestJSONDepthOK(t *testing.T) {
	tests := []struct {
		json string
		max  int
		want bool
	}{
		{`{}`, 1, true},
		{`{"a":[1]}`, 1, false},
		{`{"a":[1]}`, 2, true},
		{`"[[[["`, 1, true},
		{`["\"[[["]`, 1, true},
		{`[[]][[]]`, 2, true},
		{strings.Repeat("[", 33), 32, false},
	}
	for _, tt := range tests {
		if got := JSONDepthOK([]byte(tt.json), tt.max); got != tt.want {
			t.Errorf("JSONDepthOK(%q, %d) = %v, want %v", tt.json, tt.max, got, tt.want)
		}
	}
}

// TestExprLimitsRefuse: configurations whose expressions could make one
// request cost more than the limits allow are refused, the error naming the
// field and the limit; the largest accepted of each kind parses.
func TestExprLimitsRefuse(t *testing.T) {
	fns := func(n int) string { return "${request.header.x-t" + strings.Repeat(" | lower", n) + "}" }
	alts := func(n int) string {
		return "${request.header.x-a" + strings.Repeat(" || request.header.x-a", n-1) + "}"
	}
	big := strings.Repeat("[a-z]{0,100}", 9) + "x"
	tests := []struct {
		name, expr, want string // want "" accepts
	}{
		{"big regexp", `${request.header.x-t | replace("` + big + `", "b")}`, "MaxReplaceInsts"},
		{"largest regexp", `${request.header.x-t | replace("` + strings.Repeat("[a-z]{0,50}", 5) + `", "b")}`, ""},
		{"5000 functions", "${request.header.x-t" + strings.Repeat(" | lower | upper", 2500) + "}", "MaxExprBytes"},
		{"too many functions", fns(MaxExprFuncs + 1), "MaxExprFuncs"},
		{"most functions", fns(MaxExprFuncs), ""},
		{"too many alternatives", alts(MaxExprAlts + 1), "MaxExprAlts"},
		{"most alternatives", alts(MaxExprAlts), ""},
		{"alternatives over parts", strings.Repeat(alts(MaxExprAlts/2), 2) + "${client.ip}", "MaxExprAlts"},
		{"too long", "${client.ip}" + strings.Repeat("x", MaxExprBytes), "MaxExprBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(pool("TOKEN", 3, `"token":`+quoteJSON(tt.expr))))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ParseConfig: %v, want it accepted", err)
			case tt.want != "" && err == nil:
				t.Errorf("ParseConfig accepted the expression, want an error naming %s", tt.want)
			case tt.want != "" && (!strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "token")):
				t.Errorf("ParseConfig: %v, want an error naming the field token and %s", err, tt.want)
			}
		})
	}
	// The largest regexp accepted is within a few instructions of the limit.
	if p, err := compileReplace(strings.Repeat("[a-z]{0,50}", 5)); err != nil || len(p.prog.Inst) < MaxReplaceInsts*9/10 {
		t.Errorf("the largest accepted regexp: %v, want one of about %d instructions", err, MaxReplaceInsts)
	}
}
