package lbcore

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestFastServicesAgree: for valid services arrays the fast decoder
// (validate_sections.go) accepts and gives exactly what the general one
// gives: same fields, same identities, same order.
func TestFastServicesAgree(t *testing.T) {
	for name, raw := range map[string]string{
		"pods":  string(podPoolConfig(1000, 7)),
		"mixed": `{"services":[{"address":"10.0.0.1:80","name":"a","weight":3,"enabled":false},{"name":"b\u002d1","address":"[2001:db8::1]:8080","hashId":"x"},{"hashId":"y","name":"c","address":"192.0.2.1:1","weight":100,"enabled":true}]}`,
	} {
		v := gjson.Get(raw, "services")
		fast, ok := fastServices(v)
		if !ok {
			t.Fatalf("%s: the fast decoder declined a valid array", name)
		}
		d := &decoder{}
		slow := d.servicesSlow("services", v)
		if len(d.errs) != 0 {
			t.Fatalf("%s: %v", name, d.errs)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s: fast and general decoders differ:\n%+v\n%+v", name, fast[:min(3, len(fast))], slow[:min(3, len(slow))])
		}
	}
}

// TestFastServicesDeclines: every problem makes the fast decoder decline,
// so that the general one reports it.
func TestFastServicesDeclines(t *testing.T) {
	many := string(podPoolConfig(10001, -1)) // one over the limit
	for _, raw := range []string{
		`[]`,
		`[{"name":"a","address":"10.0.0.1:80"},{"name":"a","address":"10.0.0.2:80"}]`,
		`[{"name":"a","address":"10.0.0.1:80"},{"name":"b","address":"10.0.0.1:80"}]`,
		`[{"name":"a","address":"10.0.0.1:80","hashId":"h"},{"name":"b","address":"10.0.0.2:80","hashId":"h"}]`,
		`[{"name":"a","address":"10.0.0.1:80","hashId":"10.0.0.2:80"},{"name":"b","address":"10.0.0.2:80"}]`,
		`[{"name":"a","address":"10.0.0.1:80","name":"b"}]`,
		`[{"name":"a","address":"10.0.0.1:80","port":1}]`,
		`[{"name":"a b","address":"10.0.0.1:80"}]`,
		`[{"name":"","address":"10.0.0.1:80"}]`,
		`[{"name":"a","address":"10.0.0.01:80"}]`,
		`[{"name":"a","address":"[::ffff:10.0.0.1]:80"}]`,
		`[{"name":"a","address":"10.0.0.1:0"}]`,
		`[{"name":"a","address":"10.0.0.1:80","weight":-1}]`,
		`[{"name":"a","address":"10.0.0.1:80","weight":1.5}]`,
		`[{"name":"a","address":"10.0.0.1:80","enabled":"yes"}]`,
		`[{"name":"a","address":"10.0.0.1:80","hashId":""}]`,
		`[{"name":"a"}]`,
		`[{"address":"10.0.0.1:80"}]`,
		`[1]`,
		gjson.Get(many, "services").Raw,
	} {
		if _, ok := fastServices(gjson.Parse(raw)); ok {
			t.Errorf("the fast decoder accepted %.80s", raw)
		}
	}
}

// TestRoundRobinStartClosedForm: a new Balancer's round robin starts where
// seed mod Σweight picks one by one would have left it (rrAdvance's closed
// form for equal weights, the loop otherwise), so the picks that follow are
// the same.
func TestRoundRobinStartClosedForm(t *testing.T) {
	pools := map[string][]Service{}
	for _, n := range []int{1, 3, 64, 1000} {
		var s []Service
		for i := 0; i < n; i++ {
			s = append(s, Service{Name: fmt.Sprint(i), Weight: 1, Enabled: true, ID: uint64(i) + 1})
		}
		pools[fmt.Sprintf("equal-%d", n)] = s
	}
	some := slices.Clone(pools["equal-64"])
	for i := range some {
		some[i].Enabled = i%5 != 0
		some[i].Weight = 7
	}
	pools["equal-some-disabled"] = some
	mixed := slices.Clone(pools["equal-64"])
	for i := range mixed {
		mixed[i].Weight = 1 + i%3
	}
	pools["mixed-weights"] = mixed
	for name, svcs := range pools {
		c := &Config{Services: svcs, LBMethod: MethodRoundRobin, BackupLBMethod: MethodLeastConnection, UpstreamCount: 1}
		for _, seed := range []uint64{0, 1, 2, 99, 12345, 1 << 40} {
			b := NewBalancer(c, seed)
			// The same start, one pick at a time.
			want := NewBalancer(c, seed)
			clear(want.rr)
			total := 0
			for _, s := range svcs {
				total += s.Weight
			}
			for k := want.seq % uint64(min(total, 1024)); k > 0; k-- {
				want.rrPick()
			}
			if !slices.Equal(b.rr, want.rr) {
				t.Fatalf("%s seed %d: round robin starts at %v, one pick at a time %v", name, seed, b.rr[:min(8, len(b.rr))], want.rr[:min(8, len(want.rr))])
			}
		}
	}
}

// TestBalancerCarry: Carry from a Balancer's identity index is carryOver.
func TestBalancerCarry(t *testing.T) {
	prev, err := ParseConfig(podPoolConfig(100, 3))
	if err != nil {
		t.Fatal(err)
	}
	next, err := ParseConfig([]byte(strings.Replace(string(podPoolConfig(100, 5)), `{"name":"web-00007","hashId":"web-00007","address":"10.1.0.7:8080"},`, "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	got := NewBalancer(prev, 1).Carry(next.Services)
	want := carryOver(prev.Services, next.Services)
	if !reflect.DeepEqual(got, want) || len(want.Removed) != 1 || want.Removed[0] != 7 {
		t.Errorf("Balancer.Carry = %+v, CarryOver = %+v (want service 7 removed)", got.Removed, want.Removed)
	}
}
