package cni

import (
	"encoding/json"
	"testing"
)

// FuzzChain: any file is either refused with an error or chained into a
// valid conflist holding sforge-cni exactly once, which Unchain undoes.
func FuzzChain(f *testing.F) {
	f.Add([]byte(bridgeConflist))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"bridge"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := Chain(b, "f")
		if err != nil {
			return
		}
		var c struct {
			Plugins []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(out, &c); err != nil {
			t.Fatalf("chained output is not JSON: %v\n%s", err, out)
		}
		n := 0
		for _, p := range c.Plugins {
			if p.Type == PluginType {
				n++
			}
		}
		if n == 0 {
			t.Fatalf("sforge-cni not in the chain:\n%s", out)
		}
		back, err := Unchain(out, "f")
		if err != nil {
			t.Fatalf("unchain of our own output: %v", err)
		}
		var u struct {
			Plugins []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(back, &u); err != nil {
			t.Fatalf("unchained output is not JSON: %v", err)
		}
		for _, p := range u.Plugins {
			if p.Type == PluginType {
				t.Fatalf("sforge-cni left after unchain:\n%s", back)
			}
		}
	})
}
