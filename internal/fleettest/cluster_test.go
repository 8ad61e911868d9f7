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
	cli := testClient(t, c.Endpoints()...)
	testPut(t, cli, "before", 1, 10*time.Second)
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
	testPut(t, cli, "during", 1, 10*time.Second)
	if err := c.Restart(lead); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ClusterStart); err != nil {
		t.Fatal(err)
	}
	readBack(t, testClient(t, c.Members[lead].Client), "the restarted member", "during")
}

// testClient is a client of the endpoints, closed when the test ends.
func testClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testPut writes k (value "v") through cli, each try bounded by per, and
// fails the test when all tries failed.
func testPut(t *testing.T, cli *clientv3.Client, k string, tries int, per time.Duration) {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), per)
		_, err := cli.Put(ctx, k, "v")
		cancel()
		if err == nil {
			return
		}
		if try == tries {
			t.Fatalf("put %s: %v", k, err)
		}
	}
}

// readBack fails the test unless each key reads back through cli, whose
// endpoint is who's.
func readBack(t *testing.T, cli *clientv3.Client, who string, keys ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range keys {
		r, err := cli.Get(ctx, k)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("%s's read of %q: %v %v", who, k, r, err)
		}
	}
}
