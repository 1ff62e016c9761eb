// Package launcher implements `sforge run`: it turns a task, an agent
// profile and the command line into a Plan (isolation decided by the
// documented precedence, every input checked before any daemon is
// contacted), then drives one Backend per target (Docker now, Kubernetes
// later) through preflight, endpoint resolution, image preparation, start,
// wait and cleanup, and reports what it did.
//
// Subpackages: task (task JSON), agent (agent profiles), docker (the Docker
// Engine API backend).
package launcher
