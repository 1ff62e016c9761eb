package hook

import (
	"cmp"
	"fmt"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/audit"
	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/policy"
)

// Source names the hook in audit records.
const Source = "sforge-hook"

// record reads what the target's rules refused and appends the audit
// line. It never fails the caller: a problem goes into the line and the
// log.
func (h *Hook) record(eng engine.Engine, t engine.Target, allow policy.Allowlist, names *audit.ResolverRecord) {
	if h.AuditLog == audit.Off {
		return
	}
	start := time.Now()
	value, _ := policy.Encode(allow)
	r, err := eng.Refused(t)
	rec := audit.NewRecord(t.ID, Source, eng.Name(), value, r)
	rec.NetNSInode = audit.NetNSInode(t.NetNS)
	if err != nil {
		rec.Error = oneLine(err.Error())
	}
	rec.Resolver = names
	path := cmp.Or(h.AuditLog, filepath.Join(filepath.Dir(cmp.Or(h.Log.Path, DefaultLogPath)), "audit.jsonl"))
	if err := audit.Append(path, rec); err != nil {
		h.Log.Printf("audit container=%s error: %v", t.ID, err)
		return
	}
	lookups := ""
	if names != nil {
		lookups = fmt.Sprintf(" names=%d lookups=%d", len(names.BlockedNames), names.BlockedNamesTotal)
	}
	h.Log.Printf("audit container=%s blocked=%d destinations=%d%s duration=%s%s", t.ID, r.Total, len(r.Destinations),
		lookups, time.Since(start).Round(time.Microsecond), errSuffix(err))
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " error=" + oneLine(err.Error())
}

// heldNetNS is where the container's own namespace is held, in its bundle.
func heldNetNS(st *specs.State) string { return filepath.Join(st.Bundle, engine.HeldNetNSName) }

// keepNetNS keeps the container's own network namespace until poststop, for
// the counts. Failing to is not the container's failure: the rules are in
// place, only the record at its end will be missing, which the log says.
func (h *Hook) keepNetNS(st *specs.State, nsPath string) {
	if h.AuditLog == audit.Off {
		return
	}
	held := heldNetNS(st)
	err := engine.ReleaseNetNS(held) // one an earlier run of this bundle left
	if err == nil {
		err = engine.HoldNetNS(nsPath, held)
	}
	if err != nil {
		h.Log.Printf("hold container=%s: its refused attempts will not be recorded: %v", st.ID, err)
	}
}
