package testcluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The harness writes down every change it makes to the host *before*
// making it, one JSON line per change in Dir/state.jsonl. Teardown reads
// that file, not the memory of the process that made the changes, so the
// same code undoes a finished test, a start-up that failed half-way, and
// the leftovers of a test process that was killed (found by the next run
// through Dir/owner). Every undo step tolerates the change never having
// happened.

const (
	stateFile = "state.jsonl"
	ownerFile = "owner"
	dirPrefix = "sforge-node-"
)

// Kinds of records.
const (
	kindNetNS   = "netns"   // Name: a named network namespace (/run/netns/NAME)
	kindCgroup  = "cgroup"  // Path: a cgroup made in every hierarchy, e.g. /sforge-node-ID
	kindSysctl  = "sysctl"  // Path: key under /proc/sys; Old: value to restore; New: the kubelet's
	kindProc    = "proc"    // Name, PID, Start: a daemon
	kindHostDir = "hostdir" // Path: a directory outside Dir that did not exist before
	kindCNINet  = "cninet"  // Name: the CNI network name, whose libcni cache entries are ours
	kindCtrd    = "ctrd"    // Path: containerd's socket, named on the command line of its shims
)

type record struct {
	Kind  string `json:"kind"`
	Name  string `json:"name,omitempty"`
	Path  string `json:"path,omitempty"`
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"` // /proc/PID/stat starttime: tells a reused PID apart
	Old   string `json:"old,omitempty"`
	New   string `json:"new,omitempty"`
}

// journal appends records to Dir/state.jsonl.
type journal struct{ path string }

func (j journal) add(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(j.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("failed to open %s: %w", j.path, err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("failed to write %s: %w", j.path, err)
	}
	// Written before the change it announces: must survive a crash.
	return f.Sync()
}

func readRecords(dir string) ([]record, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r record
		// A torn last line (killed mid-write) is skipped: its change was
		// never made.
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// procStart returns the start time of pid (field 22 of /proc/PID/stat),
// or 0 when the process does not exist.
func procStart(pid int) uint64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may contain spaces and parentheses:
	// fields are counted after its closing parenthesis.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// alive reports whether pid is still the process that was recorded.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	s := procStart(pid)
	return s != 0 && (start == 0 || s == start)
}

// writeOwner records the test process that owns dir.
func writeOwner(dir string) error {
	pid := os.Getpid()
	return os.WriteFile(filepath.Join(dir, ownerFile), fmt.Appendf(nil, "%d %d\n", pid, procStart(pid)), 0o600)
}

// ownerAlive reports whether the process that created dir still runs. A
// dir without a readable owner is not judged stale unless it is old: it
// may be being created right now.
func ownerAlive(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(data), "%d %d", &pid, &start); err != nil {
		return false
	}
	return alive(pid, start)
}

func errnoIs(err error, errno syscall.Errno) bool { return errors.Is(err, errno) }
