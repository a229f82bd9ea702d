package readiness

import "sync"

// State is what /readyz answers for one part: a fixed reason while starting or stopping, else a check's error. The
// zero value is ready. It is safe for concurrent use.
type State struct {
	mu     sync.Mutex // guards reason, check
	reason string
	check  func() error
}

// Set makes the part not ready for reason ("starting", "connecting to ClickHouse: …"); "" makes it ready.
func (s *State) Set(reason string) {
	s.mu.Lock()
	s.reason, s.check = reason, nil
	s.mu.Unlock()
}

// SetCheck makes the part's readiness check's answer, called at every NotReady (nil: ready).
func (s *State) SetCheck(check func() error) {
	s.mu.Lock()
	s.reason, s.check = "", check
	s.mu.Unlock()
}

// NotReady returns why the part is not ready, "" when it is. The check runs outside the lock.
func (s *State) NotReady() string {
	s.mu.Lock()
	reason, check := s.reason, s.check
	s.mu.Unlock()
	if reason != "" {
		return reason
	}
	if check != nil {
		if err := check(); err != nil {
			return err.Error()
		}
	}
	return ""
}
