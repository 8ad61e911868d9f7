package lbcore

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// Golden vectors: pinned from this implementation when it was written
// (splitmix64's finaliser over keyHash ^ serviceID, serviceID =
// xxhash64(address)). A change here moves every key of every deployment:
// it needs a release note, not a test update.
func TestScoreGolden(t *testing.T) {
	tests := []struct {
		k, id, want uint64
	}{
		{0, 0, 0},
		// splitmix64's published first output for seed 0 is the finaliser
		// of the golden gamma 0x9e3779b97f4a7c15: 0xe220a8397b1dcdaf.
		{0x9e3779b97f4a7c15, 0, 0xe220a8397b1dcdaf},
		{1, 0, 0x5692161d100b05e5},
		{xxhash.Sum64String("/index.html"), xxhash.Sum64String("10.0.0.1:80"), 0xad9410c8e3125262},
		{xxhash.Sum64String("/index.html"), xxhash.Sum64String("10.0.0.2:80"), 0xb3708e58a54f4e09},
	}
	for _, tt := range tests {
		if got := score(tt.k, tt.id); got != tt.want {
			t.Errorf("Score(%#x, %#x) = %#x, want %#x", tt.k, tt.id, got, tt.want)
		}
	}
	// xxhash64 of the empty input is the reference implementation's 0xef46db3751d8e999.
	if got := xxhash.Sum64String(""); got != 0xef46db3751d8e999 {
		t.Errorf("xxhash64(\"\") = %#x: the xxhash dependency changed", got)
	}
	if got := xxhash.Sum64String("10.0.0.1:80"); got != 0x011facba8043b217 {
		t.Errorf("xxhash64(10.0.0.1:80) = %#x: the xxhash dependency changed", got)
	}
}

// TestRankingGolden pins the full failover order of a fixed pool of five
// services for fixed URLs.
func TestRankingGolden(t *testing.T) {
	c := mustConfig(t, pool("URLHASH", 5, `"upstreamCount":5`))
	b := NewBalancer(c, 0)
	tests := []struct {
		url  string
		want []string
	}{
		{"/", []string{"s1", "s4", "s0", "s3", "s2"}},
		{"/index.html", []string{"s1", "s0", "s4", "s2", "s3"}},
		{"/video/42.mp4", []string{"s1", "s3", "s0", "s2", "s4"}},
		{"/api/v1/users?id=7", []string{"s0", "s2", "s1", "s3", "s4"}},
	}
	for _, tt := range tests {
		got := names(c, b.Decide(&Request{Target: tt.url}, epoch))
		if !slices.Equal(got, tt.want) {
			t.Errorf("Decide(%q) = %v, want %v", tt.url, got, tt.want)
		}
	}
}

// TestCitrixFailover is the example of the Citrix page: for a key ranked
// S1 > S2 > S3, requests go to S1; S1 DOWN → S2; S1 and S2 DOWN → S3; S2 back
// → S2; S1 back → S1; both back → S1.
func TestCitrixFailover(t *testing.T) {
	c := mustConfig(t, `{"lbMethod":"URLHASH","upstreamCount":3,"services":[
		{"name":"S1","address":"192.0.2.1:80"},{"name":"S2","address":"192.0.2.2:80"},{"name":"S3","address":"192.0.2.3:80"}]}`)
	b := NewBalancer(c, 0)
	// Find a URL the pool ranks S1 > S2 > S3 (H1 in the Citrix text).
	var url string
	for i := 0; url == ""; i++ {
		u := fmt.Sprintf("/h1/%d", i)
		if slices.Equal(names(c, b.Decide(&Request{Target: u}, epoch)), []string{"S1", "S2", "S3"}) {
			url = u
		}
	}
	steps := []struct {
		name     string
		down     [3]bool
		want     string
		wantRank []string
	}{
		{"all up", [3]bool{}, "S1", []string{"S1", "S2", "S3"}},
		{"S1 down", [3]bool{true, false, false}, "S2", []string{"S2", "S3"}},
		{"S1 and S2 down", [3]bool{true, true, false}, "S3", []string{"S3"}},
		{"only S2 back", [3]bool{true, false, false}, "S2", []string{"S2", "S3"}},
		{"only S1 back", [3]bool{false, true, false}, "S1", []string{"S1", "S3"}},
		{"both back", [3]bool{}, "S1", []string{"S1", "S2", "S3"}},
	}
	for _, st := range steps {
		for i, d := range st.down {
			b.SetDown(i, d)
		}
		d := b.Decide(&Request{Target: url}, epoch)
		if got := names(c, d); !slices.Equal(got, st.wantRank) || d.Reason != ReasonHash {
			t.Errorf("%s: Decide(%q) = %v (%v), want %v (hash)", st.name, url, got, d.Reason, st.wantRank)
		}
	}
}

// assign maps keys 0..n-1 to service names.
func assign(t *testing.T, c *Config, n int) []string {
	t.Helper()
	b := NewBalancer(c, 0)
	out := make([]string, n)
	for i := range out {
		out[i] = first(c, b.Decide(&Request{Target: fmt.Sprintf("/k/%d", i)}, epoch))
	}
	return out
}

