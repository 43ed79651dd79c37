package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// stateFile keeps what the relay learns and is told across restarts, in
// one small JSON file written whole (a temporary file, fsync, rename).
// A nil *stateFile keeps nothing.
type stateFile struct {
	path string
	mu   sync.Mutex
	data stateData
}

type stateData struct {
	Version int                    `json:"version"`
	Targets map[string]targetState `json:"targets,omitempty"`
	Paused  []string               `json:"paused,omitempty"`
}

type targetState struct {
	// Learned is the rate in use when the relay last kept it, in cost per
	// second, and LearnedAt when.
	Learned   float64   `json:"learned,omitempty"`
	LearnedAt time.Time `json:"learned_at,omitzero"`
	// Limits were set through the API over FileLimits, the
	// configuration's limits at the time: a configuration whose limits
	// changed since wins.
	Limits     []sluice.Limit `json:"limits,omitempty"`
	FileLimits []sluice.Limit `json:"file_limits,omitempty"`
	HasLimits  bool           `json:"has_limits,omitempty"`
}

// learnedMaxAge is how old a kept learned rate may be to be used.
const learnedMaxAge = 7 * 24 * time.Hour

func openState(path string) (*stateFile, error) {
	if path == "" {
		return nil, nil
	}
	s := &stateFile{path: path, data: stateData{Version: 1}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("relay: state file: %w", err)
	}
	if err := json.Unmarshal(b, &s.data); err != nil {
		return nil, fmt.Errorf("relay: state file %s is not the relay's (%v): move it away to start afresh", path, err)
	}
	if s.data.Version != 1 {
		return nil, fmt.Errorf("relay: state file %s has version %d; this relay reads 1", path, s.data.Version)
	}
	return s, nil
}

func (s *stateFile) paused(queue string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.data.Paused, queue)
}

// learned returns a target's kept rate, if recent enough.
func (s *stateFile) learned(target string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts, ok := s.data.Targets[target]
	if !ok || ts.Learned <= 0 || time.Since(ts.LearnedAt) > learnedMaxAge {
		return 0, false
	}
	return ts.Learned, true
}

// limits returns the limits set through the API, unless the
// configuration's changed since.
func (s *stateFile) limits(target string, fileLimits []sluice.Limit) ([]sluice.Limit, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts, ok := s.data.Targets[target]
	if !ok || !ts.HasLimits || !slices.Equal(ts.FileLimits, fileLimits) {
		return nil, false
	}
	return ts.Limits, true
}

func (s *stateFile) setPaused(queue string, paused bool) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.data.Paused, queue)
	switch {
	case paused && i < 0:
		s.data.Paused = append(s.data.Paused, queue)
	case !paused && i >= 0:
		s.data.Paused = slices.Delete(s.data.Paused, i, i+1)
	default:
		return nil
	}
	return s.writeLocked()
}

func (s *stateFile) setLearned(target string, rate float64) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.data.Targets[target]
	ts.Learned, ts.LearnedAt = rate, time.Now().UTC()
	s.put(target, ts)
	return s.writeLocked()
}

// setLimits keeps limits set through the API (nil limits with fileLimits:
// the configuration's own, forget the API's).
func (s *stateFile) setLimits(target string, limits, fileLimits []sluice.Limit) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.data.Targets[target]
	ts.Limits, ts.FileLimits, ts.HasLimits = limits, fileLimits, limits != nil
	if !ts.HasLimits {
		ts.Limits, ts.FileLimits = nil, nil
	}
	s.put(target, ts)
	return s.writeLocked()
}

func (s *stateFile) put(target string, ts targetState) {
	if s.data.Targets == nil {
		s.data.Targets = map[string]targetState{}
	}
	s.data.Targets[target] = ts
}

func (s *stateFile) writeLocked() error {
	b, err := json.MarshalIndent(s.data, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, ".relay-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path)
}
