package cni

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzChain: any file is either refused with an error or chained into a
// valid conflist holding sforge-cni exactly once, which Unchain undoes.
func FuzzChain(f *testing.F) {
	f.Add([]byte(bridgeConflist))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"bridge"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := Chain(b, "f", ChainOptions{})
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
		const kc = "/etc/sforge/events.kubeconfig"
		ev, err := Chain(b, "f", ChainOptions{EventKubeconfig: kc})
		if err != nil {
			t.Fatalf("refused with eventKubeconfig what it chained without: %v", err)
		}
		var e struct {
			Plugins []struct {
				Type            string `json:"type"`
				EventKubeconfig string `json:"eventKubeconfig"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(ev, &e); err != nil {
			t.Fatalf("chained output with eventKubeconfig is not JSON: %v\n%s", err, ev)
		}
		if !slices.ContainsFunc(e.Plugins, func(p struct {
			Type            string `json:"type"`
			EventKubeconfig string `json:"eventKubeconfig"`
		}) bool {
			return p.Type == PluginType && p.EventKubeconfig == kc
		}) {
			t.Fatalf("no sforge-cni entry with eventKubeconfig:\n%s", ev)
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
