package envoy

// BenchmarkEnvoyReconfigure: what a new plugin configuration of 10^4
// services costs real Envoy, the way hashlb-controller changes one
// (configs/envoy-ecds.yaml): the filter's configuration comes from an ECDS
// file (path_config_source), and each change is a new file renamed into
// place with one pod rescheduled to a new address. A fixed-rate load runs
// throughout; the benchmark reports
//
//   - configure-ms-p50/max: the per-worker time of proxy_on_configure, as
//     the filter logs it on the host's clock ("hashlb: configured N services
//     in X ms", filter/plugin.go), the median and the largest over every
//     worker and every change (main-configure-ms-p50: the main thread's,
//     which serves no requests);
//   - worker-cpu-ms-per-change: the CPU time each worker thread used from
//     the rename until every worker had configured, less what the load
//     alone used in as long (/proc/PID/task/TID/schedstat; Envoy's log
//     names threads by their Linux id): unlike wall time, not inflated by
//     other processes on the machine;
//   - the p50 and p99 of the requests sent while a change was being applied
//     (from the rename until the last worker logged its configure, plus
//     reconfigWindowPad), against those of the steady load before.
//
//	go test ./e2e/envoy -run '^$' -bench BenchmarkEnvoyReconfigure -benchtime 1x
//
// The services' addresses are 127.x.y.1:PORT, all answered by one backend
// bound on 0.0.0.0:PORT, and the cluster is ORIGINAL_DST on the upstream
// header (configs/envoy-original-dst.yaml), so every service is reachable
// and no cluster lists 10^4 endpoints. Benchmarks report; they assert only
// that every request was answered by the backend and every change applied.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

const (
	reconfigServices  = 10_000
	reconfigWorkers   = 2                       // --concurrency: the machine has 2 cores
	reconfigRate      = 200                     // requests per second, open loop
	reconfigSteady    = 3 * time.Second         // steady load measured before the changes
	reconfigChanges   = 6                       // configuration changes measured
	reconfigGap       = 1500 * time.Millisecond // between the end of one change and the next
	reconfigWindowPad = 100 * time.Millisecond  // a change's window goes on this long after its last configure
	reconfigKeys      = 32                      // distinct request paths: a few upstream hosts, warm pools
)

