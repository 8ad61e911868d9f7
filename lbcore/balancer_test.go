package lbcore

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestRankMatchesOracle compares Decide's failover order with a plain sort of
// every selectable service by Score, for weighted and unweighted pools.
func TestRankMatchesOracle(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 40, `"upstreamCount":8`))
	b := NewBalancer(c, 0)
	b.SetDown(3, true)
	one := NewBalancer(mustConfig(t, pool("URLHASH", 40, "")), 0) // the single-pass path
	one.SetDown(3, true)
	for i := 0; i < 2000; i++ {
		url := fmt.Sprintf("/oracle/%d", i)
		k := hashString(url)
		var idx []int
		for j := range c.Services {
			if j != 3 {
				idx = append(idx, j)
			}
		}
		sort.Slice(idx, func(x, y int) bool { return score(k, c.Services[idx[x]].ID) > score(k, c.Services[idx[y]].ID) })
		d := b.Decide(&Request{Target: url}, epoch)
		var got []int
		for j := 0; j < d.Len(); j++ {
			got = append(got, d.At(j))
		}
		if !slices.Equal(got, idx[:8]) {
			t.Fatalf("Decide(%q) = %v, oracle %v", url, got, idx[:8])
		}
		if d1 := one.Decide(&Request{Target: url}, epoch); d1.Len() != 1 || d1.At(0) != idx[0] {
			t.Fatalf("Decide(%q) with upstreamCount 1 = %d, oracle %d", url, d1.At(0), idx[0])
		}
	}
}

func TestBackupMethods(t *testing.T) {
	tests := []struct {
		name       string
		config     string
		req        Request
		wantReason Reason
		wantMethod Method
	}{
		{"URLHASH without URL uses round robin, whatever the backup", pool("URLHASH", 3, `"backupLBMethod":"LEASTCONNECTION"`),
			Request{}, ReasonBackup, MethodRoundRobin},
		{"DOMAINHASH without host uses least connection", pool("DOMAINHASH", 3, ""),
			Request{Target: "/"}, ReasonBackup, MethodLeastConnection},
		{"CALLIDHASH without Call-ID uses configured round robin", pool("CALLIDHASH", 3, `"backupLBMethod":"roundrobin"`),
			Request{}, ReasonBackup, MethodRoundRobin},
		{"SOURCEIPHASH with source", pool("SOURCEIPHASH", 3, ""),
			Request{Source: "192.0.2.1:1"}, ReasonHash, MethodSourceIPHash},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustConfig(t, tt.config)
			d := NewBalancer(c, 0).Decide(&tt.req, epoch)
			if d.Reason != tt.wantReason || d.Method != tt.wantMethod || d.Len() != 1 {
				t.Errorf("Decide = %v/%v (%d services), want %v/%v", d.Reason, d.Method, d.Len(), tt.wantReason, tt.wantMethod)
			}
		})
	}
}

func TestSmoothWeightedRoundRobin(t *testing.T) {
	c := mustConfig(t, `{"lbMethod":"ROUNDROBIN","services":[
		{"name":"a","address":"10.0.0.1:80","weight":5},{"name":"b","address":"10.0.0.2:80"},{"name":"c","address":"10.0.0.3:80"}]}`)
	b := NewBalancer(c, 0)
	var seq []string
	for i := 0; i < 7; i++ {
		seq = append(seq, first(c, b.Decide(&Request{}, epoch)))
	}
	// nginx's smooth weighted round robin over {a:5, b:1, c:1}.
	if want := "a a b a c a a"; strings.Join(seq, " ") != want {
		t.Errorf("round robin sequence = %v, want %s", seq, want)
	}
	b.SetDown(0, true)
	seq = seq[:0]
	for i := 0; i < 4; i++ {
		seq = append(seq, first(c, b.Decide(&Request{}, epoch)))
	}
	if strings.Count(strings.Join(seq, ""), "b") != 2 || strings.Count(strings.Join(seq, ""), "c") != 2 {
		t.Errorf("with a DOWN, round robin = %v, want b and c twice each", seq)
	}
}

func TestLeastConnection(t *testing.T) {
	c := mustConfig(t, `{"lbMethod":"LEASTCONNECTION","upstreamCount":3,"services":[
		{"name":"a","address":"10.0.0.1:80","weight":2},{"name":"b","address":"10.0.0.2:80"},{"name":"c","address":"10.0.0.3:80"}]}`)
	b := NewBalancer(c, 0)
	b.SetActive(0, 3) // 1.5 per weight
	b.SetActive(1, 1)
	b.SetActive(2, 2)
	if got := names(c, b.Decide(&Request{}, epoch)); !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Errorf("least connection order = %v, want [b a c] (loads 1, 1.5, 2)", got)
	}
	// Equal loads spread instead of all going to the first service.
	for i := range 3 {
		b.SetActive(i, 0)
	}
	seen := map[string]int{}
	for i := 0; i < 3000; i++ {
		seen[first(c, b.Decide(&Request{}, epoch))]++
	}
	// Ties are broken by weighted rendezvous: a (weight 2) gets half.
	for _, s := range c.Services {
		want := 3000 * s.Weight / 4
		if seen[s.Name] < want*8/10 || seen[s.Name] > want*12/10 {
			t.Errorf("with equal loads %s got %d of 3000 decisions, want about %d", s.Name, seen[s.Name], want)
		}
	}
}

