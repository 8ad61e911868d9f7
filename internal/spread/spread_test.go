package spread

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashlb/hashlb/lbcore"
)

// numKeys is the number of keys every measurement uses: 10^6.
const numKeys = 1_000_000

var (
	keysOnce sync.Once
	keys     []string // request targets, "/object/<i>"
	hashes   []uint64 // xxHash64 of each key: what hashlb's URLHASH and Envoy's hash policies hash
)

// testKeys returns the shared keys and their hashes.
func testKeys() ([]string, []uint64) {
	keysOnce.Do(func() {
		keys = make([]string, numKeys)
		hashes = make([]uint64, numKeys)
		for i := range keys {
			keys[i] = "/object/" + strconv.Itoa(i)
			hashes[i] = xxhash.Sum64String(keys[i])
		}
	})
	return keys, hashes
}

// picker maps one key (its string and its xxHash64) to a host index.
type picker interface {
	pick(key string, h uint64) int
}

// algorithm builds a picker factory for a host set. The factory is called
// once per goroutine: an lbcore.Balancer is not safe for concurrent use.
type algorithm struct {
	name  string
	build func(t testing.TB, addrs []string, weights []int) func() picker
}

type ringPicker struct{ r *Ring }

func (p ringPicker) pick(_ string, h uint64) int { return p.r.Pick(h) }

type maglevPicker struct{ m *Maglev }

func (p maglevPicker) pick(_ string, h uint64) int { return p.m.Pick(h) }

// hrwPicker is hashlb's own decision: a URLHASH Balancer deciding a request
// whose target is the key.
type hrwPicker struct {
	b   *lbcore.Balancer
	req lbcore.Request
}

func (p *hrwPicker) pick(key string, _ uint64) int {
	p.req.Target = key
	d := p.b.Decide(&p.req, time.Time{})
	return d.At(0)
}

