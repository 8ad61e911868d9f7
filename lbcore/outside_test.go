package lbcore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A configuration given its services from outside decides exactly as one
// that lists them.
func TestWithServicesDecidesAsTheServicesArray(t *testing.T) {
	const n = 7
	var list []string
	var given []Service
	for i := range n {
		addr := fmt.Sprintf("10.0.0.%d:80", i+1)
		w := i%3 + 1
		list = append(list, fmt.Sprintf(`{"name":"s%d","address":%q,"weight":%d}`, i, addr, w))
		given = append(given, Service{Name: fmt.Sprintf("s%d", i), Address: addr, Weight: w, Enabled: true})
	}
	want, err := ParseConfig([]byte(`{"lbMethod":"URLHASH","services":[` + strings.Join(list, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	base, err := ParseConfig([]byte(`{"lbMethod":"URLHASH","services":[{"name":"x","address":"127.0.0.1:1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := base.WithServices(given)
	if err != nil {
		t.Fatal(err)
	}
	if len(base.Services) != 1 {
		t.Fatalf("WithServices changed its receiver: %d services", len(base.Services))
	}
	bw, bg := NewBalancer(want, 0), NewBalancer(got, 0)
	for i := range 500 {
		r := Request{Target: fmt.Sprintf("/k/%d", i)}
		dw, dg := bw.Decide(&r, time.Time{}), bg.Decide(&r, time.Time{})
		if dw.At(0) != dg.At(0) {
			t.Fatalf("%s: services array chose %d, WithServices %d", r.Target, dw.At(0), dg.At(0))
		}
	}
}

func TestWithServicesRefuses(t *testing.T) {
	base, err := ParseConfig([]byte(`{"services":[{"name":"x","address":"127.0.0.1:1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		svcs []Service
		want string
	}{
		{nil, "no services"},
		{[]Service{{Name: "a", Address: "nope"}}, "services[0].address"},
		{[]Service{{Name: "a", Address: "1.2.3.4:5", Weight: 101}}, "services[0].weight: 101 is out of range"},
		{[]Service{{Name: "a", Address: "1.2.3.4:5"}, {Name: "a", Address: "1.2.3.4:6"}}, `services[1].name: "a" is already used`},
		{[]Service{{Name: "a", Address: "1.2.3.4:5"}, {Name: "b", Address: "1.2.3.4:5"}}, "services[1].address"},
		{[]Service{{Name: "a", Address: "1.2.3.4:5", HashID: "h"}, {Name: "b", Address: "1.2.3.4:6", HashID: "h"}}, "same identity"},
	} {
		if _, err := base.WithServices(c.svcs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error with %q", c.svcs, err, c.want)
		}
	}
	// A cluster's hosts are not bounded by the services array's maximum.
	many := make([]Service, 100001)
	for i := range many {
		many[i] = Service{Name: fmt.Sprint("h", i), Address: fmt.Sprintf("10.%d.%d.%d:80", i>>16, i>>8&255, i&255)}
	}
	if _, err := base.WithServices(many); err != nil {
		t.Errorf("100001 services: %v", err)
	}
}
