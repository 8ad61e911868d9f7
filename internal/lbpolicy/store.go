package lbpolicy

import (
	"sync"

	"github.com/hashlb/hashlb/lbcore"
)

// sharedStore is the process's key space for persistence tables, with the
// semantics lbcore.Store documents (those of Envoy's shared data): one
// table per Envoy process, shared by its worker threads, each table under
// its own namespace. A bucket's value is rewritten in place, so a steady
// state of hits and refreshes allocates nothing.
type sharedStore struct {
	mu  sync.Mutex
	m   map[string]*storeEntry
	cas uint32 // one counter for every key, as lbcore's persistence table requires (createKey, lbcore/store.go)
}

type storeEntry struct {
	val []byte
	cas uint32
}

// processStore is the one store of the process: every worker's tables
// live in it.
var processStore = &sharedStore{m: map[string]*storeEntry{}}

// workerStore is one worker's handle on the shared store: Get copies the
// value into the worker's buffer, so no worker reads memory another is
// writing. A Table decodes what Get returned before its next Get.
type workerStore struct {
	s   *sharedStore
	buf []byte
}

func newWorkerStore(s *sharedStore) *workerStore {
	return &workerStore{s: s, buf: make([]byte, 0, 1024)}
}

func (w *workerStore) Get(key string) ([]byte, uint32, error) {
	w.s.mu.Lock()
	e := w.s.m[key]
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
	e := s.m[key]
	if e != nil && cas != 0 && cas != e.cas {
		return lbcore.ErrCASMismatch
	}
	if e == nil {
		e = &storeEntry{}
		s.m[string([]byte(key))] = e // the Table's key aliases its buffer
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
	return len(s.m)
}
