package netpol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// NamePrefix starts the name of every policy sforge emits.
	NamePrefix = "sforge-iso-"
	// PodLabel is the label that ties a Work Pod to its policy; its value
	// is LabelValue(pod name).
	PodLabel = "sforge-pod"
	// ManagedByLabel marks objects sforge created, so that an update never
	// overwrites a policy somebody else owns.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedBy is ManagedByLabel's value.
	ManagedBy = "sforge"
	// hashLen is the number of hex digits of SHA-256 appended to shortened
	// names: 40 bits, so that two long names sharing a prefix stay apart.
	hashLen = 10
)

// ValidatePodName checks a Pod name the way the API server does (an RFC 1123
// subdomain of at most 253 characters), so that a bad name fails here with
// the field named rather than as a policy the server refuses.
func ValidatePodName(pod string) error {
	if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		return fmt.Errorf("invalid pod name %q: %s", pod, strings.Join(errs, "; "))
	}
	return nil
}

// Name is the policy name for a Pod: "sforge-iso-<pod>". A Pod name may be
// 253 characters long, as may the policy's, so a name that would be too long
// keeps as much of the Pod name as fits and ends in a hash of the full Pod
// name. The result is a valid object name for every valid Pod name.
func Name(pod string) string {
	return shorten(NamePrefix, pod, validation.DNS1123SubdomainMaxLength)
}

// LabelValue is the value of the `sforge-pod` label for a Pod. Label values
// are limited to 63 characters, Pod names are not: a longer name is
// shortened the same way as in Name.
func LabelValue(pod string) string {
	return shorten("", pod, validation.LabelValueMaxLength)
}

// PodLabels are the labels the launcher puts on the Work Pod so that its
// policy selects it.
func PodLabels(pod string) map[string]string {
	return map[string]string{PodLabel: LabelValue(pod)}
}

// shorten returns prefix+s when it fits in max characters, otherwise
// prefix + a prefix of s + "-" + hash(s). The kept part of s is trimmed of
// trailing '.' and '-': ".-" is invalid in an object name (a DNS label may
// not start with '-'), and a run of dashes before the hash only hides where
// the name was cut.
func shorten(prefix, s string, max int) string {
	if len(prefix)+len(s) <= max {
		return prefix + s
	}
	sum := sha256.Sum256([]byte(s))
	suffix := "-" + hex.EncodeToString(sum[:])[:hashLen]
	keep := s[:max-len(prefix)-len(suffix)]
	keep = strings.TrimRight(keep, "-.")
	return prefix + keep + suffix
}
