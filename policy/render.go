package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Family is an IP family a rule belongs to.
type Family string

const (
	IPv4 Family = "ipv4"
	IPv6 Family = "ipv6"
)

// Verdict is what a matching rule does with a packet.
type Verdict string

const (
	VerdictAccept Verdict = "accept"
	VerdictDrop   Verdict = "drop"
	// VerdictReject answers with ICMP "administratively prohibited".
	VerdictReject Verdict = "reject"
	// VerdictRejectReset answers a TCP packet with a reset, so connect()
	// fails at once with ECONNREFUSED.
	VerdictRejectReset Verdict = "reject-tcp-reset"
)

// Rule is one abstract firewall rule: every set field must match. The zero
// value of a field means "any". Rules are evaluated in order, the first
// match decides. Engines translate rules; they never invent their own.
type Rule struct {
	Family Family
	// Established matches packets of connections already accepted
	// (conntrack ESTABLISHED or RELATED).
	Established bool
	// InLoopback and OutLoopback match the loopback interface as input or
	// output device.
	InLoopback  bool
	OutLoopback bool
	Dst         netip.Prefix // zero: any destination
	Proto       Protocol     // empty: any protocol
	DstPort     uint16       // zero: any port (requires Proto)
	Verdict     Verdict
	// Comment says why the rule exists; engines may attach it.
	Comment string
}

func (r Rule) String() string {
	var f []string
	f = append(f, string(r.Family))
	if r.Established {
		f = append(f, "established")
	}
	if r.InLoopback {
		f = append(f, "in=lo")
	}
	if r.OutLoopback {
		f = append(f, "out=lo")
	}
	if r.Dst.IsValid() {
		f = append(f, "dst="+r.Dst.String())
	}
	if r.Proto != "" {
		f = append(f, "proto="+string(r.Proto))
	}
	if r.DstPort != 0 {
		f = append(f, "dport="+strconv.Itoa(int(r.DstPort)))
	}
	f = append(f, "-> "+string(r.Verdict))
	return strings.Join(f, " ")
}

// Ruleset is the complete, ordered rule list for one container. IPv4 rules
// filter the container's output; IPv6 rules filter both directions, since
// IPv6 is blocked entirely except on loopback.
type Ruleset struct {
	IPv4 []Rule
	IPv6 []Rule
}

// Len is the total number of rules.
func (rs Ruleset) Len() int { return len(rs.IPv4) + len(rs.IPv6) }

// DNSPort is the port DNS resolvers are allowed on, over UDP and TCP.
const DNSPort = 53

// Rules renders an allowlist into the ordered rule list of SPEC.md "The
// rules inside a namespace":
//
//	IPv4 output: established/related accept; Docker's embedded resolver
//	rejected unless listed as DNS; loopback accept; DNS 53 UDP/TCP to each
//	resolver; each endpoint; everything else rejected (TCP reset, then ICMP)
//	or dropped.
//	IPv6 both directions: loopback accept; everything else rejected or dropped.
func Rules(a Allowlist) (Ruleset, error) {
	c, err := a.Canonical()
	if err != nil {
		return Ruleset{}, err
	}
	v4 := []Rule{{Family: IPv4, Established: true, Verdict: VerdictAccept, Comment: "replies to allowed connections"}}
	if !c.AllowsDNS(DockerEmbeddedDNS) {
		// Docker DNATs 127.0.0.11:53 to another loopback port, so the
		// port is unknown here: close the whole address. It must come
		// before the loopback accept.
		v4 = append(v4, Rule{Family: IPv4, Dst: netip.PrefixFrom(DockerEmbeddedDNS, 32), Verdict: finalVerdict(c.Action, ""), Comment: "no DNS: Docker embedded resolver"})
	}
	v4 = append(v4, Rule{Family: IPv4, OutLoopback: true, Verdict: VerdictAccept, Comment: "loopback"})
	for _, d := range c.DNS {
		dst := netip.PrefixFrom(d, 32)
		v4 = append(v4,
			Rule{Family: IPv4, Dst: dst, Proto: UDP, DstPort: DNSPort, Verdict: VerdictAccept, Comment: "dns"},
			Rule{Family: IPv4, Dst: dst, Proto: TCP, DstPort: DNSPort, Verdict: VerdictAccept, Comment: "dns"},
		)
	}
	for _, e := range c.Endpoints {
		v4 = append(v4, Rule{Family: IPv4, Dst: e.Prefix, Proto: e.Proto, DstPort: e.Port, Verdict: VerdictAccept, Comment: "allowed endpoint"})
	}
	v4 = append(v4, denyRules(IPv4, c.Action)...)

	v6 := []Rule{
		{Family: IPv6, InLoopback: true, Verdict: VerdictAccept, Comment: "loopback"},
		{Family: IPv6, OutLoopback: true, Verdict: VerdictAccept, Comment: "loopback"},
	}
	v6 = append(v6, denyRules(IPv6, c.Action)...)
	return Ruleset{IPv4: v4, IPv6: v6}, nil
}

