package lbcore

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// xxh64Pieces composes xxh64.go's pieces as Balancer.decide does in
// the Wasm build. That build's decisions are held to the native build's (which
// hash with xxhash) by e2e's TestCorpus, through hostsim and the SDK's runner.
func xxh64Pieces(key string) uint64 {
	h := xxhStart(len(key))
	if len(key) >= 8 {
		h = xxhLane8(h, key)
		if len(key) >= 16 {
			h = xxhLane8(h, key[8:])
			if len(key) >= 24 {
				h = xxhLane8(h, key[16:])
			}
		}
	}
	t := key[len(key)&^7:]
	if len(t) >= 4 {
		h = xxhLane4(h, t)
		t = t[4:]
	}
	if len(t) >= 1 {
		h = xxhLane1(h, t[0])
		if len(t) >= 2 {
			h = xxhLane1(h, t[1])
			if len(t) >= 3 {
				h = xxhLane1(h, t[2])
			}
		}
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
