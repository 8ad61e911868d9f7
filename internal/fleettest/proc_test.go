package fleettest

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	RunMemberIfAsked()
	os.Exit(m.Run())
}

// A cluster of member processes goes on serving writes with its leader
// stopped (SIGSTOP); a member wiped and added back starts empty and serves,
// through its own endpoint, what was written before it was wiped.
func TestProcClusterStopAndWipe(t *testing.T) {
	c := StartProcCluster(t, 3)
	t.Logf("etcd: %s", EtcdImpl())
	cli := testClient(t, c.Endpoints()...)
	put := func(k string) {
		t.Helper()
		// A call to the stopped member times out; the client's retry goes
		// to another.
		testPut(t, cli, k, 16, 2*time.Second)
	}
	put("before")
	lead := c.Leader()
	if lead < 0 {
		t.Fatal("no leader in a started cluster")
	}
	c.Stop(lead)
	put("during")
	c.Cont(lead)
	if err := c.Wait(ClusterStart); err != nil {
		t.Fatal(err)
	}
	o := (lead + 1) % 3
	if err := c.Wipe(o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Members[o].Dir + "/data"); !os.IsNotExist(err) {
		t.Fatalf("member %s wiped: its data dir is still there (%v)", c.Members[o].Name, err)
	}
	if err := c.Rejoin(o); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ClusterStart); err != nil {
		t.Fatal(err)
	}
	one := testClient(t, c.Members[o].Client)
	readBack(t, one, "the re-added member", "before", "during")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := one.MemberList(ctx)
	if err != nil || len(list.Members) != 3 {
		t.Fatalf("member list after the re-add: %v %v", list, err)
	}
}
