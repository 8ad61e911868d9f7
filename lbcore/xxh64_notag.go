//go:build !hashlb_inlinehash

package lbcore

// inlineHashTag is false without the build tag hashlb_inlinehash (xxh64_tag.go).
const inlineHashTag = false
