package cniplugin

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
)

// About is printed by the VERSION verb's human form.
const About = "sforge-cni: egress allowlist for sforge Work Pods, enforced in the Pod's network namespace"

// Main runs the plugin with the real engines, the given API lookup and
// event recorder.
func Main(pods PodLookup, events EventRecorder) {
	p := &Plugin{NewEngine: engineByName, Pods: pods, Events: events}
	skel.PluginMainFuncs(p.Funcs(), version.All, About)
}

// engineByName opens the engine the netconf names; an empty name defers to
// SFORGE_ENGINE in the plugin's environment, else auto.
func engineByName(name string) (engine.Engine, error) {
	if name == "" {
		return engines.FromEnv()
	}
	return engines.New(name)
}
