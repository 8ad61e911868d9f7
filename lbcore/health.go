package lbcore

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"
)

// MaxHealthBodyBytes bounds how much of a probe's response body is read for
// expectBody: NetScaler's HTTP-ECV monitor finds its -recv text "anywhere in
// the first 24K bytes of the HTTP body", so an imported monitor keeps its
// meaning (HAProxy's http-check expect string searches its 16 KiB buffer).
const MaxHealthBodyBytes = 24 << 10

// MaxExpectBodyBytes bounds expectBody itself.
const MaxExpectBodyBytes = 1024

// RoundDue reports whether a probe round that was due at next has come,
// for a host that runs the check from a tick of period tick: a tick up to
// half a period early counts. Hosts do not tick exactly on time (Envoy's
// timers fire a little early or late), and without the slack a tick a
// millisecond before next would skip the round, making every interval one
// tick longer than configured (measured in Envoy: interval 1s probed about
// every 1.5 s, 6-7 probes in 7-11 s).
func RoundDue(now, next time.Time, tick time.Duration) bool {
	return !now.Before(next.Add(-tick / 2))
}

// NeedsBody reports whether a probe's verdict reads the response body.
func (h *HealthCheck) NeedsBody() bool { return h.ExpectBody != "" }

// Healthy reports whether a probe response passes: its status is one of
// ExpectedStatuses and, with ExpectBody, the first MaxHealthBodyBytes of body
// contain it. status 0 (no response) fails.
func (h *HealthCheck) Healthy(status int, body []byte) bool {
	if !h.ExpectedStatuses.contains(status) {
		return false
	}
	if h.ExpectBody == "" {
		return true
	}
	if len(body) > MaxHealthBodyBytes {
		body = body[:MaxHealthBodyBytes]
	}
	// The text's bytes, not a copy: a conversion over 32 bytes allocates.
	return bytes.Contains(body, unsafe.Slice(unsafe.StringData(h.ExpectBody), len(h.ExpectBody)))
}

// ProbeAddress is the address a probe of the service at addr goes to: addr,
// or its IP with Port when Port is set.
func (h *HealthCheck) ProbeAddress(addr string) string {
	if h.Port == 0 {
		return addr
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr // never: addresses are checked when the configuration is parsed
	}
	return netip.AddrPortFrom(ap.Addr(), uint16(h.Port)).String()
}

// ProbeAuthority is the :authority of a probe of the service at addr: Host,
// else the address probed.
func (h *HealthCheck) ProbeAuthority(addr string) string {
	if h.Host != "" {
		return h.Host
	}
	return h.ProbeAddress(addr)
}

// ServiceHealth is one service's health record. Every worker reads and
// writes the same record in shared data (encodeHealth), so an active probe
// made by one worker, or a failure seen by another, takes the service out
// for all of them.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type ServiceHealth struct {
	// Down is the active checks' verdict: DOWN after UnhealthyThreshold
	// failed probes in a row, UP again after HealthyThreshold good ones.
	// A service without a record is UP, so a filter's first configuration
	// serves at once; a service that a reconfiguration adds starts Pending.
	Down bool
	// Pending: DOWN because it was never probed (HealthBoard.Admit). Its
	// first probe decides: a good one brings it UP, as Envoy's first health
	// check of a new host does whatever healthy_threshold says.
	Pending bool
	// Streak counts consecutive probe results that go against Down.
	Streak uint8
	// Failures counts consecutive failed responses (passive health).
	Failures uint32
	// EjectedUntil is when a passive ejection ends (Unix milliseconds).
	EjectedUntil int64
}

// Selectable reports whether the record lets the service be chosen at now.
func (s *ServiceHealth) Selectable(now time.Time) bool {
	return !s.Down && now.UnixMilli() >= s.EjectedUntil
}

// Probe records one active probe result and reports whether Down changed.
func (h *HealthCheck) Probe(s *ServiceHealth, ok bool) (changed bool) {
	if s.Pending {
		s.Pending, s.Streak = false, 0
		s.Down = !ok
		return ok
	}
	if ok != s.Down { // the result agrees with the current state
		s.Streak = 0
		return false
	}
	if s.Streak < 255 {
		s.Streak++
	}
	need := h.UnhealthyThreshold
	if s.Down {
		need = h.HealthyThreshold
	}
	if int(s.Streak) < need {
		return false
	}
	s.Down, s.Streak = !s.Down, 0
	return true
}

// response records one upstream response (failed: its status is a failure
// status, or the connection failed) and reports whether the service is now
// ejected. An ejected service is selectable again after EjectionTime.
func (p *PassiveHealth) response(s *ServiceHealth, failed bool, now time.Time) (ejected bool) {
	if !failed {
		s.Failures = 0
		return false
	}
	s.Failures++
	if int(s.Failures) < p.ConsecutiveFailures {
		return false
	}
	s.Failures = 0
	s.EjectedUntil = now.Add(p.EjectionTime).UnixMilli()
	return true
}

// healthSize is the encoded size of a ServiceHealth.
const healthSize = 1 + 1 + 1 + 4 + 8

// encodeHealth appends the record's shared-data form to dst.
func encodeHealth(dst []byte, s *ServiceHealth) []byte {
	down := byte(0)
	switch {
	case s.Pending:
		down = 2
	case s.Down:
		down = 1
	}
	dst = append(dst, 1, down, s.Streak)
	dst = binary.LittleEndian.AppendUint32(dst, s.Failures)
	return binary.LittleEndian.AppendUint64(dst, uint64(s.EjectedUntil))
}

// decodeHealth reads a record; a value of any other shape reads as a
// healthy service (ok false), so a corrupt record can never take a service
// out for good.
func decodeHealth(b []byte) (s ServiceHealth, ok bool) {
	if len(b) != healthSize || b[0] != 1 {
		return ServiceHealth{}, false
	}
	s.Down, s.Pending, s.Streak = b[1] == 1 || b[1] == 2, b[1] == 2, b[2]
	s.Failures = binary.LittleEndian.Uint32(b[3:])
	s.EjectedUntil = int64(binary.LittleEndian.Uint64(b[7:]))
	return s, true
}
