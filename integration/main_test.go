package integration

import (
	"os"
	"testing"

	"github.com/sforge-dev/netiso/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}
