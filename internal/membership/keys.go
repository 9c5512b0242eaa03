package membership

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// readKeys reads a gossip key file: one base64 key (16, 24 or 32 bytes) per
// line, the first being the one messages are sent with; blank lines and
// lines starting with # are skipped. A Kubernetes Secret mounted as a file
// fits as is.
func readKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: reading the gossip key file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("membership: gossip key file %s line %d: not base64 (make one with: head -c 32 /dev/urandom | base64)", path, i+1)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("membership: gossip key file %s line %d: key of %d bytes, want 16, 24 or 32", path, i+1, len(k))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("membership: gossip key file %s holds no key", path)
	}
	return keys, nil
}

func loadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := readKeys(path)
	if err != nil {
		return nil, err
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("membership: gossip keys from %s: %w", path, err)
	}
	return kr, nil
}

// keyLoop re-reads the key file every KeyReloadInterval and makes the
// keyring what the file says: every key in it is accepted, the first is
// sent with, and a key that left the file is no longer accepted from that
// reload on, so a leaked key is revoked by removing it (a member holding
// only that key can then neither join nor be heard). Rotation without a
// partition therefore takes three edits, each reaching every node before
// the next: add the new key as a second line, move it first, drop the
// old one (docs/l2.md, "Gossip encryption").
func (m *Membership) keyLoop(ctx context.Context, kr *memberlist.Keyring) {
	tick := time.NewTicker(m.cfg.KeyReloadInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		keys, err := readKeys(m.cfg.KeyFile)
		if err != nil {
			m.log.Warn("re-reading the gossip key file; keeping the keys in use", "err", err)
			continue
		}
		added, removed, primary, err := installKeys(kr, keys)
		if err != nil {
			m.log.Warn("installing gossip keys", "err", err)
			continue
		}
		if added+removed > 0 || primary {
			m.log.Info("gossip keys reloaded", "file", m.cfg.KeyFile, "keys", len(keys), "added", added, "revoked", removed, "primaryChanged", primary)
		}
	}
}

// installKeys makes kr hold exactly keys, with keys[0] the primary: it
// adds the new ones, switches the primary, then removes the keys that are
// no longer listed (memberlist refuses to remove the primary, so the
// switch comes first). It reports how many keys it added and removed and
// whether the primary changed.
func installKeys(kr *memberlist.Keyring, keys [][]byte) (added, removed int, primary bool, err error) {
	for _, k := range keys {
		if !slices.ContainsFunc(kr.GetKeys(), func(h []byte) bool { return bytes.Equal(h, k) }) {
			if err := kr.AddKey(k); err != nil {
				return added, removed, primary, err
			}
			added++
		}
	}
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return added, removed, primary, err
		}
		primary = true
	}
	for _, h := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(h, k) }) {
			if err := kr.RemoveKey(h); err != nil {
				return added, removed, primary, err
			}
			removed++
		}
	}
	return added, removed, primary, nil
}
