// Command testprogress reads "go test -json" on stdin and prints progress a
// person can follow: a line when a package starts and when it ends (ok or
// FAIL, with its time), every 30 seconds what is still running with the
// last line each running test printed (so a long step says what it does: the
// controller's tests building kube-apiserver on a fresh machine), the output
// of each failed test, and a summary (each package's time and the ten
// slowest top-level tests). A line a package prints outside its tests
// that starts with "summary: " (e2e/envoy's TestMain: its Envoys' start-up
// time) is printed as it comes. It exits 1 when a test, a package or
// a build failed, or when the input ends in the middle of a package.
//
//	go test -json ./... | go run ./tools/testprogress
//
// The command is main.go.
package main
