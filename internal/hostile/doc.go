// Package hostile is the hostile request corpus: requests an attacker can send
// to a proxy running hashlb, grouped by class (deep JSON in JWTs, long inputs
// to every expression function, thousands of header lines, forged upstream
// headers, invalid UTF-8 and NUL, malformed addresses, absolute-form URLs…),
// and a benign corpus of the same size to compare against.
//
// It is test data only: the e2e tests (hostsim stress, the V8 check, which
// reads it as JSON) and lbcore's fuzz seeds use it, and nothing in the module
// imports it. It is deterministic: the same call returns the same requests.
//
// Its parts, by file: the Request type, the corpus and its class names
// (hostile.go); the classes, each a function building its requests
// (classes.go); and the benign corpus (benign.go).
package hostile
