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
		"$(GOBUILD) -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))",
	} {
		if !strings.Contains(mk, want) {
			t.Errorf("the Makefile lacks %q: keep it and internal/testbin in step", want)
		}
	}
}

func TestCommand(t *testing.T) {
	for _, pkg := range []string{"./cmd/sforge-runtime", "github.com/sforge-dev/netiso/cmd/sforge-cni"} {
		c := Command("go", "/tmp/x", pkg)
		if got := strings.Join(c.Args, " "); got != "go build -trimpath -ldflags "+LDFlags+" -o /tmp/x "+pkg {
			t.Errorf("%s: %s", pkg, got)
		}
		if c.Env[len(c.Env)-1] != "CGO_ENABLED=0" {
			t.Errorf("%s built with %v", pkg, c.Env[len(c.Env)-1])
		}
	}
}
