//go:build hashlb_inlinehash

package lbcore

import (
	"math/rand/v2"
	"testing"
)

// These tests run with the build tag hashlb_inlinehash (./build.sh test runs
// them so), under which Balancer.decide hashes a short key with xxh64.go's
// pieces, as the Wasm build does: they hold the block that ships to xxhash.

// decideHashes reports whether Decide ranks URLHASH key key first where
// hashBest does with xxhash's hash: with 64 services, a wrong hash picks
// another first service 63 times in 64.
func decideHashes(t *testing.T, b *Balancer, key string) bool {
	t.Helper()
	r := &Request{Target: key}
	got := b.Decide(r, epoch)
	var want Decision
	b.hashBest(&want, xxhashString(key))
	return got.Len() == 1 && want.Len() == 1 && got.At(0) == want.At(0)
}

// TestXXH64Pieces: decide's in-place hash is xxhash's XXH64 for every key
// length below a stripe (and xxhash itself from 32 on), on random bytes.
func TestXXH64Pieces(t *testing.T) {
	if !inlineHash {
		t.Fatal("built without hashlb_inlinehash: decide does not use the pieces")
	}
	if got := xxhAvalanche(xxhStart(0)); got != 0xEF46DB3751D8E999 {
		t.Fatalf("XXH64(\"\") = %#x, want 0xef46db3751d8e999", got)
	}
	b := NewBalancer(mustConfig(t, pool("URLHASH", 64, "")), 0)
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n < 40; n++ { // an empty URL is no input: the backup method decides
		for range 200 {
			k := make([]byte, n)
			for i := range k {
				k[i] = byte(rng.Uint32())
			}
			if !decideHashes(t, b, string(k)) {
				t.Fatalf("length %d, %x: Decide ranks another service first than xxhash's hash does", n, k)
			}
		}
	}
}

func FuzzXXH64Pieces(f *testing.F) {
	f.Add("")
	f.Add("static/js/app.0.js?v=12")
	b := NewBalancer(mustConfig(f, pool("URLHASH", 64, "")), 0)
	f.Fuzz(func(t *testing.T, s string) {
		s = "/" + s[:min(len(s), 79)] // a URL within hashLength
		if !decideHashes(t, b, s) {
			t.Fatalf("%q: Decide ranks another service first than xxhash's hash does", s)
		}
	})
}
