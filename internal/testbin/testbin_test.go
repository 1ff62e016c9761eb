package testbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tests and benchmarks must build what `make build` builds.
func TestSettingsMatchMakefile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	for _, want := range []string{
		"GOBUILD   := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '" + LDFlags + "'",
		"GOBUILD_RUNTIME := CGO_ENABLED=1 CC=" + RuntimeCC + " $(GO) build -trimpath -tags " + RuntimeTags + " -ldflags '" + RuntimeLDFlags + "'",
		"$(GOBUILD_RUNTIME) -o $(BIN)/sforge-runtime ./cmd/sforge-runtime",
	} {
		if !strings.Contains(mk, want) {
			t.Errorf("the Makefile lacks %q: keep it and internal/testbin in step", want)
		}
	}
}

func TestCommand(t *testing.T) {
	rt := Command("go", "/tmp/x", "./cmd/sforge-runtime")
	if got := strings.Join(rt.Args, " "); got != "go build -trimpath -tags "+RuntimeTags+" -ldflags "+RuntimeLDFlags+" -o /tmp/x ./cmd/sforge-runtime" {
		t.Errorf("sforge-runtime: %s", got)
	}
	if env := rt.Env[len(rt.Env)-2:]; env[0] != "CGO_ENABLED=1" || env[1] != "CC="+RuntimeCC {
		t.Errorf("sforge-runtime built with %v", env)
	}
	hook := Command("go", "/tmp/y", "./cmd/sforge-hook")
	if got := strings.Join(hook.Args, " "); got != "go build -trimpath -ldflags "+LDFlags+" -o /tmp/y ./cmd/sforge-hook" {
		t.Errorf("sforge-hook: %s", got)
	}
	if hook.Env[len(hook.Env)-1] != "CGO_ENABLED=0" {
		t.Errorf("sforge-hook: %v", hook.Env[len(hook.Env)-1])
	}
}
