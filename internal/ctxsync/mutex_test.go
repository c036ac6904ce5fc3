package ctxsync

import "testing"

func TestMutex(t *testing.T) {
	t.Parallel()
	var m Mutex
	if !m.TryLock() {
		t.Fatal("a new Mutex is locked")
	}
	if m.TryLock() {
		t.Fatal("TryLock took a held Mutex")
	}
	done := make(chan struct{})
	close(done)
	if m.LockOrDone(done) {
		t.Fatal("LockOrDone took a held Mutex")
	}
	m.Unlock()
	if !m.LockOrDone(done) {
		t.Fatal("LockOrDone did not take a free Mutex")
	}
	m.Unlock()
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock took a Mutex held by Lock")
	}
	m.Unlock()
}
