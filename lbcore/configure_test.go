package lbcore

import (
	"reflect"
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
		`[{"name":"a","address":"10.0.0.1:80","weight":0}]`,
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
