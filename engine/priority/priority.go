// Package priority names the scheduling of the install window: the
// sub-millisecond stretch, on every isolated container's start path,
// between the container's creation and its rules being in.
//
// The C fronts of sforge-runtime and sforge-hook run that window at
// SCHED_FIFO priority 1 (Realtime, the default), so that under load no
// normal task preempts it and its time is its own work, not the host's run
// queue: with 32 containers started at once on 2 cores, its wall p99/p50
// fell from 4.5-45x to 1.2-1.9x on a host whose netfilter hooks are in use
// (BENCHMARKS.md, "Seventeenth round"). The window is bounded
// (internal/cfront/cfront.h: RLIMIT_RTTIME, reset on fork); Normal turns
// it off. Where the process may not use real-time scheduling (rootless
// engines; a cgroup without real-time time on a kernel that schedules
// real-time tasks by cgroup), the window runs at normal priority either
// way. The Go paths, the fronts' fallbacks, install at normal priority.
package priority

import (
	"fmt"
	"slices"
	"strings"
)

// EnvVar sets the priority for sforge-runtime (over runtime.json's
// installPriority) and sforge-hook.
const EnvVar = "SFORGE_INSTALL_PRIORITY"

const (
	// Realtime is SCHED_FIFO 1 for the install window (the default).
	Realtime = "realtime"
	// Normal leaves the window to the host's normal scheduling.
	Normal = "normal"
)

// Names lists the accepted values, for help texts and errors.
var Names = []string{Realtime, Normal}

// Parse returns the priority v names, Realtime for "" (unset); source
// says where v came from, for the error.
func Parse(v, source string) (string, error) {
	if v == "" {
		return Realtime, nil
	}
	if !slices.Contains(Names, v) {
		return "", fmt.Errorf("unknown install priority %q in %s (allowed: %s)", v, source, strings.Join(Names, ", "))
	}
	return v, nil
}
