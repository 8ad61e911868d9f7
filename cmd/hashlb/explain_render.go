package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// print writes the report to stdout, as JSON or as text; it returns 1 when
// the JSON cannot be made (reported on stderr), else 0.
func (r *report) print(stdout, stderr io.Writer, asJSON bool) int {
	if !asJSON {
		r.write(stdout)
		return 0
	}
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "hashlb explain: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return 0
}

// text writes the report's lines: a label in a column of 13, or a
// continuation indented to the same column.
type text struct{ out io.Writer }

func (t text) line(label, format string, a ...any) {
	fmt.Fprintf(t.out, "%-13s%s\n", label+":", fmt.Sprintf(format, a...))
}

func (t text) cont(format string, a ...any) {
	fmt.Fprintf(t.out, "%13s%s\n", "", fmt.Sprintf(format, a...))
}

// write prints the report as text.
func (r *report) write(out io.Writer) {
	t := text{out}
	r.writeRequest(t)
	r.writeInput(t)
	r.writeServices(out)
	r.writeSlowStart(t)
	r.writeChoice(t)
	r.writeSession(t)
	r.writePersistence(t)
}

// writeRequest prints the configuration and the request.
func (r *report) writeRequest(t text) {
	if r.Where != "" {
		t.line("config", "%s: %s", r.Config, r.Where)
		if r.Policy != nil {
			t.cont("the services are the cluster's hosts, from %s", r.Policy.Hosts)
		}
	} else {
		t.line("config", "%s", r.Config)
	}
	rq := r.Request
	t.line("request", "%s %s", rq.Method, strconv.Quote(rq.URL))
	if rq.Authority != "" {
		t.cont(":authority %s", rq.Authority)
	}
	if rq.Client != "" {
		t.cont("client %s", rq.Client)
	}
	if rq.Dest != "" {
		t.cont("received on %s", rq.Dest)
	}
	for _, h := range rq.Headers {
		t.cont("%s: %s", h[0], h[1])
	}
	for _, h := range r.Stripped {
		t.cont("%s: removed, as the module removes every client copy", h)
	}
}

// writeInput prints the method, what it reads, and the key it hashed.
func (r *report) writeInput(t text) {
	t.line("method", "%s (%s)", r.LBMethod, r.Settings)
	switch {
	case r.Input:
		t.line("input", "found; %s reads %s", r.LBMethod, strings.Join(r.Reads, ", "))
	case r.Backup != nil:
		t.line("input", "missing: %s found nothing to hash; it reads %s", r.LBMethod, strings.Join(r.Reads, ", "))
	default:
		t.line("input", "none: %s does not hash", r.LBMethod)
	}
	if r.Input {
		k, _ := hex.DecodeString(r.KeyHex)
		t.line("key", "%s", quoteKey(k))
		if r.KeyMeaning != "" {
			t.cont("%s", r.KeyMeaning)
		}
		t.line("key hash", "%s (xxhash64 of the key)", r.KeyHash)
	}
}

