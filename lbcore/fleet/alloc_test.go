package fleet

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// allocEtcd answers a Client's calls from fixed bodies, allocating
// nothing itself: lease grants, creates that succeed or find the key held
// by another proxy (this slot's stamp, or an older slot's, which the client
// then refreshes), reads of throttled keys, and heartbeats.
type allocEtcd struct {
	c      *Client
	now    time.Time
	n      int // calls answered
	calls  []Call
	grant  []byte
	put    []byte
	held   []byte // the key exists, stamped in this slot
	stale  []byte // the key exists, stamped in an older slot
	empty  []byte // a read of a key etcd does not hold
	alive  []byte
	settle int // transactions settled
}

func newAllocEtcd(c *Client, now time.Time) *allocEtcd {
	kv := func(stamp int64, svc string) []byte {
		v := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%d %s", stamp, svc)))
		return []byte(`{"header":{"cluster_id":"1","revision":"90"},"succeeded":false,"responses":[{"response_range":{"header":{"revision":"90"},"kvs":[{"key":"eA==","create_revision":"80","mod_revision":"80","version":"1","value":"` +
			v + `","lease":"42"}],"count":"1"}}]}`)
	}
	return &allocEtcd{c: c, now: now,
		grant: []byte(`{"header":{"cluster_id":"1","revision":"90"},"ID":"42","TTL":"900"}`),
		put:   []byte(`{"header":{"cluster_id":"1","revision":"91"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"91"}}}]}`),
		held:  kv(now.Unix()+3600, "b"), // stamped in the future: never an older slot in the test's hour
		stale: kv(now.Unix()-120, "c"),
		empty: []byte(`{"header":{"cluster_id":"1","revision":"90"}}`),
		alive: []byte(`{"header":{"cluster_id":"1","revision":"90"},"ID":"42","TTL":"800","grantedTTL":"900"}`),
	}
}

// flush answers everything the client asks for, recycling its output as
// the filter does.
func (e *allocEtcd) flush() {
	for {
		out := e.c.Take()
		if out.Empty() {
			e.c.Recycle(out)
			return
		}
		e.settle += len(out.Settled)
		for _, call := range out.Calls {
			e.n++
			var body []byte
			switch call.Path {
			case "/v3/lease/grant":
				body = e.grant
			case "/v3/lease/timetolive":
				body = e.alive
			case "/v3/kv/range":
				body = e.empty
			default:
				switch e.n % 4 {
				case 0:
					body = e.held
				case 1:
					body = e.stale
				default:
					body = e.put
				}
			}
			e.c.Answer(e.now, call.ID, 200, body, len(body))
		}
		e.c.Recycle(out)
	}
}

// TestFleetClientAllocatesNothing: once a worker's client has run a while,
// a transaction for a new key (a create, a key another proxy holds, one to
// refresh from the tick, a read over the create budget), its answer and the
// syncs it leads to allocate nothing, with the ring of known keys full
// and wrapping: a client sending a new key per request makes no garbage
// in the fleet level.
func TestFleetClientAllocatesNothing(t *testing.T) {
	for _, tt := range []struct {
		name    string
		creates int
	}{
		{"within the create budget", 100000},
		{"over the create budget: reads", 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
			p := &lbcore.Persistence{Expire: 10 * time.Minute, Fleet: &lbcore.Fleet{Cluster: "etcd", Timeout: 200 * time.Millisecond, CreatesPerSecond: tt.creates}}
			c := NewClient(p, "/hashlb/root/", newFakeServices(3), "", "", now)
			e := newAllocEtcd(c, now)
			key := make([]byte, 0, 32)
			i := 0
			request := func() {
				i++
				e.now = e.now.Add(50 * time.Microsecond)
				key = strconv.AppendInt(append(key[:0], "client-"...), int64(i), 10)
				if _, wait := c.Miss(e.now, key, i%3); wait {
					e.flush()
				}
				if i%64 == 0 {
					e.now = e.now.Add(HeartbeatEvery) // an idle moment: the heartbeat
					c.Tick(e.now)
					e.flush()
				}
			}
			for range 2*KnownMax + 1000 { // the ring full and wrapping, the queue and pools at their largest
				request()
			}
			settledBefore := e.settle
			// One run of 20,000 requests: AllocsPerRun over single requests
			// would round an average below one down to 0.
			allocs := testing.AllocsPerRun(1, func() {
				for range 20000 {
					request()
				}
			})
			if e.settle-settledBefore < 40000 { // AllocsPerRun runs it once more first
				t.Fatalf("%d transactions settled over 20,000 requests, want one each", e.settle-settledBefore)
			}
			c.Tick(e.now)
			e.flush()
			t.Logf("%.0f allocations over 20,000 requests; %d calls answered, %d keys known, %d queued, counts %+v", allocs, e.n, c.Known(), c.Queued(), c.Counts())
			if allocs != 0 {
				t.Errorf("20,000 requests with new keys allocated %.0f times in the fleet client, want 0", allocs)
			}
		})
	}
}
