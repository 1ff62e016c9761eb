package hook

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Logger appends one line per event to a file. It never fails: a log that
// cannot be written must not stop isolation, and the hook must stay silent
// on stdout and on stderr when it succeeds.
type Logger struct {
	Path string
}

// Printf appends one line, stamped with the time, in a single write so
// that hooks of concurrent container starts do not interleave.
func (l *Logger) Printf(format string, args ...any) {
	if l == nil || l.Path == "" {
		return
	}
	msg := strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(fmt.Sprintf(format, args...))
	line := time.Now().UTC().Format(time.RFC3339Nano) + " " + msg + "\n"
	f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		if mkErr := os.MkdirAll(filepath.Dir(l.Path), 0o750); mkErr != nil {
			return
		}
		if f, err = os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err != nil {
			return
		}
	}
	_, _ = f.WriteString(line)
	_ = f.Close()
}
