package lbcore

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// explainRequests returns n requests that vary every input a method reads,
// some of them without the input of one method or another.
func explainRequests(n int) []Request {
	out := make([]Request, 0, n)
	for i := range n {
		r := Request{Method: "GET"}
		if i%7 != 0 {
			r.Target = fmt.Sprintf("/p/%d?q=%d", i, i*31)
		}
		if i%5 != 0 {
			r.Authority = fmt.Sprintf("h%d.example.com:443", i%23)
		}
		if i%6 != 0 {
			r.Source = fmt.Sprintf("192.0.%d.%d:%d", i%4, i%250+1, 1024+i)
		}
		if i%4 != 0 {
			r.Dest = fmt.Sprintf("198.51.100.%d:443", i%9+1)
		}
		if i%3 != 0 {
			r.Headers = append(r.Headers, [2]string{"call-id", fmt.Sprintf("c%d@pc33.example.com", i)})
		}
		if i%8 != 0 {
			r.Headers = append(r.Headers, [2]string{"x-tenant", fmt.Sprintf("T%d", i%41)})
		}
		out = append(out, r)
	}
	return out
}

// explainPools returns, for a method, the configurations Explain is compared
// with Decide on: uniform and weighted weights, a disabled service, and
// persistence with each emptyKey mode; bounded load off.
func explainPools(method string) []struct{ name, js string } {
	extra := methodSamples[method].extra
	join := func(parts ...string) string {
		var out []string
		for _, p := range parts {
			if p != "" {
				out = append(out, p)
			}
		}
		return strings.Join(out, ",")
	}
	services := func(weighted bool) string {
		var b strings.Builder
		b.WriteString(`"services":[`)
		for i := range 6 {
			if i > 0 {
				b.WriteByte(',')
			}
			w := 1
			if weighted {
				w = i%3*20 + 1
			}
			fmt.Fprintf(&b, `{"name":"s%d","address":"10.0.0.%d:80","weight":%d,"enabled":%v}`, i, i+1, w, i != 4)
		}
		b.WriteString("]")
		return b.String()
	}
	return []struct{ name, js string }{
		{"uniform", "{" + join(fmt.Sprintf(`"lbMethod":%q`, method), extra, `"upstreamCount":3`, services(false)) + "}"},
		{"weighted", "{" + join(fmt.Sprintf(`"lbMethod":%q`, method), extra, `"upstreamCount":4`, `"backupLBMethod":"ROUNDROBIN"`, services(true)) + "}"},
		{"one name", "{" + join(fmt.Sprintf(`"lbMethod":%q`, method), extra, services(false)) + "}"},
		{"persistence skip", "{" + join(fmt.Sprintf(`"lbMethod":%q`, method), extra, `"upstreamCount":2`,
			`"persistence":{"keys":["${request.header.x-tenant}","${request.cookie.s}"]}`, services(true)) + "}"},
		{"persistence shared", "{" + join(fmt.Sprintf(`"lbMethod":%q`, method), extra, `"upstreamCount":3`,
			`"persistence":{"keys":["${request.header.x-tenant}"],"emptyKey":"shared"}`, services(false)) + "}"},
	}
}

// TestExplainAgreesWithDecide: for every method, Explain's decision (choice,
// failover order, reason, chooser, persistence outcome) is Decide's for the
// same request, on a twin Balancer and on the Balancer itself right after
// Explain, which Explain leaves as it was; its ranking is Decide's order.
func TestExplainAgreesWithDecide(t *testing.T) {
	reqs := explainRequests(400)
	for _, m := range Methods() {
		for _, pc := range explainPools(m) {
			t.Run(m+"/"+pc.name, func(t *testing.T) {
				c := mustConfig(t, pc.js)
				fresh := func() *Balancer {
					b := NewBalancer(c, 7)
					b.SetDown(1, true)
					b.EnablePersistence(NewMemStore(), "t")
					return b
				}
				b, twin := fresh(), fresh()
				for i := range reqs {
					r := reqs[i]
					if c.Persistence != nil { // an empty table for every request, as Explain assumes
						b, twin = fresh(), fresh()
					}
					e := b.Explain(&r, epoch)
					d := b.Decide(&r, epoch)
					dt := twin.Decide(&r, epoch)
					got, want := names(c, e.Decision), names(c, dt)
					if !slices.Equal(got, want) || e.Decision.Reason != dt.Reason || e.Decision.Method != dt.Method ||
						e.Decision.Persist != dt.Persist || e.Decision.EmptyKey != dt.EmptyKey {
						t.Fatalf("request %d: Explain(%+v) decides %v (%v by %v, %+v), Decide %v (%v by %v, %+v)", i, r,
							got, e.Decision.Reason, e.Decision.Method, e.Decision.Persist, want, dt.Reason, dt.Method, dt.Persist)
					}
					if after := names(c, d); !slices.Equal(after, want) || d.Reason != dt.Reason {
						t.Fatalf("request %d: Decide after Explain = %v (%v), on a twin %v (%v): Explain changed the Balancer",
							i, after, d.Reason, want, dt.Reason)
					}
					if !e.HasInput {
						if e.Ranking != nil || e.Key != nil {
							t.Fatalf("request %d: no input, but key %q and %d ranked", i, e.Key, len(e.Ranking))
						}
						continue
					}
					var ranked []string
					for j, rs := range e.Ranking {
						if rs.Rank != 0 {
							if rs.Rank != len(ranked)+1 || rs.State != StateSelectable {
								t.Fatalf("request %d: ranking[%d] = %+v, want rank %d, selectable", i, j, rs, len(ranked)+1)
							}
							ranked = append(ranked, c.Services[rs.Index].Name)
						}
					}
					if len(e.Ranking) != len(c.Services) || len(ranked) != 4 {
						t.Fatalf("request %d: ranking of %d services, %d selectable; want 6 and 4", i, len(e.Ranking), len(ranked))
					}
					if dt.Reason == ReasonHash && !slices.Equal(ranked[:len(want)], want) {
						t.Fatalf("request %d: ranking %v, Decide %v", i, ranked, want)
					}
				}
			})
		}
	}
}

