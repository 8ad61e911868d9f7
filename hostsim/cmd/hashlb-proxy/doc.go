// Command hashlb-proxy is a loopback HTTP reverse proxy that runs the hashlb
// proxy-wasm module under hostsim, the way Envoy would: N workers (VMs),
// requests spread over them, each request forwarded to the first address of
// the configured upstream header, as Envoy's ORIGINAL_DST cluster does.
//
// With no flags it loads dist/hashlb.wasm and configs/demo.json, starts one
// demo backend on each service address of that config (each answers with its
// own name), listens on 127.0.0.1:10000 and prints a curl line to try. It is a
// test and demo host; production is Envoy or Istio.
//
// A request whose filter pauses (a module waiting on a callout) is held until
// the module resumes it, answers it or closes it, or the client goes away.
// -cluster NAME=HOST:PORT makes the Envoy cluster NAME reach HOST:PORT with
// asynchronous callouts (repeatable); -etcd starts a real etcd server in
// process on a free loopback port and maps cluster "etcd" to it (-etcd-dir
// keeps its data); -fleet N runs N independent proxies, each with its own
// shared data as separate Envoy processes, on consecutive ports from
// -listen, all with the same configuration and clusters:
//
//	go run ./hostsim/cmd/hashlb-proxy -etcd -fleet 3 -config configs/fleet.json
//
// With -tcp ADDR it is a TCP proxy for a network-filter configuration instead
// (tcp.go).
//
// Its parts, by file: the flags, the configuration's host settings and the
// start of each proxy of the fleet (main.go); the HTTP side, one hostsim
// stream per request (proxy.go); the TCP side (tcp.go); the demo backends,
// alone with -backends-only (backends.go); -cluster and the fleet's
// addresses (fleet.go); the environment -env gives the VMs, copied from this
// process's as Envoy's host_env_keys does (env.go); and the in-process etcd
// of -etcd (etcd.go).
package main
