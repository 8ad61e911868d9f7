package spread

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Maglev is a Maglev lookup table built as Envoy builds it. Read from
// envoyproxy/envoy source/extensions/load_balancing_policies/maglev/maglev_lb.cc
// at commit a6b64f4b8db11f00fd7255e4dba14c5802547275 and maglev_lb.h at
// 8f663f798fe6c50aedb69bd02e05f1c34949e2f1 (MaglevTable::constructMaglevTableInternal,
// OriginalMaglevTable::constructImplementationInternals, permutation and
// chooseHost), which implement pseudocode listing 1 of Eisenbud et al.,
// "Maglev: A Fast and Reliable Software Network Load Balancer", NSDI 2016.
//
// Building: hosts are sorted by their key (the address); host h has
// offset = xxHash64(key, seed 0) mod M and skip = xxHash64(key, seed 1)
// mod (M−1) + 1, and its preference list is (offset + skip·j) mod M. Rounds
// run over the hosts in order; in round r a host with normalised weight w takes
// a turn only when r·w ≥ its running target (which grows by the largest
// normalised weight at each turn), so the heaviest host takes a turn every
// round. A turn claims the host's next free slot of its preference list. It
// stops when all M slots are claimed.
//
// Lookup: slot key-hash mod M. TestMaglevEnvoyGolden holds it to the tables
// Envoy's own maglev_lb_test.cc expects.
type Maglev struct {
	table []int32
}

// DefaultMaglevTableSize is Envoy's default (and the paper's) table size.
const DefaultMaglevTableSize = 65537

// NewMaglev builds the table of size m (a prime) for hosts with addresses
// addrs and weights (≥ 1). Host indexes in the table are indexes into addrs.
func NewMaglev(addrs []string, weights []int, m uint64) *Maglev {
	total := 0
	for _, w := range weights {
		total += w
	}
	type entry struct {
		host                 int32
		key                  string
		offset, skip         uint64
		weight, targetWeight float64
		next                 uint64
	}
	es := make([]entry, len(addrs))
	maxW := 0.0
	for i, a := range addrs {
		w := float64(weights[i]) / float64(total)
		maxW = max(maxW, w)
		d := xxhash.NewWithSeed(1)
		d.WriteString(a)
		es[i] = entry{
			host:   int32(i),
			key:    a,
			offset: xxhash.Sum64String(a) % m,
			skip:   d.Sum64()%(m-1) + 1,
			weight: w,
		}
	}
	slices.SortStableFunc(es, func(x, y entry) int { return cmp.Compare(x.key, y.key) })
	t := &Maglev{table: make([]int32, m)}
	taken := make([]bool, m)
	filled := uint64(0)
	for round := 1; filled < m; round++ {
		for i := 0; i < len(es) && filled < m; i++ {
			e := &es[i]
			if float64(round)*e.weight < e.targetWeight {
				continue
			}
			e.targetWeight += maxW
			c := (e.offset + e.skip*e.next) % m
			for taken[c] {
				e.next++
				c = (e.offset + e.skip*e.next) % m
			}
			t.table[c], taken[c] = e.host, true
			e.next++
			filled++
		}
	}
	return t
}

// Pick returns the index of the host that key hash h maps to.
func (t *Maglev) Pick(h uint64) int { return int(t.table[h%uint64(len(t.table))]) }
