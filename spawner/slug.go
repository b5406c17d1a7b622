package spawner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The naming rules in this file match KubeSpawner's kubespawner/slugs.py
// (the 'safe' scheme, default since KubeSpawner 7) and the legacy 'escape'
// scheme built on escapism, so pods, PVCs and labels keep the names an
// existing hub already uses.

const (
	// slugMaxLength bounds each of {username}, {servername} and
	// {user_server} (KubeSpawner's _slug_max_length).
	slugMaxLength = 48
	// defaultSlugMaxLength is safe_slug's truncation when no max_length is
	// given, as for the hub.jupyter.org/* label values.
	defaultSlugMaxLength = 32
	hashLength           = 8
	// hashSuffixLength is len("---") + hashLength.
	hashSuffixLength = hashLength + 3
)

// Slug schemes accepted by slug_scheme.
const (
	SlugSchemeSafe   = "safe"
	SlugSchemeEscape = "escape"
)

// IsValidObjectName reports whether s is usable unchanged as a Kubernetes
// object name under both RFC 1035 and RFC 1123 label rules: 1 to 63
// characters of [a-z0-9-], starting with a letter and ending with a letter
// or digit.
func IsValidObjectName(s string) bool {
	if len(s) < 1 || len(s) > 63 {
		return false
	}
	if !isLowerLetter(s[0]) || !isLowerAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// IsValidLabelValue reports whether s is a valid Kubernetes label value:
// empty, or up to 63 characters of [A-Za-z0-9._-] that start and end with
// an alphanumeric character.
//
// KubeSpawner's check uses a case-insensitive Python regex, which also lets
// through four non-ASCII letters (U+0130, U+0131, U+017F, U+212A) that the
// API server rejects; this check is ASCII only, so such names get hashed.
func IsValidLabelValue(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// SafeSlug returns name unchanged if valid(name) holds, it contains no "--"
// and it fits maxLength; otherwise a lowercase, hyphenated, truncated form
// with "---" and 8 hex digits of the name's SHA-256 appended, which is valid
// and collision-free. maxLength 0 means KubeSpawner's default of 32 for the
// hashed form and no limit for names kept as they are. It fails only when
// maxLength leaves no room for the hash suffix (below 12).
func SafeSlug(name string, valid func(string) bool, maxLength int) (string, error) {
	hashedLength := maxLength
	if hashedLength == 0 {
		hashedLength = defaultSlugMaxLength
	}
	// A "--" could collide with the {username}--{servername} join.
	if !strings.Contains(name, "--") && valid(name) && (maxLength == 0 || len(name) <= maxLength) {
		return name, nil
	}
	return stripAndHash(name, hashedLength)
}

// mustSafeSlug is SafeSlug for the fixed lengths used in this package, all
// of which leave room for the hash.
func mustSafeSlug(name string, valid func(string) bool, maxLength int) string {
	s, err := SafeSlug(name, valid, maxLength)
	if err != nil {
		panic(err) // unreachable: callers pass 0 or slugMaxLength
	}
	return s
}

// labelSlug is the value KubeSpawner gives the hub.jupyter.org/username and
// hub.jupyter.org/servername labels.
func labelSlug(name string) string {
	return mustSafeSlug(name, IsValidLabelValue, 0)
}

func stripAndHash(name string, maxLength int) (string, error) {
	nameLength := maxLength - hashSuffixLength
	if nameLength < 1 {
		return "", fmt.Errorf("cannot make safe names shorter than %d", hashSuffixLength+1)
	}
	sum := sha256.Sum256([]byte(name))
	return extractSafeName(name, nameLength) + "---" + hex.EncodeToString(sum[:])[:hashLength], nil
}

// MultiSlug joins the safe forms of names with "--" and appends a single
// hash of all of them, fitting maxLength (KubeSpawner's multi_slug). Names
// are hashed with 0xFF between them, a byte UTF-8 never produces, so
// ("ab", "c") and ("a", "bc") differ.
func MultiSlug(names []string, maxLength int) (string, error) {
	h := sha256.New()
	for i, n := range names {
		if i > 0 {
			h.Write([]byte{0xff})
		}
		h.Write([]byte(n))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:hashLength]

	perName := (maxLength - (hashLength + 1)) / len(names)
	nameMax := perName - 2 // room for the "--" join
	if nameMax < 2 {
		return "", fmt.Errorf("not enough characters for %d names: %d", len(names), maxLength)
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = extractSafeName(n, nameMax)
	}
	return strings.Join(parts, "--") + "---" + sum, nil
}

// extractSafeName lowercases name, turns every run of characters outside
// [a-z0-9] into one '-', trims and truncates to maxLength, and makes sure it
// starts with a letter ("x-" prefix) and is not empty ("x").
func extractSafeName(name string, maxLength int) string {
	var b strings.Builder
	pendingDash := false
	for _, c := range pythonLower(name) {
		if c < utf8.RuneSelf && isLowerAlnum(byte(c)) {
			if pendingDash {
				b.WriteByte('-')
				pendingDash = false
			}
			b.WriteRune(c)
		} else {
			pendingDash = true
		}
	}
	if pendingDash {
		b.WriteByte('-')
	}
	safe := strings.TrimLeft(b.String(), "-")
	if len(safe) > maxLength {
		safe = safe[:maxLength]
	}
	safe = strings.TrimRight(safe, "-")
	if safe != "" && !isLowerLetter(safe[0]) {
		// Not re-trimmed afterwards, exactly as in KubeSpawner.
		if len(safe) > maxLength-2 {
			safe = safe[:maxLength-2]
		}
		safe = "x-" + safe
	}
	if safe == "" {
		safe = "x"
	}
	return safe
}

// pythonLower lowercases like Python's str.lower. Go's simple case mapping
// differs only where a character's full lowercase form has more than one
// code point; of those only U+0130 yields an ASCII letter that survives
// slugging ("i" followed by U+0307, which becomes '-').
func pythonLower(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

// EscapeSlug is the legacy 'escape' scheme: escapism.escape with safe
// characters [a-z0-9] and escape character '-', lowercased. Every other
// UTF-8 byte becomes '-' and its hex value, without zero padding (a tab
// becomes "-9"), exactly as escapism formats it.
func EscapeSlug(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if isLowerAlnum(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "-%x", c)
	}
	return b.String()
}

func isLowerLetter(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool       { return c >= '0' && c <= '9' }
func isLowerAlnum(c byte) bool  { return isLowerLetter(c) || isDigit(c) }
func isAlnum(c byte) bool       { return isLowerAlnum(c) || (c >= 'A' && c <= 'Z') }
