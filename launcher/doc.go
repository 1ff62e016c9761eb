// Package launcher implements `sforge run`: task JSON, agent profiles,
// isolation precedence and one backend per target (Docker, Kubernetes).
package launcher
