package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestTune(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", UserAgent: ""}
	tests := []struct {
		name      string
		o         Options
		qps       float32
		burst     int
		timeout   time.Duration
		userAgent string
	}{
		{name: "defaults", qps: DefaultQPS, burst: DefaultBurst, timeout: DefaultTimeout},
		{name: "overrides", o: Options{QPS: 200, Burst: 400, Timeout: time.Minute}, qps: 200, burst: 400, timeout: time.Minute},
		// A burst below one second of traffic would cap the rate below QPS.
		{name: "burst raised to qps", o: Options{QPS: 300}, qps: 300, burst: 300, timeout: DefaultTimeout},
		{name: "throttling off", o: Options{QPS: -1}, qps: -1, burst: DefaultBurst, timeout: DefaultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Tune(base, tt.o)
			if c.QPS != tt.qps || c.Burst != tt.burst || c.Timeout != tt.timeout {
				t.Errorf("QPS %v burst %d timeout %v, want %v %d %v", c.QPS, c.Burst, c.Timeout, tt.qps, tt.burst, tt.timeout)
			}
			if c.UserAgent != UserAgent {
				t.Errorf("user agent %q", c.UserAgent)
			}
		})
	}
	if base.QPS != 0 || base.Burst != 0 || base.UserAgent != "" {
		t.Errorf("Tune modified its argument: %+v", base)
	}
	// Our defaults must actually beat client-go's, or the package is moot.
	if DefaultQPS <= rest.DefaultQPS || DefaultBurst <= rest.DefaultBurst {
		t.Errorf("defaults %v/%d do not exceed client-go's %v/%d", DefaultQPS, DefaultBurst, rest.DefaultQPS, rest.DefaultBurst)
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u1
  user: {token: t0k3n}
contexts:
- name: ctx-a
  context: {cluster: c1, user: u1, namespace: evals}
- name: ctx-b
  context: {cluster: c1, user: u1}
current-context: ctx-a
`

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Load(Options{Kubeconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	if l.Namespace != "evals" || l.Config.BearerToken != "t0k3n" || l.Config.QPS != DefaultQPS || l.Clientset == nil {
		t.Errorf("loaded namespace %q token %q qps %v", l.Namespace, l.Config.BearerToken, l.Config.QPS)
	}
	l, err = Load(Options{Kubeconfig: path, Context: "ctx-b", QPS: 7, Burst: 9})
	if err != nil {
		t.Fatal(err)
	}
	if l.Namespace != "default" || l.Config.QPS != 7 || l.Config.Burst != 9 {
		t.Errorf("context ctx-b: namespace %q qps %v burst %d", l.Namespace, l.Config.QPS, l.Config.Burst)
	}

	_, err = Load(Options{Kubeconfig: filepath.Join(t.TempDir(), "missing")})
	if err == nil || !strings.Contains(err.Error(), "failed to load kubeconfig") || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing kubeconfig: %v", err)
	}
	_, err = Load(Options{Kubeconfig: path, Context: "nope"})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown context: %v", err)
	}
}