// reconfigPlugin is hashlb's configuration: n services named like a
// controller's pods (name = hashId = pod, sorted), pod moved rescheduled to
// a new address (-1: none), all on port.
func reconfigPlugin(n, moved, port int) string {
	var b strings.Builder
	b.WriteString(`{"lbMethod":"URLHASH","upstreamHeader":"x-envoy-original-dst-host","upstreamCount":1,"services":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		ip := fmt.Sprintf("127.%d.%d.1", 1+i/250, 1+i%250)
		if i == moved {
			ip = fmt.Sprintf("127.%d.%d.2", 1+i/250, 1+i%250)
		}
		fmt.Fprintf(&b, `{"name":"web-%05d","hashId":"web-%05d","address":"%s:%d"}`, i, i, ip, port)
	}
	b.WriteString(`]}`)
	return b.String()
}

// reconfigBootstrap is configs/envoy-ecds.yaml's shape: hashlb's filter
// from the ECDS file ecds/hashlb.json of the work dir (written with
// ecdsFile), the ORIGINAL_DST cluster on the upstream header.
func reconfigBootstrap(t testing.TB) []byte {
	t.Helper()
	return bootstrap{listeners: []listenerSpec{{name: "hashlb_listener", ecdsPath: "ecds/hashlb.json", ecdsName: "hashlb", cluster: "hashlb_upstream"}},
		clusters: []*cluster{originalDstCluster("hashlb_upstream")}}.yaml(t)
}

// reconfigLine is the filter's log line after a configure; Envoy's log
// line starts with its time and thread id.
var reconfigLine = regexp.MustCompile(`^\[([0-9-]+ [0-9:.]+)\]\[(\d+)\].*hashlb: configured (\d+) services in ([0-9.]+) ms`)

type reconfigured struct {
	at     time.Time
	thread string
	ms     float64
}

// reconfigLog returns every configure line of log with 10^4 services.
func reconfigLog(log string) []reconfigured {
	var out []reconfigured
	for _, l := range strings.Split(log, "\n") {
		m := reconfigLine.FindStringSubmatch(l)
		if m == nil || m[3] != strconv.Itoa(reconfigServices) {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05.000", m[1], time.Local)
		if err != nil {
			continue
		}
		ms, _ := strconv.ParseFloat(m[4], 64)
		out = append(out, reconfigured{at, m[2], ms})
	}
	return out
}

// sample is one request of the load: when it was due and how long it took
// from then (an open loop: a late send counts against the proxy).
type reconfigSample struct {
	due time.Time
	d   time.Duration
	err error
}

// reconfigLoad sends GETs to url at rate per second until stop is closed, each
// due at its own time, and returns every sample.
func reconfigLoad(url string, rate int, stop <-chan struct{}) []reconfigSample {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var mu sync.Mutex
	var out []reconfigSample
	var wg sync.WaitGroup
	every := time.Second / time.Duration(rate)
	start := time.Now()
	for k := 0; ; k++ {
		due := start.Add(time.Duration(k) * every)
		select {
		case <-stop:
			wg.Wait()
			return out
		case <-time.After(time.Until(due)):
		}
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			resp, err := client.Get(fmt.Sprintf("%s/obj/%d", url, k%reconfigKeys))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			s := reconfigSample{due: due, d: time.Since(due), err: err}
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
		}(k)
	}
}

// reconfigThreadCPU is the CPU time thread tid of process pid has run
// (/proc/PID/task/TID/schedstat, first field, in nanoseconds).
func reconfigThreadCPU(pid int, tid string) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, tid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("schedstat of %d/%s: %q", pid, tid, b)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err
}

func reconfigQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func reconfigMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func BenchmarkEnvoyReconfigure(b *testing.B) {
	for _, bin := range envoyrun.Binaries(b) {
		b.Run(bin.Name(), func(b *testing.B) {
			for b.Loop() {
				envoyReconfigure(b, bin)
			}
		})
	}
}

func envoyReconfigure(b *testing.B, bin envoyrun.Binary) {
	// One backend for every service: bound on every address, so on all of
	// 127.0.0.0/8.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := envoyrun.WorkDir(b)
	ecds := filepath.Join(dir, "ecds", "hashlb.json")
	writeAtomic(b, ecds, ecdsFile(b, "hashlb", "0", []byte(reconfigPlugin(reconfigServices, -1, port))))
	e := envoyrun.Start(b, bin, envoyrun.Options{Bootstrap: reconfigBootstrap(b), Dir: dir, Concurrency: reconfigWorkers})
	// Envoy's main thread is the one that logs its start ([main]); the
	// others are the workers. Envoy's log names threads by their Linux id.
	mainThread := ""
	if m := regexp.MustCompile(`\]\[(\d+)\]\[info\]\[main\]`).FindStringSubmatch(e.Log()); m != nil {
		mainThread = m[1]
	}
	// waitConfigured waits until the log holds, past its first had configure
	// lines, one from every worker, and returns them all. (The main thread
	// configures too, in its own VMs: not a worker's cost.)
	waitConfigured := func(had int) []reconfigured {
		deadline := time.Now().Add(90 * time.Second)
		for {
			all := reconfigLog(e.Log())
			threads := map[string]bool{}
			for _, c := range all[min(had, len(all)):] {
				if c.thread != mainThread {
					threads[c.thread] = true
				}
			}
			if len(threads) >= reconfigWorkers {
				return all[had:]
			}
			if time.Now().After(deadline) {
				b.Fatalf("envoy %s: no configure of %d services on %d workers within 90 s\n%s", bin.Version, reconfigServices, reconfigWorkers, e.LogTail(30))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	first := waitConfigured(0)
	var workers []string
	for _, c := range first {
		if c.thread != mainThread && !slices.Contains(workers, c.thread) {
			workers = append(workers, c.thread)
		}
	}
	// workersCPU is the CPU time of every worker thread so far.
	workersCPU := func() []time.Duration {
		out := make([]time.Duration, len(workers))
		for i, tid := range workers {
			d, err := reconfigThreadCPU(e.Pid(), tid)
			if err != nil {
				b.Fatal(err)
			}
			out[i] = d
		}
		return out
	}
	url := "http://" + e.MustListener(b, "hashlb_listener")
	if resp, err := http.Get(url + "/obj/0"); err != nil || resp.StatusCode != 200 {
		b.Fatalf("first request: %v %v\n%s", resp, err, e.LogTail(30))
	}

	stop := make(chan struct{})
	var load []reconfigSample
	done := make(chan struct{})
	go func() { load = reconfigLoad(url, reconfigRate, stop); close(done) }()
	cpu0, t0 := workersCPU(), time.Now()
	time.Sleep(reconfigSteady)
	steadyEnd := time.Now()
	// The workers' CPU rate under the load alone: what a change's window
	// would have cost them without the change.
	var steadyRate []float64
	for i, d := range workersCPU() {
		steadyRate = append(steadyRate, float64(d-cpu0[i])/float64(steadyEnd.Sub(t0)))
	}
	var changeCPU []float64 // per worker per change, ms
	type window struct{ from, to time.Time }
	var windows []window
	var applied []reconfigured
	had := len(reconfigLog(e.Log()))
	for v := 1; v <= reconfigChanges; v++ {
		cpuFrom, from := workersCPU(), time.Now()
		writeAtomic(b, ecds, ecdsFile(b, "hashlb", strconv.Itoa(v), []byte(reconfigPlugin(reconfigServices, v, port))))
		got := waitConfigured(had)
		cpuTo, until := workersCPU(), time.Now()
		for i := range workers {
			extra := float64(cpuTo[i]-cpuFrom[i]) - steadyRate[i]*float64(until.Sub(from))
			changeCPU = append(changeCPU, extra/1e6)
		}
		had += len(got)
		to := from
		for _, c := range got {
			if at := c.at.Add(time.Millisecond); at.After(to) { // the log's time is to the millisecond
				to = at
			}
		}
		windows = append(windows, window{from, to.Add(reconfigWindowPad)})
		applied = append(applied, got...)
		time.Sleep(reconfigGap)
	}
	close(stop)
	<-done

	var steady, during []time.Duration
	errs := 0
	for _, s := range load {
		if s.err != nil {
			errs++
			if errs <= 3 {
				b.Errorf("request due at %v: %v", s.due.Format("15:04:05.000"), s.err)
			}
			continue
		}
		if s.due.Before(steadyEnd) {
			steady = append(steady, s.d)
			continue
		}
		for _, w := range windows {
			if !s.due.Before(w.from) && s.due.Before(w.to) {
				during = append(during, s.d)
			}
		}
	}
	if errs > 0 {
		b.Errorf("%d of %d requests failed", errs, len(load))
	}
	if len(during) == 0 || len(steady) == 0 {
		b.Fatalf("no requests measured: %d steady, %d during", len(steady), len(during))
	}
	var cms, mainMS []float64
	threads := map[string]bool{}
	for _, c := range applied {
		if c.thread == mainThread {
			mainMS = append(mainMS, c.ms)
			continue
		}
		cms = append(cms, c.ms)
		threads[c.thread] = true
	}
	if len(cms) < reconfigChanges*reconfigWorkers {
		b.Fatalf("%d worker configures for %d changes on %d workers", len(cms), reconfigChanges, reconfigWorkers)
	}
	slices.Sort(cms)
	slices.Sort(mainMS)
	var firstMS []string
	for _, c := range first {
		firstMS = append(firstMS, c.thread+": "+strconv.FormatFloat(c.ms, 'f', 1, 64))
	}
	slices.Sort(changeCPU)
	b.Logf("envoy %s: first configure (thread: ms, main %s) %s; %d changes: workers (%d threads) %v ms, main thread %v ms; worker CPU per change over the load's %v ms; %d steady requests, %d during",
		bin.Version, mainThread, strings.Join(firstMS, ", "), reconfigChanges, len(threads), cms, mainMS, changeCPU, len(steady), len(during))
	b.ReportMetric(changeCPU[len(changeCPU)/2], "worker-cpu-ms-per-change")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(cms[len(cms)/2], "configure-ms-p50")
	b.ReportMetric(cms[len(cms)-1], "configure-ms-max")
	if len(mainMS) > 0 {
		b.ReportMetric(mainMS[len(mainMS)/2], "main-configure-ms-p50")
	}
	sp50, sp99 := reconfigQuantile(steady, 0.5), reconfigQuantile(steady, 0.99)
	dp50, dp99 := reconfigQuantile(during, 0.5), reconfigQuantile(during, 0.99)
	b.ReportMetric(reconfigMS(sp50), "steady-p50-ms")
	b.ReportMetric(reconfigMS(sp99), "steady-p99-ms")
	b.ReportMetric(reconfigMS(dp50), "during-p50-ms")
	b.ReportMetric(reconfigMS(dp99), "during-p99-ms")
	b.ReportMetric(float64(dp99)/float64(sp99), "p99-during/steady")
}
