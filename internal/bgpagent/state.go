package bgpagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mooringlb/mooring/internal/bgp"
)

// stateName is the file in the agent's state folder holding what the BGP
// decision needs besides Services, so an agent that restarts while the API
// server is away advertises what it advertised before (graceful restart
// needs its End-of-RIB within the router's restart time). The agent's own
// snapshot holds the Services.
const stateName = "bgp-state.json"

// state is the file's content. It holds the peers' passwords: the file is
// written 0600 in the agent's state folder, which only root reads.
type state struct {
	Version   int               `json:"version"`
	Input     bgp.Input         `json:"input"` // without Services
	Passwords map[string]string `json:"passwords,omitempty"`
}

const stateVersion = 1

// saveState writes s atomically (temporary file, fsync, rename).
func saveState(dir string, s state) error {
	if dir == "" {
		return nil
	}
	s.Version = stateVersion
	s.Input.Services = nil
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding the BGP state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, stateName+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the BGP state in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
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
	return os.Rename(tmp.Name(), filepath.Join(dir, stateName))
}

// loadState reads the file; a missing file is (state{}, false, nil).
func loadState(dir string) (state, bool, error) {
	if dir == "" {
		return state{}, false, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, stateName))
	if errors.Is(err, os.ErrNotExist) {
		return state{}, false, nil
	}
	if err != nil {
		return state{}, false, err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return state{}, false, fmt.Errorf("%s is damaged (%w): it is ignored and rewritten", filepath.Join(dir, stateName), err)
	}
	if s.Version != stateVersion {
		return state{}, false, fmt.Errorf("%s has version %d, this agent reads %d: it is ignored and rewritten", filepath.Join(dir, stateName), s.Version, stateVersion)
	}
	return s, true, nil
}