func TestNoSelectableService(t *testing.T) {
	for _, m := range Methods() {
		extra := `"services":[{"name":"a","address":"10.0.0.1:80","enabled":false},{"name":"b","address":"10.0.0.2:80"}]`
		if m == "TOKEN" {
			extra = `"token":"${request.header.x-t}",` + extra
		} else if e := methodSamples[m].extra; e != "" {
			extra = e + "," + extra
		}
		c := mustConfig(t, fmt.Sprintf(`{"lbMethod":%q,%s}`, m, extra))
		b := NewBalancer(c, 0)
		b.SetDown(1, true)
		r := &Request{Target: "/", Authority: "h", Source: "192.0.2.1:5", Dest: "192.0.2.2:80",
			Headers: [][2]string{{"call-id", "x"}, {"x-t", "y"}}}
		if d := b.Decide(r, epoch); d.Reason != ReasonNoService || d.Len() != 0 {
			t.Errorf("%s with nothing selectable: %v with %d services, want no_service with 0", m, d.Reason, d.Len())
		}
	}
}

func TestUpstreamCountRankOrder(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 5, `"upstreamCount":3`))
	b := NewBalancer(c, 0)
	full := mustConfig(t, pool("URLHASH", 5, `"upstreamCount":5`))
	bf := NewBalancer(full, 0)
	for i := 0; i < 100; i++ {
		r := &Request{Target: fmt.Sprintf("/u/%d", i)}
		got, all := names(c, b.Decide(r, epoch)), names(full, bf.Decide(r, epoch))
		if !slices.Equal(got, all[:3]) {
			t.Fatalf("upstreamCount 3 = %v, want the first three of %v", got, all)
		}
	}
	small := mustConfig(t, pool("URLHASH", 2, `"upstreamCount":8`))
	if d := NewBalancer(small, 0).Decide(&Request{Target: "/"}, epoch); d.Len() != 2 {
		t.Errorf("upstreamCount 8 over 2 services named %d, want 2", d.Len())
	}
}

func TestBoundedLoad(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 4, `"hashBalanceFactor":125,"upstreamCount":4`))
	b := NewBalancer(c, 0)
	r := &Request{Target: "/hot"}
	d := b.Decide(r, epoch)
	hot, second := d.At(0), d.At(1)
	// The hot key's service already carries far more than its share.
	b.SetActive(hot, 10)
	d = b.Decide(r, epoch)
	if d.At(0) != second || d.Reason != ReasonBoundedLoad {
		t.Fatalf("over the bound: chose %s (%v), want its next-ranked %s (bounded_load)",
			c.Services[d.At(0)].Name, d.Reason, c.Services[second].Name)
	}
	if d.At(1) != hot {
		t.Errorf("bounded load failover order = %v, want the skipped service right after the choice", names(c, d))
	}
	// The key returns as load drops: with every service at 2 the bound is
	// ceil(1.25 × (8+1)/4) = 3, and the hot service may take a third.
	for i := range c.Services {
		b.SetActive(i, 2)
	}
	if d = b.Decide(r, epoch); d.At(0) != hot || d.Reason != ReasonHash {
		t.Errorf("under the bound: chose %s (%v), want %s (hash)", c.Services[d.At(0)].Name, d.Reason, c.Services[hot].Name)
	}
}

// TestDecideLeavesRequest: Decide only reads the request, whatever the method,
// trusted hops, expressions (caps hit included) and persistence.
func TestDecideLeavesRequest(t *testing.T) {
	long := strings.Repeat("v", MaxValueBytes+1)
	mk := func() Request {
		return Request{Target: "/a?q=1", Authority: "h.example", Method: "GET", Source: "192.0.2.1:10", Dest: "198.51.100.1:80",
			Headers: [][2]string{{"x-forwarded-for", "203.0.113.1, 203.0.113.2"}, {"call-id", "c1"}, {"x-long", long}}}
	}
	store := NewMemStore()
	for i, m := range Methods() {
		extra := `"trustedForwardedHops":1,"persistence":{"keys":["${client.ip}","${request.header.x-long}"]}`
		if m == "TOKEN" {
			extra += `,"token":"${request.header.x-long||client.ip}"`
		} else if e := methodSamples[m].extra; e != "" {
			extra += "," + e
		}
		b := NewBalancer(mustConfig(t, pool(m, 3, extra)), 0)
		b.EnablePersistence(store, fmt.Sprint("t", i))
		r, want := mk(), mk()
		if d := b.Decide(&r, epoch); !d.Capped {
			t.Errorf("%s: Decide(long header).Capped = false, want true", m)
		}
		if !reflect.DeepEqual(r, want) {
			t.Errorf("%s: Decide changed the request: %+v, was %+v", m, r, want)
		}
	}
}