// writeServices prints the ranking (or the services, unranked) as a table.
func (r *report) writeServices(out io.Writer) {
	if r.Ranked {
		score := "score"
		if r.Weighted {
			score = "score (weighted: -weight/ln u)"
		}
		fmt.Fprintf(out, "ranking:     highest %s first\n", score)
	} else {
		fmt.Fprintln(out, "services:")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if r.Ranked {
		if r.Weighted {
			fmt.Fprintln(tw, "  rank\tservice\taddress\tweight\tscore\tunit score\tstate")
		} else {
			fmt.Fprintln(tw, "  rank\tservice\taddress\tweight\tscore\tstate")
		}
	} else {
		fmt.Fprintln(tw, "  service\taddress\tweight\tstate")
	}
	for _, s := range r.Services {
		rank := "-"
		if s.Rank > 0 {
			rank = strconv.Itoa(s.Rank)
		}
		switch {
		case !r.Ranked:
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", s.Name, s.Address, s.Weight, s.State)
		case r.Weighted:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%.6g\t%s\t%s\n", rank, s.Name, s.Address, s.Weight, *s.WeightedScore, s.Score, s.State)
		default:
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\n", rank, s.Name, s.Address, s.Weight, s.Score, s.State)
		}
	}
	tw.Flush()
}

// writeSlowStart prints where each ramping service is in its ramp.
func (r *report) writeSlowStart(t text) {
	for i, s := range r.SlowStart {
		f := fmt.Sprintf("%s ranks with weight %.4g of %d (%.1f %%), %s into a ramp of %s; full weight at %s",
			s.Name, s.Effective, s.Weight, s.Percent, s.Elapsed, s.Length, s.Ends)
		if i == 0 {
			t.line("slow start", "%s", f)
		} else {
			t.cont("%s", f)
		}
	}
}

// writeChoice prints the backup method, the choice and failover order, what
// depends on the worker, what the module writes, and the input caps.
func (r *report) writeChoice(t text) {
	if r.Backup != nil {
		t.line("backup", "%s", r.Backup.Why)
	}
	switch {
	case r.Chosen == nil && r.Policy != nil:
		t.line("chosen", "none: no host is selectable; the policy gives Envoy no host, and Envoy answers 503")
	case r.Chosen == nil:
		t.line("chosen", "none: no service is selectable; the module answers 503 %q", "no healthy service")
	default:
		t.line("chosen", "%s (%s), by %s (reason %s)", r.Chosen.Name, r.Chosen.Address, r.DecidedBy, r.Reason)
		var f []string
		for _, s := range r.Failover {
			f = append(f, fmt.Sprintf("%s (%s)", s.Name, s.Address))
		}
		switch {
		case len(f) > 0:
		case r.Policy != nil:
			f = append(f, "none: nothing else is selectable")
		case r.upstreamCount == 1:
			f = append(f, "none named: upstreamCount is 1")
		default:
			f = append(f, "none: nothing else is selectable")
		}
		t.line("failover", "%s", strings.Join(f, ", "))
		if r.Policy != nil {
			t.line("upstream", "the policy gives Envoy the host %s; a retry (retry_host_predicate previous_hosts) takes the first healthy host of the failover order not yet tried; no header is set", r.Chosen.Address)
		}
	}
	if r.WorkerNote != "" {
		t.line("note", "%s", r.WorkerNote)
	}
	if fs := r.FilterState; fs != nil {
		t.line("upstream", "filter state %s = %s (set_envoy_filter_state; an ORIGINAL_DST cluster connects there)", fs[0], fs[1])
	}
	for i, h := range r.Headers {
		if i == 0 {
			t.line("headers", "%s: %s", h[0], h[1])
		} else {
			t.cont("%s: %s", h[0], h[1])
		}
	}
	if r.Capped {
		t.line("input caps", "hit: an input was longer or deeper than a cap and was cut before deciding (docs/config.md, Input caps)")
	} else {
		t.line("input caps", "none hit")
	}
}

// writeSession prints what the request's session came to, when the
// configuration has one.
func (r *report) writeSession(t text) {
	s := r.Session
	if s == nil {
		return
	}
	t.line("session", "%s %s: %s", s.Type, s.Name, s.State)
	if s.Issued != "" {
		idle := ""
		if s.Idle != "" {
			idle = ", idle at " + s.Idle
		}
		t.cont("issued %s, last used %s; ends %s%s", s.Issued, s.LastUse, s.Expires, idle)
	}
	t.cont("%s", s.Outcome)
	if s.Sets != nil {
		t.cont("response: %s: %s", s.Sets[0], s.Sets[1])
	}
}

// writePersistence prints the persistence key and what the table does.
func (r *report) writePersistence(t text) {
	p := r.Persist
	if p == nil {
		t.line("persistence", "off")
		return
	}
	k, _ := hex.DecodeString(p.KeyHex)
	t.line("persistence", "key %s, the keys joined with \\x1f:", quoteKey(k))
	for _, pk := range p.Keys {
		t.cont("  %s = %s", pk.Expr, strconv.Quote(pk.Value))
	}
	t.cont("%s", p.Outcome)
}

// quoteKey writes key bytes as a Go string, with hex when they are not all
// printable.
func quoteKey(k []byte) string {
	q := strconv.Quote(string(k))
	printable := utf8.Valid(k)
	for _, r := range string(k) {
		printable = printable && unicode.IsPrint(r)
	}
	if !printable {
		q += " hex " + hex.EncodeToString(k)
	}
	if len(k) == 1 {
		return q + " (1 byte)"
	}
	return fmt.Sprintf("%s (%d bytes)", q, len(k))
}
