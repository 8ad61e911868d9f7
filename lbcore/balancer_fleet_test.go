package lbcore

import (
	"testing"
	"time"
)

// TestDecideAsksTheFleet: with a fleet level, a local miss proposes the
// method's choice without storing it; DecideFleet stores the fleet's answer
// even when it is not what the method would choose, and later requests hit it.
func TestDecideAsksTheFleet(t *testing.T) {
	c := mustConfig(t, `{"lbMethod":"LEASTCONNECTION","services":[{"name":"a","address":"10.0.0.1:80"},{"name":"b","address":"10.0.0.2:80","hashId":"bee"}],
		"persistence":{"keys":["${client.ip}"],"fleet":{"cluster":"etcd"}}}`)
	b := NewBalancer(c, 1)
	b.EnablePersistence(NewMemStore(), "t")
	now := time.Unix(1767225600, 0)
	r := &Request{Source: "192.0.2.7:5000"}
	b.SetActive(0, 5) // the method proposes b
	d := b.Decide(r, now)
	if !d.Ask || d.Len() == 0 || d.At(0) != 1 || !d.Persist.Miss || string(b.AskKey()) != "192.0.2.7" {
		t.Fatalf("Decide = %+v (key %q), want Ask proposing b after a miss on 192.0.2.7", d, b.AskKey())
	}
	if d2 := b.Decide(r, now); !d2.Ask {
		t.Fatalf("second Decide = %+v: the proposal was stored, want nothing stored", d2)
	}
	d = b.DecideFleet(r, now, 0) // the fleet says a
	if d.Len() == 0 || d.At(0) != 0 || d.Reason != ReasonPersistence {
		t.Fatalf("DecideFleet(a) = %+v, want a by persistence", d)
	}
	if d = b.Decide(r, now.Add(time.Second)); d.Ask || d.At(0) != 0 || !d.Persist.Hit {
		t.Fatalf("Decide after DecideFleet = %+v, want a local hit on a", d)
	}
	if i, ok := b.ServiceByKey("bee"); !ok || i != 1 {
		t.Errorf("ServiceByKey(bee) = %d, %v, want 1 (hashId)", i, ok)
	}
	if _, ok := b.ServiceByKey("10.0.0.2:80"); ok {
		t.Errorf("ServiceByKey(address of a service with a hashId) found it, want not: records name it by hashId")
	}
	b.SetDown(0, true)
	if d = b.DecideFleet(r, now, 0); d.Ask || d.Len() == 0 || d.At(0) != 1 {
		t.Errorf("DecideFleet(a DOWN) = %+v, want decided locally on b", d)
	}
	b.SetDown(0, false)
	b.remember([]byte("192.0.2.7"), now.Add(2*time.Second), 0)
	if d = b.Decide(r, now.Add(3*time.Second)); d.At(0) != 0 || !d.Persist.Hit {
		t.Errorf("Decide after remember(a) = %+v, want a hit on a", d)
	}
	if d = b.DecideLocal(&Request{Source: "192.0.2.8:1"}, now); d.Ask || d.Len() == 0 {
		t.Errorf("DecideLocal = %+v, want a local decision", d)
	}
}
