package membership

import (
	"strings"
	"testing"
)

// The confirmation fields survive the wire, and FitCounted keeps the
// metadata within gossip's limit whatever the node names.
func TestMetaCounted(t *testing.T) {
	m := NodeMeta{Ready: true, Confirms: true, Taking: true, Counted: []string{"node-2", "node-4"}}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Confirms || !got.Taking || !got.Counts("node-4") || got.Counts("node-3") {
		t.Fatalf("decoded %+v", got)
	}
	// Older metadata (no confirmation fields) reads as not confirming.
	old, err := DecodeNodeMeta([]byte(`m{"ok":true}`))
	if err != nil || old.Confirms || old.Counts("node-2") {
		t.Fatalf("older metadata read as %+v, %v", old, err)
	}
	var long []string
	for i := range 12 {
		long = append(long, strings.Repeat(string(rune('a'+i)), 63))
	}
	m = NodeMeta{Ready: true, Confirms: true, Interfaces: []string{"eth0", "eth1"}, Counted: long}
	fit := m.FitCounted()
	if _, err := fit.Encode(); err != nil {
		t.Fatal(err)
	}
	if len(fit.Counted) == 0 || len(fit.Counted) > MaxCounted || !fit.Counts(long[0]) {
		t.Fatalf("kept %d names", len(fit.Counted))
	}
	if short := (NodeMeta{Counted: []string{"node-2"}}).FitCounted(); len(short.Counted) != 1 {
		t.Fatalf("dropped a name that fits: %v", short.Counted)
	}
}

// Long node names no longer cost the MACs: FitCounted publishes their
// short keys, so eight 253-byte names fit beside three interfaces' HW, and
// Counts still finds every name (and no other).
func TestMetaCountedLongNamesKeepHW(t *testing.T) {
	var long []string
	for i := range MaxCounted {
		long = append(long, strings.Repeat(string(rune('a'+i)), 253))
	}
	hw := map[string]string{"eth0": "020000000001", "eth1": "020000000002", "bond0.100": "020000000003"}
	m := NodeMeta{Ready: true, Confirms: true, Taking: true, Interfaces: []string{"eth0", "eth1", "bond0.100"}, Counted: long, HW: hw}
	if _, err := m.Encode(); err == nil {
		t.Fatal("the test's metadata fits as it is: it tests nothing")
	}
	fit := m.FitCounted()
	b, err := fit.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.HW) != 3 || got.MAC("bond0.100") == nil {
		t.Fatalf("HW dropped: %v", got.HW)
	}
	for _, name := range long {
		if !got.Counts(name) {
			t.Fatalf("a counted long name is not confirmed after the wire: %v", got.Counted)
		}
	}
	if got.Counts(strings.Repeat("z", 253)) || got.Counts("node-2") {
		t.Fatalf("confirms a name it never counted: %v", got.Counted)
	}
	// Short names stay as they are (older agents read them).
	if short := (NodeMeta{Counted: []string{"node-2"}, HW: hw}).FitCounted(); short.Counted[0] != "node-2" {
		t.Fatalf("a short name was keyed: %v", short.Counted)
	}
}
