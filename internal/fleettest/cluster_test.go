package fleettest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A three-member cluster serves a write through any member; with its leader
// killed the other two elect another and go on serving; the killed member,
// restarted on its ports and data, catches up and serves what was written
// while it was down.
func TestClusterLosesItsLeader(t *testing.T) {
	c := StartCluster(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(k string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, k, "v"); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	put("before")
	lead := c.Leader()
	if lead < 0 {
		t.Fatal("no leader in a started cluster")
	}
	c.Kill(lead)
	if err := c.Wait(ClusterStart); err != nil {
		t.Fatal(err)
	}
	if now := c.Leader(); now < 0 || now == lead {
		t.Fatalf("leader %d killed, the others lead %d", lead, now)
	}
	put("during")
	if err := c.Restart(lead); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ClusterStart); err != nil {
		t.Fatal(err)
	}
	one, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[lead].Client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := one.Get(ctx, "during")
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the restarted member's read of what was written while it was down: %v %v", r, err)
	}
}
