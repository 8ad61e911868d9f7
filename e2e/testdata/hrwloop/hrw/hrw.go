// Package hrw is the decision loop R1 times twice, compiled natively (e2e's
// benchmark) and into e2e/testdata/hrwloop's Wasm module: URLHASH rendezvous
// ranking over n services of weight 1, cycling through 16 request targets.
package hrw

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// Loop holds a balancer over n services and the requests it decides.
type Loop struct {
	bal  *lbcore.Balancer
	reqs [16]lbcore.Request
	dec  lbcore.Decision
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New returns the loop for n services s0..s(n-1).
func New(n int) (*Loop, error) {
	var b strings.Builder
	b.WriteString(`{"lbMethod":"URLHASH","services":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"s%d","address":"10.0.%d.%d:80"}`, i, i/250, i%250+1)
	}
	b.WriteString("]}")
	c, err := lbcore.ParseConfig([]byte(b.String()))
	if err != nil {
		return nil, err
	}
	l := &Loop{bal: lbcore.NewBalancer(c, 0)}
	for i := range l.reqs {
		l.reqs[i] = lbcore.Request{Target: fmt.Sprintf("/static/js/app.%d.js?v=12", i)}
	}
	return l, nil
}

// Run makes iters decisions and returns the sum of the chosen indexes (so
// that nothing is optimised away). It decides as the filter does, into one
// Decision kept across requests (lbcore.Balancer.DecideInto).
func (l *Loop) Run(iters int) int {
	sum := 0
	d := &l.dec
	for i := 0; i < iters; i++ {
		l.bal.DecideInto(d, &l.reqs[i&15], epoch)
		sum += d.At(0)
	}
	return sum
}