func TestRemovingServiceMovesOnlyItsKeys(t *testing.T) {
	const keys = 100000
	full := mustConfig(t, pool("URLHASH", 10, ""))
	before := assign(t, full, keys)
	// Remove s4 from the configuration (not just mark it DOWN).
	less := *full
	less.Services = slices.Delete(slices.Clone(full.Services), 4, 5)
	after := assign(t, &less, keys)
	moved, owned := 0, 0
	for i := range before {
		switch {
		case before[i] == "s4":
			owned++
		case before[i] != after[i]:
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("removing s4 moved %d keys of other services, want 0", moved)
	}
	if owned == 0 {
		t.Fatal("s4 held no keys")
	}
}

func TestAddingServiceMovesOnlyKeysItWins(t *testing.T) {
	const keys = 100000
	c10 := mustConfig(t, pool("URLHASH", 10, ""))
	c11 := mustConfig(t, pool("URLHASH", 11, ""))
	before, after := assign(t, c10, keys), assign(t, c11, keys)
	moved, wrong := 0, 0
	for i := range before {
		if before[i] != after[i] {
			moved++
			if after[i] != "s10" {
				wrong++
			}
		}
	}
	if wrong != 0 {
		t.Errorf("adding s10 moved %d keys to other services, want 0", wrong)
	}
	share := float64(moved) / keys
	if math.Abs(share-1.0/11) > 0.01 {
		t.Errorf("adding s10 moved %.4f of keys, want about 1/11 = %.4f", share, 1.0/11)
	}
}

func TestSpreadWithinFivePercent(t *testing.T) {
	const keys = 1000000
	for _, n := range []int{3, 10, 100} {
		t.Run(fmt.Sprintf("services=%d", n), func(t *testing.T) {
			c := mustConfig(t, pool("URLHASH", n, ""))
			b := NewBalancer(c, 0)
			count := make([]int, n)
			key := make([]byte, 0, 32)
			for i := 0; i < keys; i++ {
				key = fmt.Appendf(key[:0], "/obj/%d", i)
				var d Decision
				b.hashRank(&d, xxhash.Sum64(key)) // what Decide does after extracting the key
				count[d.At(0)]++
			}
			fair := float64(keys) / float64(n)
			for i, got := range count {
				if dev := math.Abs(float64(got)-fair) / fair; dev > 0.05 {
					t.Errorf("s%d got %d keys, fair share %.0f: off by %.1f%%, want ≤ 5%%", i, got, fair, 100*dev)
				}
			}
		})
	}
}

func TestWeightedShares(t *testing.T) {
	const keys = 100000
	c := mustConfig(t, `{"lbMethod":"SOURCEIPHASH","services":[
		{"name":"w1","address":"10.1.0.1:80","weight":1},
		{"name":"w2","address":"10.1.0.2:80","weight":2},
		{"name":"w3","address":"10.1.0.3:80","weight":3},
		{"name":"w10","address":"10.1.0.4:80","weight":10}]}`)
	b := NewBalancer(c, 0)
	count := map[string]int{}
	for i := 0; i < keys; i++ {
		src := fmt.Sprintf("172.%d.%d.%d:5000", 16+i>>16, (i>>8)&255, i&255)
		count[first(c, b.Decide(&Request{Source: src}, epoch))]++
	}
	total := 16.0
	for _, s := range c.Services {
		want := float64(s.Weight) / total
		got := float64(count[s.Name]) / keys
		if math.Abs(got-want)/want > 0.03 {
			t.Errorf("%s (weight %d) got share %.4f, want %.4f ± 3%%", s.Name, s.Weight, got, want)
		}
	}
}

func TestHashIDKeepsKeysAcrossAddressChange(t *testing.T) {
	a := mustConfig(t, `{"lbMethod":"URLHASH","services":[{"name":"x","address":"10.0.0.1:80","hashId":"cache-x"},{"name":"y","address":"10.0.0.2:80","hashId":"cache-y"}]}`)
	b := mustConfig(t, `{"lbMethod":"URLHASH","services":[{"name":"x","address":"10.9.9.9:8080","hashId":"cache-x"},{"name":"y","address":"10.0.0.2:80","hashId":"cache-y"}]}`)
	ka, kb := assign(t, a, 2000), assign(t, b, 2000)
	if !slices.Equal(ka, kb) {
		t.Error("changing x's address moved keys although its hashId stayed")
	}
}

func TestSameKeySameServiceAcrossBalancers(t *testing.T) {
	c := mustConfig(t, pool("CALLIDHASH", 7, ""))
	b1, b2 := NewBalancer(c, 1), NewBalancer(c, 99)
	for i := 0; i < 1000; i++ {
		r := &Request{Headers: [][2]string{{"call-id", fmt.Sprintf("a84b4c76e66710@pc33.example.com-%d", i)}}}
		if x, y := first(c, b1.Decide(r, epoch)), first(c, b2.Decide(r, epoch)); x != y {
			t.Fatalf("call %d: worker 1 chose %s, worker 2 chose %s", i, x, y)
		}
	}
}

// TestUnitPassMatchesExact holds decide's unit-weight pass (four services
// at a time, selects, padding) to hashBest's plain loop, which ranks as
// better orders: every pool size around the padding, services disabled and
// down, the pool's last service up and down again, a tie that only identity
// breaks, and a best score of 0.
func TestUnitPassMatchesExact(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 13, 100} {
		c := mustConfig(t, pool("URLHASH", n, ""))
		for i := range c.Services {
			c.Services[i].Enabled = i%5 != 4
		}
		b := NewBalancer(c, 0)
		for step := 0; step < 3; step++ {
			switch step {
			case 1: // some down, the last among them
				for i := 0; i < n; i += 3 {
					b.SetDown(i, true)
				}
				b.SetDown(n-1, true)
			case 2: // all up again
				for i := 0; i < n; i++ {
					b.SetDown(i, false)
				}
			}
			for i := 0; i < 300; i++ {
				r := &Request{Target: fmt.Sprintf("/pass/%d/%d", n, i)}
				got := b.Decide(r, epoch)
				var want Decision
				b.hashBest(&want, xxhashString(r.Target))
				if got.Len() != want.Len() || got.Len() > 0 && got.At(0) != want.At(0) {
					t.Fatalf("%d services, step %d: Decide(%q) = %v, the exact pass %v", n, step, r.Target, names(c, got), names(c, want))
				}
			}
		}
	}

	t.Run("tie", func(t *testing.T) {
		c := mustConfig(t, pool("URLHASH", 6, ""))
		b := NewBalancer(c, 0)
		r := &Request{Target: "/tie"}
		k := xxhashString(r.Target)
		d0 := b.Decide(r, epoch)
		win := d0.At(0)
		// Give another service the winner's score: the same identity under a
		// different address. Its index decides the tie either way round.
		for _, other := range []int{(win + 1) % 6, (win + 5) % 6} {
			id := b.rank[win].id
			saved := b.rank[other].id
			b.rank[other].id, c.Services[other].ID = id, id
			var want Decision
			b.hashBest(&want, k)
			if got := b.Decide(r, epoch); got.At(0) != want.At(0) {
				t.Errorf("tie between %d and %d: Decide = %d, the exact pass %d", win, other, got.At(0), want.At(0))
			}
			b.rank[other].id, c.Services[other].ID = saved, saved
		}
	})

	t.Run("score 0", func(t *testing.T) {
		c := mustConfig(t, pool("URLHASH", 3, ""))
		b := NewBalancer(c, 0)
		r := &Request{Target: "/zero"}
		k := xxhashString(r.Target)
		b.rank[1].id, c.Services[1].ID = k, k // Score(k, k) = mix(0) = 0
		b.SetDown(0, true)
		b.SetDown(2, true)
		if d := b.Decide(r, epoch); d.Len() != 1 || d.At(0) != 1 {
			t.Errorf("the only selectable service scores 0: Decide = %v, want [s1]", names(c, d))
		}
	})
}