// TestHashAllocatesNothing: a decision allocates nothing, for every method of
// the table (the hashing methods with bounded load and failover).
func TestHashAllocatesNothing(t *testing.T) {
	reqs := map[string]*Request{
		"URLHASH":           {Target: "/static/app.js?v=3"},
		"DOMAINHASH":        {Target: "/", Authority: "WWW.Example.com:443"},
		"DESTINATIONIPHASH": {Dest: "198.51.100.1:443"},
		"SOURCEIPHASH":      {Source: "[2001:db8::7]:5000"},
		"SRCIPDESTIPHASH":   {Source: "192.0.2.1:5000", Dest: "198.51.100.1:443"},
		"SRCIPSRCPORTHASH":  {Source: "192.0.2.1:5000"},
		"CALLIDHASH":        {Headers: [][2]string{{"call-id", "a84b4c76e66710@pc33.example.com"}}},
		"TOKEN":             {Headers: [][2]string{{"x-user", "Alice-Example"}}},
	}
	for _, m := range Methods() {
		extra := `"upstreamCount":3,"hashBalanceFactor":150`
		r, ok := reqs[m]
		switch {
		case m == "TOKEN":
			extra += `,"token":"${request.header.x-user|lower|prefix(8)}"`
		case !ok: // every other method, with the sample of the method table's tests
			sample := methodSamples[m]
			r = &sample.req
			if sample.extra != "" {
				extra += "," + sample.extra
			}
		}
		b := NewBalancer(mustConfig(t, pool(m, 10, extra)), 0)
		if n := testing.AllocsPerRun(200, func() { b.Decide(r, epoch) }); n != 0 {
			t.Errorf("%s: Decide allocates %v per request, want 0", m, n)
		}
	}
}

func hashString(s string) uint64 { return xxhashString(s) }

func TestRoundRobinWorkersStartApart(t *testing.T) {
	c := mustConfig(t, pool("ROUNDROBIN", 4, ""))
	starts := map[string]bool{}
	for seed := uint64(1); seed <= 8; seed++ {
		starts[first(c, NewBalancer(c, seed).Decide(&Request{}, epoch))] = true
	}
	if len(starts) < 3 {
		t.Errorf("8 workers started round robin on %v, want them spread over the services", starts)
	}
}

// TestRankIntoIsTheFailoverOrder: a Balancer's RankInto gives, for every
// request, the order a Balancer of the same configuration with the most
// ranks and no persistence decides, through health and load changes and at pool
// sizes with and without the rank cache; and ranking leaves the
// Balancer's own decisions as a twin that never ranked makes them.
func TestRankIntoIsTheFailoverOrder(t *testing.T) {
	variants := []struct {
		name, method, extra string
		n                   int
	}{
		{"url hash, 5 services", "URLHASH", "", 5},
		{"url hash, 300 services (rank cache)", "URLHASH", "", 300},
		{"url hash, bounded load", "URLHASH", `"hashBalanceFactor":125`, 40},
		{"url hash, persistence", "URLHASH", `"persistence":{"keys":["${request.url}"]}`, 12},
		{"domain hash, 3 services", "DOMAINHASH", "", 3},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			c := mustConfig(t, pool(v.method, v.n, v.extra))
			ref := *c
			ref.UpstreamCount, ref.Persistence = maxUpstreamCount, nil
			b, twin, full := NewBalancer(c, 3), NewBalancer(c, 3), NewBalancer(&ref, 3)
			rng := rand.New(rand.NewPCG(5, 6))
			var got, want, mine, theirs Decision
			for i := range 3000 {
				if i%100 == 0 {
					s, down := rng.IntN(v.n), rng.IntN(3) > 0
					for _, x := range []*Balancer{b, twin, full} {
						x.SetDown(s, down)
					}
				}
				if i%7 == 0 {
					s, a := rng.IntN(v.n), rng.Int64N(20)
					for _, x := range []*Balancer{b, twin, full} {
						x.SetActive(s, a)
					}
				}
				req := Request{Target: "/k/" + strconv.Itoa(rng.IntN(500)), Authority: "h" + strconv.Itoa(rng.IntN(40)) + ".example"}
				b.RankInto(&got, &req)
				full.DecideInto(&want, &req, epoch)
				if got.Len() != want.Len() || got.ranked != want.ranked || got.Reason != want.Reason {
					t.Fatalf("request %d %s: RankInto %v (%v), full order %v (%v)", i, req.Target,
						names(c, got), got.Reason, names(c, want), want.Reason)
				}
				if want.Len() < min(maxUpstreamCount, v.n) && want.Reason == ReasonHash {
					up := 0
					for s := range v.n {
						if b.Selectable(s) {
							up++
						}
					}
					if want.Len() != min(maxUpstreamCount, up) {
						t.Fatalf("request %d: %d ranks with %d services up", i, want.Len(), up)
					}
				}
				b.DecideInto(&mine, &req, epoch)
				twin.DecideInto(&theirs, &req, epoch)
				if mine.Len() != theirs.Len() || mine.ranked != theirs.ranked {
					t.Fatalf("request %d: after RankInto the Balancer chose %v, its twin %v", i, names(c, mine), names(c, theirs))
				}
			}
		})
	}
}
