package lbcore

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestXXHShort: the persistence table's short-key hash is xxhash's XXH64 for
// every length below a stripe, on random bytes.
func TestXXHShort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 32; n++ {
		for range 200 {
			k := make([]byte, n)
			for i := range k {
				k[i] = byte(rng.Uint32())
			}
			if got, want := xxhShort(string(k)), xxhash.Sum64(k); got != want {
				t.Fatalf("xxhShort(%x) = %#x, xxhash.Sum64 = %#x", k, got, want)
			}
		}
	}
}
