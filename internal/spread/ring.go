package spread

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Ring is a ring hash built as Envoy builds it. Read from
// envoyproxy/envoy source/extensions/load_balancing_policies/ring_hash/ring_hash_lb.cc
// at commit e7495d2690fac1d2c4041b7945959abbcb4f9eaa (RingHashLoadBalancer::Ring
// and Ring::chooseHost), with Envoy's defaults: xxHash64 (seed 0), no
// use_hostname_for_hashing (the host's key is its address, "ip:port"),
// maximum_ring_size 8 Mi.
//
// Building: with each host's weight normalised to w/Σw and m the smallest
// normalised weight, the ring holds scale = min(ceil(m·minRingSize)/m,
// maxRingSize) points in total. Hosts are walked in order keeping running sums
// of the points wanted (scale·w/Σw each) and the points placed; host h gets
// points hashed from "address_0", "address_1", ... until the placed count
// catches up. The points are sorted by hash.
//
// Lookup: the first point whose hash is ≥ the key's hash, wrapping to the
// first point (Envoy ports ketama_get_server's binary search; this is the
// same answer, found here with slices.BinarySearch). TestRingEnvoyGolden holds
// it to the ring and lookups Envoy's own ring_hash_lb_test.cc expects.
type Ring struct {
	hashes []uint64
	hosts  []int32
}

// DefaultMaxRingSize is Envoy's default maximum_ring_size.
const DefaultMaxRingSize = 8 * 1024 * 1024

// NewRing builds the ring for hosts with addresses addrs and weights (≥ 1).
func NewRing(addrs []string, weights []int, minRingSize uint64) *Ring {
	total := 0
	for _, w := range weights {
		total += w
	}
	minW := math.Inf(1)
	for _, w := range weights {
		minW = min(minW, float64(w)/float64(total))
	}
	scale := min(math.Ceil(minW*float64(minRingSize))/minW, float64(DefaultMaxRingSize))
	type point struct {
		hash uint64
		host int32
	}
	pts := make([]point, 0, int(math.Ceil(scale)))
	var current, target float64
	buf := make([]byte, 0, 64)
	for h, a := range addrs {
		target += scale * float64(weights[h]) / float64(total)
		for i := uint64(0); current < target; i++ {
			buf = append(append(append(buf[:0], a...), '_'), strconv.FormatUint(i, 10)...)
			pts = append(pts, point{xxhash.Sum64(buf), int32(h)})
			current++
		}
	}
	slices.SortStableFunc(pts, func(x, y point) int { return cmp.Compare(x.hash, y.hash) })
	r := &Ring{hashes: make([]uint64, len(pts)), hosts: make([]int32, len(pts))}
	for i, p := range pts {
		r.hashes[i], r.hosts[i] = p.hash, p.host
	}
	return r
}

// Size is the number of points on the ring.
func (r *Ring) Size() int { return len(r.hashes) }

// Pick returns the index of the host that key hash h maps to.
func (r *Ring) Pick(h uint64) int {
	i, _ := slices.BinarySearch(r.hashes, h)
	if i == len(r.hashes) {
		i = 0
	}
	return int(r.hosts[i])
}
