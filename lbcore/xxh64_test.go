package lbcore

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// xxh64Pieces composes xxh64.go's pieces as Balancer.decideInto does in
// the Wasm build. That build's decisions are held to the native build's (which
// hash with xxhash) by e2e's TestCorpus, through hostsim and the SDK's runner.
func xxh64Pieces(s string) uint64 {
	h := xxhStart(len(s))
	for ; len(s) >= 8; s = s[8:] {
		h = xxhLane8(h, s)
	}
	if len(s) >= 4 {
		h = xxhLane4(h, s)
		s = s[4:]
	}
	for ; len(s) > 0; s = s[1:] {
		h = xxhLane1(h, s[0])
	}
	return xxhAvalanche(h)
}

// TestXXH64Pieces: the pieces give xxhash's XXH64 for every length below a
// stripe, on the specification's empty-input value and on random bytes.
func TestXXH64Pieces(t *testing.T) {
	if got := xxh64Pieces(""); got != 0xEF46DB3751D8E999 {
		t.Fatalf("XXH64(\"\") = %#x, want 0xef46db3751d8e999", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 32; n++ {
		for range 200 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if got, want := xxh64Pieces(string(b)), xxhash.Sum64(b); got != want {
				t.Fatalf("length %d, %x: %#x, xxhash %#x", n, b, got, want)
			}
		}
	}
}

func FuzzXXH64Pieces(f *testing.F) {
	f.Add("")
	f.Add("/static/js/app.0.js?v=12")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) >= 32 {
			s = s[:31]
		}
		if got, want := xxh64Pieces(s), xxhash.Sum64String(s); got != want {
			t.Fatalf("%q: %#x, xxhash %#x", s, got, want)
		}
	})
}