// TestExplain: what an operator reads in the explanation of one request.
func TestExplain(t *testing.T) {
	tests := []struct {
		name      string
		js        string
		req       Request
		down      []int
		hasInput  bool
		key       string
		reason    Reason
		chooser   Method
		ownBackup bool
		worker    bool
		reads     string // Inputs, as %v
	}{
		{"URLHASH cut at hashLength", pool("URLHASH", 3, `"hashLength":5`), Request{Target: "/abcdefgh?x=1"}, nil,
			true, "/abcd", ReasonHash, MethodURLHash, true, false, "{true false false false false [] false}"},
		{"URLHASH without a URL: its own round robin", pool("URLHASH", 3, ""), Request{}, nil,
			false, "", ReasonBackup, MethodRoundRobin, true, true, "{true false false false false [] false}"},
		{"DOMAINHASH lower-cased, port and dot removed", pool("DOMAINHASH", 3, ""), Request{Target: "/", Authority: "Img.Example.COM.:443"}, nil,
			true, "img.example.com", ReasonHash, MethodDomainHash, false, false, "{false true false false false [host] false}"},
		{"SOURCEIPHASH masked", pool("SOURCEIPHASH", 3, `"netmask":"255.255.255.0"`), Request{Source: "192.0.2.77:5000"}, nil,
			true, "\x04\xc0\x00\x02\x00", ReasonHash, MethodSourceIPHash, false, false, "{false false false true false [] false}"},
		{"SOURCEIPHASH behind a proxy without x-forwarded-for", pool("SOURCEIPHASH", 3, `"trustedForwardedHops":1`), Request{Source: "192.0.2.77:5000"}, nil,
			false, "", ReasonBackup, MethodLeastConnection, false, true, "{false false false false false [x-forwarded-for] true}"},
		{"TOKEN from a JWT claim", pool("TOKEN", 3, `"token":"${request.header.authorization|jwt(\"sub\")}"`),
			Request{Headers: [][2]string{{"authorization", jwtWith(`{"sub":"alice"}`)}}}, nil,
			true, "alice", ReasonHash, MethodTokenHash, false, false, "{false false false false false [authorization] false}"},
		{"TOKEN empty: backupLBMethod", pool("TOKEN", 3, `"token":"${request.header.x-t}","backupLBMethod":"ROUNDROBIN"`), Request{}, nil,
			false, "", ReasonBackup, MethodRoundRobin, false, true, "{false false false false false [x-t] false}"},
		{"ROUNDROBIN has no input", pool("ROUNDROBIN", 3, ""), Request{Target: "/"}, nil,
			false, "", ReasonRoundRobin, MethodRoundRobin, false, true, "{false false false false false [] false}"},
		{"everything DOWN", pool("URLHASH", 2, ""), Request{Target: "/x"}, []int{0, 1},
			true, "/x", ReasonNoService, MethodURLHash, true, false, "{true false false false false [] false}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustConfig(t, tt.js)
			b := NewBalancer(c, 0)
			for _, i := range tt.down {
				b.SetDown(i, true)
			}
			e := b.Explain(&tt.req, epoch)
			if e.HasInput != tt.hasInput || string(e.Key) != tt.key {
				t.Errorf("Explain: input %v, key %q; want %v, %q", e.HasInput, e.Key, tt.hasInput, tt.key)
			}
			if tt.hasInput && e.KeyHash != xxhashString(tt.key) {
				t.Errorf("Explain: key hash %x, want xxhash64(%q) = %x", e.KeyHash, tt.key, xxhashString(tt.key))
			}
			if e.Decision.Reason != tt.reason || e.Decision.Method != tt.chooser {
				t.Errorf("Explain: %v by %v, want %v by %v", e.Decision.Reason, e.Decision.Method, tt.reason, tt.chooser)
			}
			if e.OwnBackup != tt.ownBackup || e.WorkerState != tt.worker {
				t.Errorf("Explain: own backup %v, worker state %v; want %v, %v", e.OwnBackup, e.WorkerState, tt.ownBackup, tt.worker)
			}
			if got := fmt.Sprint(e.Reads); got != tt.reads {
				t.Errorf("Explain: reads %s, want %s", got, tt.reads)
			}
		})
	}
}

