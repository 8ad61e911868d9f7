//go:build !wasip1

package main

import "time"

// wallClock is time.Now outside Wasm (the SDK's native test host).
func wallClock() time.Time { return time.Now() }