// TestDecisionResetCoversEveryField: DecideInto clears a reused Decision
// field by field (reset). A field added to Decision must be cleared there
// too; this lists the fields reset knows.
func TestDecisionResetCoversEveryField(t *testing.T) {
	known := []string{"Reason", "Method", "Persist", "EmptyKey", "Capped", "Ask", "Session", "sessRefresh", "sessIssued", "sessSvc", "sessKey", "n", "ranked"}
	var got []string
	dt := reflect.TypeFor[Decision]()
	for i := 0; i < dt.NumField(); i++ {
		got = append(got, dt.Field(i).Name)
	}
	if !slices.Equal(got, known) {
		t.Errorf("Decision's fields are %v, reset knows %v: clear the new ones in Decision.reset (ranked past n stays)", got, known)
	}
}

// TestDecideIntoReusesDecision: deciding into a Decision that holds another
// decision (persistence outcome, reasons, a longer failover list) gives what
// Decide gives.
func TestDecideIntoReusesDecision(t *testing.T) {
	persist := NewBalancer(mustConfig(t, pool("URLHASH", 5, `"upstreamCount":4,"persistence":{"keys":["${client.ip}"]}`)), 0)
	persist.EnablePersistence(NewMemStore(), "t")
	plain := NewBalancer(mustConfig(t, pool("URLHASH", 5, "")), 0)
	var d Decision
	for i := 0; i < 50; i++ {
		r := &Request{Target: fmt.Sprintf("/reuse/%d", i), Source: fmt.Sprintf("192.0.2.%d:1000", i%7)}
		persist.DecideInto(&d, r, epoch)
		plain.DecideInto(&d, r, epoch)
		want := plain.Decide(r, epoch)
		if d.Reason != want.Reason || d.Method != want.Method || d.Persist != want.Persist ||
			d.EmptyKey != want.EmptyKey || d.Capped != want.Capped || d.Ask != want.Ask ||
			!slices.Equal(names(plain.Config(), d), names(plain.Config(), want)) {
			t.Fatalf("DecideInto(%q) after a persistent decision = %+v, Decide %+v", r.Target, d, want)
		}
	}
}