// TestExplainCitrixFailover: the Citrix example as Explain shows it: S1 DOWN
// keeps its place at the top of the ranking, marked, and S2 is chosen.
func TestExplainCitrixFailover(t *testing.T) {
	c := mustConfig(t, `{"lbMethod":"URLHASH","upstreamCount":3,"services":[
		{"name":"S1","address":"192.0.2.1:80"},{"name":"S2","address":"192.0.2.2:80"},{"name":"S3","address":"192.0.2.3:80","enabled":false}]}`)
	b := NewBalancer(c, 0)
	var url string
	for i := 0; url == ""; i++ {
		u := fmt.Sprintf("/h1/%d", i)
		e := b.Explain(&Request{Target: u}, epoch)
		if e.Ranking[0].Index == 0 && e.Ranking[1].Index == 1 {
			url = u
		}
	}
	b.SetDown(0, true)
	e := b.Explain(&Request{Target: url}, epoch)
	var got []string
	for _, rs := range e.Ranking {
		got = append(got, fmt.Sprintf("%s:%d:%v", c.Services[rs.Index].Name, rs.Rank, rs.State))
	}
	if want := []string{"S1:0:DOWN", "S2:1:selectable", "S3:0:disabled"}; !slices.Equal(got, want) {
		t.Errorf("Explain(%q) ranking = %v, want %v", url, got, want)
	}
	if got := names(c, e.Decision); !slices.Equal(got, []string{"S2"}) {
		t.Errorf("Explain(%q) decides %v, want [S2]", url, got)
	}
}

// TestExplainPersistence: the key the request builds, and whether an empty
// table would store the choice; the Balancer's own table is not touched.
func TestExplainPersistence(t *testing.T) {
	keys := `"persistence":{"keys":["${client.ip}","${request.header.x-id}"],"emptyKey":%q}`
	tests := []struct {
		name     string
		emptyKey string
		req      Request
		key      string
		empty    bool
		stored   bool
	}{
		{"both keys", "skip", Request{Source: "192.0.2.7:1000", Headers: [][2]string{{"x-id", "42"}}}, "192.0.2.7\x1f42", false, true},
		{"one key empty", "skip", Request{Source: "192.0.2.7:1000"}, "192.0.2.7\x1f", false, true},
		{"every key empty, skip", "skip", Request{}, "\x1f", true, false},
		{"every key empty, shared", "shared", Request{}, "\x1f", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustConfig(t, pool("URLHASH", 3, fmt.Sprintf(keys, tt.emptyKey)))
			st := NewMemStore()
			b := NewBalancer(c, 0)
			b.EnablePersistence(st, "t")
			e := b.Explain(&tt.req, epoch)
			p := e.Persistence
			if p == nil || string(p.Key) != tt.key || p.Empty != tt.empty || p.Stored != tt.stored {
				t.Fatalf("Explain(%+v).Persistence = %+v, want key %q, empty %v, stored %v", tt.req, p, tt.key, tt.empty, tt.stored)
			}
			if st.Len() != 0 {
				t.Errorf("Explain wrote %d keys to the Balancer's store", st.Len())
			}
		})
	}
}

// TestExplainCapped: an input cut by a cap is reported.
func TestExplainCapped(t *testing.T) {
	c := mustConfig(t, pool("TOKEN", 3, `"token":"${request.header.x-id}"`))
	r := Request{Headers: [][2]string{{"x-id", strings.Repeat("v", MaxValueBytes+1)}}}
	e := NewBalancer(c, 0).Explain(&r, epoch)
	if !e.Decision.Capped || len(e.Key) != MaxValueBytes {
		t.Errorf("Explain(a %d-byte token).Decision.Capped = %v, key of %d bytes; want true, %d", MaxValueBytes+1,
			e.Decision.Capped, len(e.Key), MaxValueBytes)
	}
}
