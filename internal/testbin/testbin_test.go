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
		"GOBUILD_FRONT := CGO_ENABLED=1 CC=" + FrontCC + " $(GO) build -trimpath -tags " + FrontTags + " -ldflags '" + FrontLDFlags + "'",
		"FRONT_CMDS := " + strings.Join(FrontCommands, " ") + "\n",
		"$(GOBUILD_FRONT) -o $(BIN)/ $(addprefix ./cmd/,$(FRONT_CMDS))",
	} {
		if !strings.Contains(mk, want) {
			t.Errorf("the Makefile lacks %q: keep it and internal/testbin in step", want)
		}
	}
}

func TestCommand(t *testing.T) {
	for _, pkg := range []string{"./cmd/sforge-runtime", "github.com/sforge-dev/netiso/cmd/sforge-hook"} {
		c := Command("go", "/tmp/x", pkg)
		if got := strings.Join(c.Args, " "); got != "go build -trimpath -tags "+FrontTags+" -ldflags "+FrontLDFlags+" -o /tmp/x "+pkg {
			t.Errorf("%s: %s", pkg, got)
		}
		if env := c.Env[len(c.Env)-2:]; env[0] != "CGO_ENABLED=1" || env[1] != "CC="+FrontCC {
			t.Errorf("%s built with %v", pkg, env)
		}
	}
	cni := Command("go", "/tmp/y", "./cmd/sforge-cni")
	if got := strings.Join(cni.Args, " "); got != "go build -trimpath -ldflags "+LDFlags+" -o /tmp/y ./cmd/sforge-cni" {
		t.Errorf("sforge-cni: %s", got)
	}
	if cni.Env[len(cni.Env)-1] != "CGO_ENABLED=0" {
		t.Errorf("sforge-cni: %v", cni.Env[len(cni.Env)-1])
	}
}
