//go:build hashlb_inlinehash

package lbcore

// inlineHashTag: the build tag hashlb_inlinehash has the native build hash
// short keys with xxh64.go's pieces, as the Wasm build does.
const inlineHashTag = true