func finalVerdict(a Action, proto Protocol) Verdict {
	switch {
	case a == Drop:
		return VerdictDrop
	case proto == TCP:
		return VerdictRejectReset
	default:
		return VerdictReject
	}
}

func denyRules(f Family, a Action) []Rule {
	if a == Drop {
		return []Rule{{Family: f, Verdict: VerdictDrop, Comment: "everything else"}}
	}
	return []Rule{
		{Family: f, Proto: TCP, Verdict: VerdictRejectReset, Comment: "everything else"},
		{Family: f, Verdict: VerdictReject, Comment: "everything else"},
	}
}

// ChainPrefix starts the name of every chain (and nftables table) sforge
// owns, so that tools and tests can find them.
const ChainPrefix = "SFORGE_"

// MaxChainName is the longest chain name iptables accepts
// (XT_EXTENSION_MAXNAMELEN minus the terminating NUL).
const MaxChainName = 28

// ChainName derives the per-container chain name from a container id:
// SFORGE_ + up to 10 sanitised characters of the id + _ + 10 hex digits of
// the id's SHA-256. The hash keeps names of ids that share a prefix apart;
// the readable part lets a person match a chain to `docker ps`.
func ChainName(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("empty container id")
	}
	var readable strings.Builder
	for _, r := range id {
		if readable.Len() == 10 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			readable.WriteRune(r)
		}
	}
	sum := sha256.Sum256([]byte(id))
	name := ChainPrefix + readable.String() + "_" + hex.EncodeToString(sum[:5])
	return name, nil
}

// Hooks are the built-in chains that jump to our chain, per family.
func Hooks(f Family) []string {
	if f == IPv6 {
		return []string{"INPUT", "OUTPUT"}
	}
	return []string{"OUTPUT"}
}

// IPTablesRules renders one family's rules as iptables rule specifications
// (the arguments after "-A CHAIN"), the form both iptables-restore and
// go-iptables understand.
func IPTablesRules(rules []Rule) [][]string {
	out := make([][]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, iptablesSpec(r))
	}
	return out
}

func iptablesSpec(r Rule) []string {
	var s []string
	if r.InLoopback {
		s = append(s, "-i", "lo")
	}
	if r.OutLoopback {
		s = append(s, "-o", "lo")
	}
	if r.Dst.IsValid() {
		s = append(s, "-d", r.Dst.String())
	}
	if r.Proto != "" {
		s = append(s, "-p", string(r.Proto))
		if r.DstPort != 0 {
			s = append(s, "-m", string(r.Proto), "--dport", strconv.Itoa(int(r.DstPort)))
		}
	}
	if r.Established {
		s = append(s, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED")
	}
	switch r.Verdict {
	case VerdictAccept:
		// RETURN, not ACCEPT: ACCEPT would end the whole traversal of
		// OUTPUT, so when containers share a namespace the first chain's
		// allowlist would overrule the others'. With RETURN every chain
		// jumped to must let a packet pass, as with nftables, where each
		// container's table is evaluated on its own.
		s = append(s, "-j", "RETURN")
	case VerdictDrop:
		s = append(s, "-j", "DROP")
	case VerdictRejectReset:
		s = append(s, "-j", "REJECT", "--reject-with", "tcp-reset")
	case VerdictReject:
		if r.Family == IPv6 {
			s = append(s, "-j", "REJECT", "--reject-with", "icmp6-adm-prohibited")
		} else {
			s = append(s, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited")
		}
	}
	return s
}

// RestoreInstall renders an iptables-restore payload (for --noflush) that
// creates or replaces chain with rules in the filter table. When addJumps is
// true it also inserts a jump to the chain at the top of each hook chain;
// the caller passes false when the jumps already exist, so that a re-run
// replaces the chain's rules without duplicating jumps.
func RestoreInstall(f Family, chain string, rules []Rule, addJumps bool) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	// Declaring the chain creates it, or flushes it when it exists.
	fmt.Fprintf(&b, ":%s - [0:0]\n", chain)
	for _, spec := range IPTablesRules(rules) {
		fmt.Fprintf(&b, "-A %s %s\n", chain, strings.Join(spec, " "))
	}
	if addJumps {
		for _, h := range Hooks(f) {
			fmt.Fprintf(&b, "-I %s 1 -j %s\n", h, chain)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// RestoreRemove renders an iptables-restore payload (for --noflush) that
// deletes the given jumps to chain and then the chain itself. The caller
// lists only the hooks that still jump to the chain.
func RestoreRemove(chain string, jumpsFrom []string) string {
	var b strings.Builder
	b.WriteString("*filter\n")
	fmt.Fprintf(&b, ":%s - [0:0]\n", chain)
	for _, h := range jumpsFrom {
		fmt.Fprintf(&b, "-D %s -j %s\n", h, chain)
	}
	fmt.Fprintf(&b, "-X %s\n", chain)
	b.WriteString("COMMIT\n")
	return b.String()
}
