package lbcore

import (
	"math/bits"
	"runtime"
)

// XXH64 with seed 0, the hash of github.com/cespare/xxhash, in pieces the
// compiler inlines, for keys shorter than one 32-byte stripe: a hash
// method's decision (Balancer.decide) hashes its key without a call
// (RATIONALE.md, "Cost per request").
// Longer keys go to xxhash. The algorithm and constants are the xxHash specification's
// (doc/xxhash_spec.md in github.com/Cyan4973/xxHash, "XXH64 algorithm
// description"): a short input starts from prime 5 plus its length, takes
// its 8-byte lanes (at most three), then one 4-byte lane, then single bytes
// (at most three), and ends with the avalanche. TestXXH64Pieces and
// FuzzXXH64Pieces (build tag hashlb_inlinehash) hold decide's use of them to
// xxhash.Sum64String.
const (
	xxhPrime1 uint64 = 0x9E3779B185EBCA87
	xxhPrime2 uint64 = 0xC2B2AE3D27D4EB4F
	xxhPrime3 uint64 = 0x165667B19E3779F9
	xxhPrime4 uint64 = 0x85EBCA77C2B2AE63
	xxhPrime5 uint64 = 0x27D4EB2F165667C5
)

func xxhStart(n int) uint64 { return xxhPrime5 + uint64(n) }

// xxhLane8 takes the 8-byte lane at the start of s (little-endian).
func xxhLane8(h uint64, s string) uint64 {
	v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	h ^= bits.RotateLeft64(v*xxhPrime2, 31) * xxhPrime1
	return bits.RotateLeft64(h, 27)*xxhPrime1 + xxhPrime4
}

// xxhLane4 takes the 4-byte lane at the start of s.
func xxhLane4(h uint64, s string) uint64 {
	v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
	h ^= v * xxhPrime1
	return bits.RotateLeft64(h, 23)*xxhPrime2 + xxhPrime3
}

func xxhLane1(h uint64, c byte) uint64 {
	h ^= uint64(c) * xxhPrime5
	return bits.RotateLeft64(h, 11) * xxhPrime1
}

func xxhAvalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= xxhPrime2
	h ^= h >> 29
	h *= xxhPrime3
	return h ^ h>>32
}

// inlineHash: hash short keys in place in the Wasm build. Natively xxhash's assembly is faster than the pieces,
// and the constant leaves them out of the native build, unless the build tag
// hashlb_inlinehash asks for them (xxh64_inline_test.go tests decide's
// block so, natively).
const inlineHash = runtime.GOARCH == "wasm" || inlineHashTag

// xxhShort is XXH64 of a key shorter than 32 bytes from the pieces,
// unrolled as in decide: the persistence table's fingerprint in the Wasm
// build, where xxhash's loops cost a jump through the function's dispatch
// per lane.
func xxhShort(key string) uint64 {
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
