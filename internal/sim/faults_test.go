package sim

import (
	"errors"
	"strings"
	"sync"
)

// errInjected is the failure the simulation injects into store statements.
var errInjected = errors.New("injected store fault")

// onlyInjected reports whether every failure err joins or wraps is an
// injected one (a nil err is none). errors.Is alone would let a real
// failure hide behind an injected one joined to it.
func onlyInjected(err error) bool {
	switch x := err.(type) {
	case nil:
		return true
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if e != nil && !onlyInjected(e) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		return x.Unwrap() != nil && onlyInjected(x.Unwrap())
	default:
		return err == errInjected
	}
}

// faultSwitch is a slot's store fault hook (sqlite.Options.Faults): the
// store outlives no run, but it is opened before its run exists, so the
// hook asks whichever run is current.
type faultSwitch struct {
	mu  sync.Mutex
	cur func(q string) error
}

func (f *faultSwitch) set(fn func(q string) error) {
	f.mu.Lock()
	f.cur = fn
	f.mu.Unlock()
}

func (f *faultSwitch) fault(q string) error {
	f.mu.Lock()
	fn := f.cur
	f.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(q)
}

// storeFaults decides, statement by statement, which writes fail while the
// schedule runs: each with probability 1/every (never when every is 0).
type storeFaults struct {
	mu       sync.Mutex
	every    int
	on       bool
	draw     func(n int) int
	injected int
	// kinds counts the failed statements by their first words ("UPDATE
	// effects"), to show which writes were hit.
	kinds map[string]int
}

func (s *storeFaults) fault(q string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on || s.every == 0 || s.draw(s.every) != 0 {
		return nil
	}
	s.injected++
	s.kinds[statementKind(q)]++
	return errInjected
}

func (s *storeFaults) enable(on bool) {
	s.mu.Lock()
	s.on = on
	s.mu.Unlock()
}

// statementKind names a statement by its verb and table.
func statementKind(q string) string {
	f := strings.Fields(q)
	switch {
	case len(f) >= 3 && (f[0] == "INSERT" || f[0] == "DELETE"):
		return f[0] + " " + f[2]
	case len(f) >= 2 && f[0] == "UPDATE":
		return f[0] + " " + f[1]
	case len(f) >= 1 && f[0] == "SELECT":
		for i, w := range f {
			if w == "FROM" && i+1 < len(f) {
				return "SELECT " + f[i+1]
			}
		}
	}
	if len(f) > 0 {
		return f[0]
	}
	return "?"
}
