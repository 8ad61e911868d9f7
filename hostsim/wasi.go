package hostsim

import (
	"crypto/rand"
	"sort"
)

// WASI errno values cpp-host returns (src/exports.cc).
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
	errnoNoent   = 44
	errnoNosys   = 52
	errnoNotdir  = 20
	errnoNotsup  = 58
)

// wasiFuncs returns the WASI functions of profile p, each a host function of
// its own, implemented after cpp-host's src/exports.cc (wasi_unstable_*),
// which Envoy registers under both wasi_unstable and wasi_snapshot_preview1.
// wazero's own WASI is not used: it is kinder than Envoy (it honours
// fd_fdstat_set_flags and sleeps in poll_oneoff).
func wasiFuncs(p *profile) []hostFunc {
	poll := hostFunc{"poll_oneoff", "iiii", "i", wasiPollOneoffENOSYS}
	if p.pollOK {
		poll.fn = wasiPollOneoffZero
	}
	all := append([]hostFunc{poll}, wasiCommon...)
	var out []hostFunc
	for _, f := range all {
		if p.wasi[f.name] {
			out = append(out, f)
		}
	}
	return out
}

func ret(errno uint64) func(*vm, []uint64) uint64 {
	return func(*vm, []uint64) uint64 { return errno }
}

// stdio returns a stub that gives EBADF for fds other than 1 and 2, else ok.
func stdio(ok uint64) func(*vm, []uint64) uint64 {
	return func(_ *vm, p []uint64) uint64 {
		if fd := uint32(p[0]); fd != 1 && fd != 2 {
			return errnoBadf
		}
		return ok
	}
}

var wasiCommon = []hostFunc{
	{"args_get", "ii", "i", ret(errnoSuccess)},
	{"args_sizes_get", "ii", "i", wasiArgsSizesGet},
	{"environ_get", "ii", "i", wasiEnvironGet},
	{"environ_sizes_get", "ii", "i", wasiEnvironSizesGet},
	{"clock_time_get", "iIi", "i", wasiClockTimeGet},
	{"clock_res_get", "ii", "i", wasiClockResGet},
	{"random_get", "ii", "i", wasiRandomGet},
	{"fd_write", "iiii", "i", wasiFdWrite},
	{"fd_read", "iiii", "i", ret(errnoNosys)},
	{"fd_seek", "iIii", "i", wasiLogged("wasi_unstable fd_seek")},
	{"fd_close", "i", "i", wasiLogged("wasi_unstable fd_close")},
	{"fd_fdstat_get", "ii", "i", wasiFdFdstatGet},
	{"fd_fdstat_set_flags", "ii", "i", ret(errnoNosys)},
	{"fd_prestat_get", "ii", "i", ret(errnoBadf)},
	{"fd_prestat_dir_name", "iii", "i", ret(errnoNosys)},
	{"path_open", "iiiiiIIii", "i", ret(errnoNoent)},
	{"proc_exit", "i", "", wasiProcExit},
	{"sched_yield", "", "i", ret(errnoSuccess)},
	// Added by cpp-host PR #533 (envoy-1.39): stubs with cpp-host's codes.
	{"fd_advise", "iIIi", "i", ret(errnoSuccess)},
	{"fd_allocate", "iII", "i", stdio(errnoSuccess)},
	{"fd_datasync", "i", "i", stdio(errnoSuccess)},
	{"fd_fdstat_set_rights", "iII", "i", stdio(errnoSuccess)},
	{"fd_filestat_get", "ii", "i", ret(errnoBadf)},
	{"fd_filestat_set_size", "iI", "i", stdio(errnoSuccess)},
	{"fd_filestat_set_times", "iIIi", "i", stdio(errnoSuccess)},
	{"fd_pread", "iiiIi", "i", ret(errnoNosys)},
	{"fd_pwrite", "iiiIi", "i", wasiFdPwrite},
	{"fd_readdir", "iiiIi", "i", wasiZeroWord(4, errnoNotdir)},
	{"fd_renumber", "ii", "i", wasiFdRenumber},
	{"fd_sync", "i", "i", stdio(errnoSuccess)},
	{"fd_tell", "ii", "i", wasiFdTell},
	{"path_create_directory", "iii", "i", ret(errnoNotsup)},
	{"path_filestat_get", "iiiii", "i", ret(errnoNotsup)},
	{"path_filestat_set_times", "iiiiIIi", "i", ret(errnoNotsup)},
	{"path_link", "iiiiiii", "i", ret(errnoNotsup)},
	{"path_readlink", "iiiiii", "i", wasiZeroWord(5, errnoNotsup)},
	{"path_remove_directory", "iii", "i", ret(errnoNotsup)},
	{"path_rename", "iiiiii", "i", ret(errnoNotsup)},
	// cpp-host declares path_symlink with four parameters (no new_path_len), so a
	// module importing the standard five-parameter form fails to link there too.
	{"path_symlink", "iiii", "i", ret(errnoNotsup)},
	{"path_unlink_file", "iii", "i", ret(errnoNotsup)},
	{"sock_accept", "iii", "i", wasiZeroWord(2, errnoNotsup)},
	{"sock_recv", "iiiiii", "i", wasiSockRecv},
	{"sock_send", "iiiii", "i", wasiZeroWord(4, errnoNotsup)},
	{"sock_shutdown", "ii", "i", ret(errnoNotsup)},
}

