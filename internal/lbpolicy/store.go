package lbpolicy

import (
	"sync"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// sharedStore is the process's key space for persistence tables, with the
// semantics lbcore.Store documents (those of Envoy's shared data): one
// table per cluster and Envoy process, shared by the cluster's worker
// threads, each table under its own namespace. A bucket's value is
// rewritten in place, so a steady state of hits and refreshes allocates
// nothing.
//
// A table lives while a worker uses its namespace, and for orphanGrace
// after the last one closed (a cluster updated by CDS gets new load
// balancers, which find the old table); then the next worker made or
// closed frees it, so a removed or renamed cluster does not keep up to
// tableSize entries for good.
type sharedStore struct {
	mu     sync.Mutex
	tables map[string]*nsTable
	cas    uint32 // one counter for every key, as lbcore's persistence table requires (createKey, lbcore/store.go)
	now    func() time.Time

	// fleetMu guards fleets, the fleet members of the store's namespaces
	// (fleet.go); never held with mu.
	fleetMu sync.Mutex
	fleets  map[string]*fleetMember
}

// nsTable is one namespace's keys and the workers using it, and the host
// set they share (hostset.go).
type nsTable struct {
	m      map[string]*storeEntry
	refs   int
	closed time.Time // when refs fell to 0
	hosts  sharedHosts
}

type storeEntry struct {
	val []byte
	cas uint32
}

// orphanGrace is how long a table nobody uses is kept.
const orphanGrace = 5 * time.Minute

// processStore is the one store of the process: every worker's tables
// live in it.
var processStore = newSharedStore()

func newSharedStore() *sharedStore {
	return &sharedStore{tables: map[string]*nsTable{}, now: time.Now}
}

// acquire registers a worker of namespace ns and returns its table.
func (s *sharedStore) acquire(ns string) *nsTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	t := s.tables[ns]
	if t == nil {
		t = &nsTable{m: map[string]*storeEntry{}}
		s.tables[ns] = t
	}
	t.refs++
	return t
}

// release is a worker of ns closing.
func (s *sharedStore) release(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tables[ns]; t != nil && t.refs > 0 {
		if t.refs--; t.refs == 0 {
			t.closed = s.now()
			t.hosts.drop()
		}
	}
	s.sweep()
}

// sweep frees the tables nobody has used for orphanGrace; s.mu is held.
func (s *sharedStore) sweep() {
	now := s.now()
	for ns, t := range s.tables {
		if t.refs == 0 && now.Sub(t.closed) >= orphanGrace {
			delete(s.tables, ns)
		}
	}
}

// workerStore is one worker's handle on its namespace's table: Get copies
// the value into the worker's buffer, so no worker reads memory another is
// writing. A Table decodes what Get returned before its next Get.
type workerStore struct {
	s   *sharedStore
	t   *nsTable
	buf []byte
}

func newWorkerStore(s *sharedStore, t *nsTable) *workerStore {
	return &workerStore{s: s, t: t, buf: make([]byte, 0, 1024)}
}

func (w *workerStore) Get(key string) ([]byte, uint32, error) {
	w.s.mu.Lock()
	e := w.t.m[key]
	if e == nil {
		w.s.mu.Unlock()
		return nil, 0, lbcore.ErrNotFound
	}
	w.buf = append(w.buf[:0], e.val...)
	cas := e.cas
	w.s.mu.Unlock()
	return w.buf, cas, nil
}

func (w *workerStore) Set(key string, value []byte, cas uint32) error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := w.t.m[key]
	if e != nil && cas != 0 && cas != e.cas {
		return lbcore.ErrCASMismatch
	}
	if e == nil {
		e = &storeEntry{}
		w.t.m[string([]byte(key))] = e // the Table's key aliases its buffer
	}
	e.val = append(e.val[:0], value...)
	s.cas++
	if s.cas == 0 {
		s.cas = 1
	}
	e.cas = s.cas
	return nil
}

// keys returns how many keys the store holds (tests).
func (s *sharedStore) keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.tables {
		n += len(t.m)
	}
	return n
}
