package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// conflistName is the node's only CNI configuration file.
const conflistName = "10-sforge-node.conflist"

// UnchainSforgeCNI takes sforge-cni out of the node's conflist until the
// test ends, then puts the original back: Pods created meanwhile get
// bridge + host-local only, a CNI that enforces nothing (not even
// NetworkPolicy). Callers prove the change took effect from sforge-cni's
// capture (no ADD for their Pod).
func (c *Cluster) UnchainSforgeCNI(t testing.TB) {
	t.Helper()
	c.editSforgeCNI(t, func(map[string]any) bool { return false })
}

// WithoutSforgeCNIEvents removes eventKubeconfig from sforge-cni's entry
// until the test ends: the plugin still enforces, but records no Event.
func (c *Cluster) WithoutSforgeCNIEvents(t testing.TB) {
	t.Helper()
	c.editSforgeCNI(t, func(e map[string]any) bool {
		if _, ok := e["eventKubeconfig"]; !ok {
			t.Fatal("testcluster: sforge-cni has no eventKubeconfig (Options.SforgeCNIEvents)")
		}
		delete(e, "eventKubeconfig")
		return true
	})
}

// editSforgeCNI applies edit to sforge-cni's conflist entry (false drops
// the entry) until the test ends, then puts the original file back.
// containerd's CRI plugin watches its conf_dir and reloads the
// configuration on every change; the file is replaced by a rename, so it
// never sees a half-written one.
func (c *Cluster) editSforgeCNI(t testing.TB, edit func(entry map[string]any) bool) {
	t.Helper()
	path := filepath.Join(c.CNIConfDir, conflistName)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(orig, &list); err != nil {
		t.Fatalf("testcluster: failed to parse %s: %v", path, err)
	}
	plugins, _ := list["plugins"].([]any)
	var kept []any
	found := false
	for _, p := range plugins {
		if m, ok := p.(map[string]any); ok && m["type"] == "sforge-cni" {
			found = true
			if !edit(m) {
				continue
			}
		}
		kept = append(kept, p)
	}
	if !found {
		t.Fatalf("testcluster: %s has no sforge-cni entry", path)
	}
	list["plugins"] = kept
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := replaceFile(path, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := replaceFile(path, orig); err != nil {
			t.Errorf("testcluster: failed to restore %s: %v", path, err)
		}
	})
}

// replaceFile writes data next to path (a name libcni does not load) and
// renames it over path.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("failed to write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to replace %s: %w", path, err)
	}
	return nil
}