// wasiPollOneoffENOSYS is poll_oneoff before cpp-host PR #533: 52 ENOSYS, which
// Go's runtime turns into "fatal error: poll_oneoff failed".
func wasiPollOneoffENOSYS(*vm, []uint64) uint64 { return errnoNosys }

// wasiPollOneoffZero is poll_oneoff after PR #533: nevents = 0, success, no sleep.
func wasiPollOneoffZero(v *vm, p []uint64) uint64 {
	if !v.putU32(p[3], 0) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiArgsSizesGet implements args_sizes_get: no arguments.
func wasiArgsSizesGet(v *vm, p []uint64) uint64 {
	if !v.putU32(p[0], 0) || !v.putU32(p[1], 0) {
		return errnoFault
	}
	return errnoSuccess
}

func (v *vm) environ() []string {
	var out []string
	for k, val := range v.h.cfg.Env {
		out = append(out, k+"="+val+"\x00")
	}
	sort.Strings(out)
	return out
}

// wasiEnvironSizesGet implements environ_sizes_get over Config.Env.
func wasiEnvironSizesGet(v *vm, p []uint64) uint64 {
	env, size := v.environ(), 0
	for _, e := range env {
		size += len(e)
	}
	if !v.putU32(p[0], uint32(len(env))) || !v.putU32(p[1], uint32(size)) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiEnvironGet implements environ_get over Config.Env.
func wasiEnvironGet(v *vm, p []uint64) uint64 {
	arr, buf := p[0], p[1]
	for _, e := range v.environ() {
		if !v.putU32(arr, uint32(buf)) || !v.mod.Memory().Write(uint32(buf), []byte(e)) {
			return errnoFault
		}
		arr += 4
		buf += uint64(len(e))
	}
	return errnoSuccess
}

// wasiClockTimeGet implements clock_time_get: realtime and monotonic read the
// virtual clock's snapshot for this call; other clocks are ENOTSUP.
func wasiClockTimeGet(v *vm, p []uint64) uint64 {
	var t uint64
	switch uint32(p[0]) {
	case 0:
		t = uint64(v.now.UnixNano())
	case 1:
		t = v.monotonic()
	default:
		return errnoNotsup
	}
	if !v.putU64(p[2], t) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiClockResGet implements clock_res_get: 1 ns for realtime and monotonic.
func wasiClockResGet(v *vm, p []uint64) uint64 {
	if id := uint32(p[0]); id > 1 {
		return errnoNotsup
	}
	if !v.putU64(p[1], 1) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiRandomGet implements random_get: at most 64 KiB per call, else EINVAL.
func wasiRandomGet(v *vm, p []uint64) uint64 {
	n := uint32(p[1])
	if n > 64*1024 {
		return errnoInval
	}
	if n == 0 {
		return errnoSuccess
	}
	b := make([]byte, n)
	rand.Read(b)
	if !v.mod.Memory().Write(uint32(p[0]), b) {
		return errnoFault
	}
	return errnoSuccess
}

// writev logs the iovecs of fd 1 (info) or 2 (error) as one line, one trailing
// newline removed (cpp-host writevImpl).
func (v *vm) writev(fd, iovs, n uint32) (uint32, uint64) {
	level := LogInfo
	switch fd {
	case 1:
	case 2:
		level = LogError
	default:
		return 0, errnoBadf
	}
	var s []byte
	for i := uint32(0); i < n; i++ {
		iov, ok := v.mem(uint64(iovs+8*i), 8)
		if !ok {
			return 0, errnoFault
		}
		ptr := uint32(iov[0]) | uint32(iov[1])<<8 | uint32(iov[2])<<16 | uint32(iov[3])<<24
		l := uint32(iov[4]) | uint32(iov[5])<<8 | uint32(iov[6])<<16 | uint32(iov[7])<<24
		b, ok := v.mem(uint64(ptr), uint64(l))
		if !ok {
			return 0, errnoFault
		}
		s = append(s, b...)
	}
	written := uint32(len(s))
	if written > 0 {
		if s[len(s)-1] == '\n' {
			s = s[:len(s)-1]
		}
		v.h.logs.add(v.id, level, string(s))
	}
	return written, errnoSuccess
}

// wasiFdWrite implements fd_write: stdout → info log, stderr → error log, others EBADF.
func wasiFdWrite(v *vm, p []uint64) uint64 { return wasiWrite(v, p, p[3]) }

// wasiFdPwrite implements fd_pwrite (envoy-1.39) like fd_write.
func wasiFdPwrite(v *vm, p []uint64) uint64 { return wasiWrite(v, p, p[4]) }

// wasiWrite writes the iovecs of fd_write's and fd_pwrite's first three
// arguments and stores the count written at nwritten.
func wasiWrite(v *vm, p []uint64, nwritten uint64) uint64 {
	n, errno := v.writev(uint32(p[0]), uint32(p[1]), uint32(p[2]))
	if errno != errnoSuccess {
		return errno
	}
	if !v.putU32(nwritten, n) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiLogged returns a stub that logs msg as an error and succeeds, like
// cpp-host's fd_seek and fd_close (Envoy's Context::error logs and returns).
func wasiLogged(msg string) func(*vm, []uint64) uint64 {
	return func(v *vm, _ []uint64) uint64 {
		v.h.logs.add(v.id, LogError, msg)
		return errnoSuccess
	}
}

// wasiFdFdstatGet implements fd_fdstat_get: for fds 1 and 2 the 24-byte fdstat
// {filetype 0, flags 0, rights_base 64 (FD_WRITE)} as three u64 words, so Go
// keeps stdio blocking; EBADF for every other fd.
func wasiFdFdstatGet(v *vm, p []uint64) uint64 {
	if fd := uint32(p[0]); fd != 1 && fd != 2 {
		return errnoBadf
	}
	var b [24]byte
	b[8] = 64
	if !v.mod.Memory().Write(uint32(p[1]), b[:]) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiProcExit implements proc_exit: Envoy logs and returns. A Go module then
// runs on: os.Exit returns to its caller and the VM stays alive (see
// TestProcExitLogsAndReturns). Host.Exited reports the call.
func wasiProcExit(v *vm, p []uint64) uint64 {
	v.h.logs.add(v.id, LogError, "wasi_unstable proc_exit")
	v.exitCode, v.exited = uint32(p[0]), true
	return 0
}

// wasiZeroWord returns a stub that stores a zero u32 at parameter i and returns errno.
func wasiZeroWord(i int, errno uint64) func(*vm, []uint64) uint64 {
	return func(v *vm, p []uint64) uint64 {
		if !v.putU32(p[i], 0) {
			return errnoFault
		}
		return errno
	}
}

// wasiFdRenumber implements fd_renumber: EBADF unless both are stdio, then ENOTSUP.
func wasiFdRenumber(_ *vm, p []uint64) uint64 {
	a, b := uint32(p[0]), uint32(p[1])
	if (a != 1 && a != 2) || (b != 1 && b != 2) {
		return errnoBadf
	}
	return errnoNotsup
}

// wasiFdTell implements fd_tell: offset 0 for stdio, EBADF otherwise.
func wasiFdTell(v *vm, p []uint64) uint64 {
	if fd := uint32(p[0]); fd != 1 && fd != 2 {
		return errnoBadf
	}
	if !v.putU64(p[1], 0) {
		return errnoFault
	}
	return errnoSuccess
}

// wasiSockRecv implements sock_recv: zero bytes, zero flags, ENOTSUP.
func wasiSockRecv(v *vm, p []uint64) uint64 {
	if !v.putU32(p[4], 0) || !v.mod.Memory().WriteUint16Le(uint32(p[5]), 0) {
		return errnoFault
	}
	return errnoNotsup
}