// hrwConfig is the URLHASH configuration for the host set: service i is
// "s<i>" at addrs[i] with weights[i].
func hrwConfig(t testing.TB, addrs []string, weights []int) *lbcore.Config {
	var b strings.Builder
	b.WriteString(`{"lbMethod":"URLHASH","hashLength":4096,"services":[`)
	for i, a := range addrs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"s%d","address":%q,"weight":%d}`, i, a, weights[i])
	}
	b.WriteString("]}")
	c, err := lbcore.ParseConfig([]byte(b.String()))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}

var (
	algHRW = algorithm{"hashlb HRW", func(t testing.TB, addrs []string, weights []int) func() picker {
		c := hrwConfig(t, addrs, weights)
		return func() picker { return &hrwPicker{b: lbcore.NewBalancer(c, 1)} }
	}}
	algRing1k  = ringAlgorithm(1024)
	algRing64k = ringAlgorithm(65536)
	algMaglev  = algorithm{"Envoy Maglev (65537)", func(_ testing.TB, addrs []string, weights []int) func() picker {
		m := NewMaglev(addrs, weights, DefaultMaglevTableSize)
		return func() picker { return maglevPicker{m} }
	}}
	algorithms = []algorithm{algHRW, algRing1k, algRing64k, algMaglev}
)

func ringAlgorithm(minSize uint64) algorithm {
	return algorithm{fmt.Sprintf("Envoy ring hash (min %d)", minSize), func(_ testing.TB, addrs []string, weights []int) func() picker {
		r := NewRing(addrs, weights, minSize)
		return func() picker { return ringPicker{r} }
	}}
}

// hostSet returns n canonical addresses 10.x.y.z:80 and unit weights.
func hostSet(n int) ([]string, []int) {
	addrs := make([]string, n)
	weights := make([]int, n)
	for i := range addrs {
		addrs[i] = hostAddr(i)
		weights[i] = 1
	}
	return addrs, weights
}

func hostAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d:80", i/62500, i/250%250, i%250+1) }

// assign maps every key to a host index, on all CPUs.
func assign(newPicker func() picker, keys []string, hashes []uint64) []int32 {
	out := make([]int32, len(keys))
	workers := runtime.GOMAXPROCS(0)
	chunk := (len(keys) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(keys); lo += chunk {
		hi := min(lo+chunk, len(keys))
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			p := newPicker()
			for k := lo; k < hi; k++ {
				out[k] = int32(p.pick(keys[k], hashes[k]))
			}
		}(lo, hi)
	}
	wg.Wait()
	return out
}

// loads counts keys per host.
func loads(a []int32, n int) []int {
	l := make([]int, n)
	for _, h := range a {
		l[h]++
	}
	return l
}

// balance is how evenly loads are spread: max/mean, min/mean and the
// relative standard deviation (population standard deviation ÷ mean).
type balance struct{ maxMean, minMean, rsd float64 }

func balanceOf(l []int) balance {
	sum, lo, hi := 0, math.MaxInt, 0
	for _, v := range l {
		sum += v
		lo, hi = min(lo, v), max(hi, v)
	}
	mean := float64(sum) / float64(len(l))
	ss := 0.0
	for _, v := range l {
		d := float64(v) - mean
		ss += d * d
	}
	return balance{float64(hi) / mean, float64(lo) / mean, math.Sqrt(ss/float64(len(l))) / mean}
}

// churn is what one change of the host set did to the keys: moved is how
// many keys changed host; needed is how many had to (the removed host's keys,
// or the keys the added host now owns); extra = moved − needed.
type churn struct{ moved, needed int }

func (c churn) extra() int { return c.moved - c.needed }

// removeChurn measures removing host r from the n-host set.
func removeChurn(t testing.TB, alg algorithm, n, r int, keys []string, hashes []uint64) churn {
	addrs, weights := hostSet(n)
	before := assign(alg.build(t, addrs, weights), keys, hashes)
	after := assign(alg.build(t, append(addrs[:r:r], addrs[r+1:]...), weights[:n-1]), keys, hashes)
	var c churn
	for k := range before {
		a := after[k]
		if int(a) >= r {
			a++ // index in the n-host set
		}
		if int(before[k]) == r {
			c.needed++
		}
		if a != before[k] {
			c.moved++
		}
	}
	return c
}

// addChurn measures adding one host to the n-host set.
func addChurn(t testing.TB, alg algorithm, n int, keys []string, hashes []uint64) churn {
	addrs, weights := hostSet(n + 1)
	before := assign(alg.build(t, addrs[:n], weights[:n]), keys, hashes)
	after := assign(alg.build(t, addrs, weights), keys, hashes)
	var c churn
	for k := range before {
		if int(after[k]) == n {
			c.needed++
		}
		if after[k] != before[k] {
			c.moved++
		}
	}
	return c
}

// weightError is the worst relative error of each host's share against
// w/Σw for weights 1..n, and the weight of the host where it occurs.
func weightError(t testing.TB, alg algorithm, n int, keys []string, hashes []uint64) (worst float64, at int, ratios []float64) {
	addrs, weights := hostSet(n)
	total := 0
	for i := range weights {
		weights[i] = i + 1
		total += i + 1
	}
	l := loads(assign(alg.build(t, addrs, weights), keys, hashes), n)
	ratios = make([]float64, n)
	for i, v := range l {
		want := float64(len(keys)) * float64(weights[i]) / float64(total)
		ratios[i] = float64(v) / want
		if e := math.Abs(ratios[i] - 1); e > worst {
			worst, at = e, weights[i]
		}
	}
	return worst, at, ratios
}

// TestHRWBalance10 holds the distribution goal (docs/distribution.md):
// hashlb's HRW max/mean ≤ 1.02 at
// 10 services over 10^6 keys.
func TestHRWBalance10(t *testing.T) {
	keys, hashes := testKeys()
	addrs, weights := hostSet(10)
	b := balanceOf(loads(assign(algHRW.build(t, addrs, weights), keys, hashes), 10))
	t.Logf("HRW, 10 services, %d keys: max/mean %.4f, min/mean %.4f, RSD %.4f", len(keys), b.maxMean, b.minMean, b.rsd)
	if b.maxMean > 1.02 {
		t.Errorf("max/mean = %.4f, goal ≤ 1.02", b.maxMean)
	}
}

// TestHRWRemoveMovesOnlyRemoved holds the goal "0 extra keys moved": removing
// any one of 10 services moves exactly the keys it had.
func TestHRWRemoveMovesOnlyRemoved(t *testing.T) {
	keys, hashes := testKeys()
	for r := range 10 {
		c := removeChurn(t, algHRW, 10, r, keys, hashes)
		if c.extra() != 0 || c.needed == 0 {
			t.Errorf("remove s%d: moved %d keys, it had %d (%d extra), want 0 extra", r, c.moved, c.needed, c.extra())
		}
	}
}

// TestHRWAddMovesOneInNPlus1 holds the add half: adding an 11th service moves
// only the keys it now owns (0 extra), and those are 1/11 of the keys within
// 2% (relative; the binomial standard deviation at 10^6 keys is 0.3%).
func TestHRWAddMovesOneInNPlus1(t *testing.T) {
	keys, hashes := testKeys()
	c := addChurn(t, algHRW, 10, keys, hashes)
	frac, want := float64(c.moved)/float64(len(keys)), 1.0/11
	t.Logf("add an 11th service: moved %d keys (%.4f; 1/11 = %.4f), %d extra", c.moved, frac, want, c.extra())
	if c.extra() != 0 {
		t.Errorf("add: %d extra keys moved between existing services, want 0", c.extra())
	}
	if math.Abs(frac/want-1) > 0.02 {
		t.Errorf("add: moved %.4f of keys, want 1/11 = %.4f within 2%%", frac, want)
	}
}

// TestHRWWeighted checks that weights 1..10 give each service its share
// within 2% (relative) over 10^6 keys.
func TestHRWWeighted(t *testing.T) {
	keys, hashes := testKeys()
	worst, at, _ := weightError(t, algHRW, 10, keys, hashes)
	t.Logf("HRW, weights 1..10: worst relative share error %.4f (weight %d)", worst, at)
	if worst > 0.02 {
		t.Errorf("worst relative share error %.4f at weight %d, want ≤ 0.02", worst, at)
	}
}

// TestEnvoyRingShape checks the ring against Envoy's sizing: 10 equal hosts
// at minimum_ring_size 1024 get ceil(0.1·1024)/0.1 = 1030 points, 103 each.
func TestEnvoyRingShape(t *testing.T) {
	addrs, weights := hostSet(10)
	r := NewRing(addrs, weights, 1024)
	if r.Size() != 1030 {
		t.Errorf("ring size %d, want 1030", r.Size())
	}
	per := make([]int, 10)
	for _, h := range r.hosts {
		per[h]++
	}
	for i, v := range per {
		if v != 103 {
			t.Errorf("host %d has %d points, want 103", i, v)
		}
	}
}

// TestMaglevShape checks the Maglev table is full and that equal weights get
// ⌊M/N⌋ or ⌈M/N⌉ slots each (each round gives every host one slot).
func TestMaglevShape(t *testing.T) {
	addrs, weights := hostSet(10)
	m := NewMaglev(addrs, weights, DefaultMaglevTableSize)
	per := make([]int, 10)
	for _, h := range m.table {
		per[h]++
	}
	for i, v := range per {
		if v != DefaultMaglevTableSize/10 && v != DefaultMaglevTableSize/10+1 {
			t.Errorf("host %d has %d slots, want %d or %d", i, v, DefaultMaglevTableSize/10, DefaultMaglevTableSize/10+1)
		}
	}
}

// TestMaglevEnvoyGolden checks the table against Envoy's own expectations in
// test/extensions/load_balancing_policies/maglev/maglev_lb_test.cc (commit
// e7495d2690fac1d2c4041b7945959abbcb4f9eaa): tests Basic (six hosts, table 7)
// and Weighted (weights 1 and 2, table 17), where key hash i picks slot i.
func TestMaglevEnvoyGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		addrs   []string
		weights []int
		m       uint64
		want    []int32
	}{
		{"Basic", []string{"127.0.0.1:90", "127.0.0.1:91", "127.0.0.1:92", "127.0.0.1:93", "127.0.0.1:94", "127.0.0.1:95"},
			[]int{1, 1, 1, 1, 1, 1}, 7, []int32{2, 4, 0, 1, 5, 0, 3}},
		{"Weighted", []string{"127.0.0.1:90", "127.0.0.1:91"}, []int{1, 2}, 17,
			[]int32{1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1}},
	} {
		m := NewMaglev(tc.addrs, tc.weights, tc.m)
		for i, want := range tc.want {
			if got := m.Pick(uint64(i)); int32(got) != want {
				t.Errorf("%s: hash %d → host %d, Envoy expects %d", tc.name, i, got, want)
			}
		}
	}
}

// TestRingEnvoyGolden checks the ring against Envoy's own expectations in
// test/extensions/load_balancing_policies/ring_hash/ring_hash_lb_test.cc
// (commit 13e9fdb2d4db3480ff278565a596324951e8dccd), test Basic: six hosts,
// minimum_ring_size 12, xxHash64. The points and lookups are Envoy's.
func TestRingEnvoyGolden(t *testing.T) {
	var addrs []string
	for p := 90; p <= 95; p++ {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	r := NewRing(addrs, []int{1, 1, 1, 1, 1, 1}, 12)
	want := []struct {
		host int32
		hash uint64
	}{
		{4, 833437586790550860}, {2, 928266305478181108}, {0, 1033482794131418490},
		{5, 3551244743356806947}, {3, 3851675632748031481}, {1, 5583722120771150861},
		{1, 6311230543546372928}, {3, 7700377290971790572}, {5, 13144177310400110813},
		{2, 13444792449719432967}, {4, 15516499411664133160}, {0, 16117243373044804889},
	}
	if r.Size() != len(want) {
		t.Fatalf("ring has %d points, Envoy's has %d", r.Size(), len(want))
	}
	for i, w := range want {
		if r.hashes[i] != w.hash || r.hosts[i] != w.host {
			t.Errorf("point %d: host %d at %d, Envoy has host %d at %d", i, r.hosts[i], r.hashes[i], w.host, w.hash)
		}
	}
	for _, l := range []struct {
		h    uint64
		host int
	}{{0, 4}, {math.MaxUint64, 4}, {3551244743356806947, 5}, {3551244743356806948, 3}, {16117243373044804880, 0}} {
		if got := r.Pick(l.h); got != l.host {
			t.Errorf("Pick(%d) = %d, Envoy picks %d", l.h, got, l.host)
		}
	}
}
