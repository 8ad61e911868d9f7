package hostsim

import (
	"fmt"
	"sync"
	"time"
)

// LogLevel is a proxy-wasm log level (spec: proxy_log).
type LogLevel uint32

// Log levels, numbered as in the ABI.
const (
	LogTrace LogLevel = iota
	LogDebug
	LogInfo
	LogWarn
	LogError
	LogCritical
)

var levelNames = []string{"trace", "debug", "info", "warn", "error", "critical"}

func (l LogLevel) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("level(%d)", uint32(l))
}

// LogEntry is one captured log line.
type LogEntry struct {
	Worker  int
	Level   LogLevel
	Message string
	At      time.Time // real time it was captured
}

type logStore struct {
	mu      sync.Mutex
	min     LogLevel
	out     interface{ Write([]byte) (int, error) }
	entries []LogEntry
}

func (s *logStore) add(worker int, l LogLevel, msg string) {
	if l < s.min {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, LogEntry{worker, l, msg, time.Now()})
	if s.out != nil {
		fmt.Fprintf(s.out, "[worker %d] %s: %s\n", worker, l, msg)
	}
}

// Logs returns a copy of every captured log line, in order.
func (h *Host) Logs() []LogEntry {
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	return append([]LogEntry(nil), h.logs.entries...)
}

// LogsAt returns the messages captured at exactly level l, in order.
func (h *Host) LogsAt(l LogLevel) []string {
	var out []string
	for _, e := range h.Logs() {
		if e.Level == l {
			out = append(out, e.Message)
		}
	}
	return out
}

// ResetLogs drops the captured log lines.
func (h *Host) ResetLogs() {
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	h.logs.entries = nil
}

var logFuncs = []hostFunc{
	{"proxy_log", "iii", "i", hostLog},
	{"proxy_get_status", "iii", "i", hostGetStatus},
}

var logLevelFunc = hostFunc{"proxy_get_log_level", "i", "i", hostGetLogLevel}

// hostLog implements proxy_log(level, message_data, message_size).
func hostLog(v *vm, p []uint64) uint64 {
	msg, ok := v.mem(p[1], p[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	if uint32(p[0]) > uint32(LogCritical) {
		return statusBadArgument
	}
	v.h.logs.add(v.id, LogLevel(p[0]), string(msg))
	return statusOK
}

// hostGetLogLevel implements proxy_get_log_level (ABI 0.2.1 only): Config.LogLevel.
func hostGetLogLevel(v *vm, p []uint64) uint64 {
	if !v.putU32(p[0], uint32(v.h.cfg.LogLevel)) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// hostGetStatus implements proxy_get_status: the status of the last gRPC call,
// which hostsim never makes, so code 0 and an empty message.
func hostGetStatus(v *vm, p []uint64) uint64 {
	if !v.putU32(p[0], 0) {
		return statusInvalidMemoryAccess
	}
	return v.copyOut(nil, p[1], p[2])
}
