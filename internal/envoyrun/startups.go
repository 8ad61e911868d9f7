package envoyrun

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// startups is what every Envoy that became ready took to get there, for
// StartupReport: most of it is V8 compiling the module (docs/testing.md).
var startups struct {
	sync.Mutex
	wall  []time.Duration // from exec to /ready answering LIVE
	cpu   []time.Duration // the process's CPU time then (every thread)
	label []string        // who started it (Options.Label)

	exited map[string]time.Duration // by label: the CPU time of its Envoys that exited, in all
}

// noteStartup records an Envoy, started by label, that became ready took
// wall since its start, and the CPU time its process pid had spent by then
// (none when /proc cannot say).
func noteStartup(label string, pid int, wall time.Duration) {
	cpu, _ := processCPU(pid)
	startups.Lock()
	defer startups.Unlock()
	startups.wall = append(startups.wall, wall)
	startups.cpu = append(startups.cpu, cpu)
	startups.label = append(startups.label, label)
}

// noteExit records that an Envoy started by label exited having spent cpu.
func noteExit(label string, cpu time.Duration) {
	startups.Lock()
	defer startups.Unlock()
	if startups.exited == nil {
		startups.exited = map[string]time.Duration{}
	}
	startups.exited[label] += cpu
}

// StartupReport is one line on the Envoys started so far: how many, their
// time to ready in all and its median and maximum, the CPU time they spent
// before it, and the labels (tests) whose Envoys spent the most CPU time
// in all; "" when none started.
func StartupReport() string {
	startups.Lock()
	defer startups.Unlock()
	n := len(startups.wall)
	if n == 0 {
		return ""
	}
	wall := slices.Clone(startups.wall)
	slices.Sort(wall)
	var sumWall, sumCPU time.Duration
	for i := range n {
		sumWall += wall[i]
		sumCPU += startups.cpu[i]
	}
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	line := fmt.Sprintf("envoyrun: %d Envoys started; time to ready %v in all (median %v, longest %v); their CPU time before ready %v in all",
		n, r(sumWall), r(wall[n/2]), r(wall[n-1]), r(sumCPU))
	return line + mostCPU(startups.label, startups.cpu, startups.exited, 12)
}

// mostCPU is "; most by: " and the k labels whose Envoys spent the most
// CPU time in all (exited: those that exited), each with its count of
// Envoys, their CPU time before ready and in all; "" when no Envoy has a
// label.
func mostCPU(labels []string, cpu []time.Duration, exited map[string]time.Duration, k int) string {
	type use struct {
		label string
		n     int
		cpu   time.Duration
	}
	by := map[string]*use{}
	var all []*use
	for i, l := range labels {
		if l == "" {
			continue
		}
		u := by[l]
		if u == nil {
			u = &use{label: l}
			by[l] = u
			all = append(all, u)
		}
		u.n++
		u.cpu += cpu[i]
	}
	if len(all) == 0 {
		return ""
	}
	slices.SortStableFunc(all, func(a, b *use) int { return int(exited[b.label] - exited[a.label]) })
	var b strings.Builder
	b.WriteString("; most by (Envoys: CPU before ready / in all): ")
	for i, u := range all[:min(k, len(all))] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d: %v / %v", u.label, u.n, u.cpu.Round(time.Second), exited[u.label].Round(time.Second))
	}
	return b.String()
}

// clockTick is the unit of /proc's CPU times (USER_HZ: 100 on Linux).
const clockTick = 10 * time.Millisecond

// processCPU is the user and system CPU time process pid has spent, every
// thread, from /proc/PID/stat (proc(5): fields 14 and 15).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start past the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] { // fields 14 (utime) and 15 (stime)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}
