// Package utf8text writes byte strings as the UTF-8 text the library takes.
package utf8text

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape is s with each byte that is not part of valid UTF-8 written as
// \xNN. The library takes addresses and zones as UTF-8 and rejects a whole
// set for one that is not, while gRPC's addresses and dubbo-go's URL
// parameters are bytes (a unix socket's path; common.NewURL unescapes %FF to
// the byte): one endpoint must not fail every call. Distinct byte strings
// stay distinct unless a valid one spells such an escape itself; the hash
// strategies place the invoker by this text.
func Escape(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, "\\x%02x", s[0])
		} else {
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}
