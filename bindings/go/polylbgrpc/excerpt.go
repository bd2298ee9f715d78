package polylbgrpc

import (
	"fmt"
	"strconv"
)

// excerptChars is how much of a service config's text an error repeats: the
// library cuts what it quotes at the same length, so a megabyte of config
// makes an error (and a log line, and a failed RPC's status) of a kilobyte or
// so rather than a megabyte.
const excerptChars = 512

// head returns s's first excerptChars characters and whether s goes on.
func head(s string) (string, bool) {
	chars := 0
	for i := range s {
		if chars == excerptChars {
			return s[:i], true
		}
		chars++
	}
	return s, false
}

// excerpt is s as written, cut after excerptChars characters with its length
// said.
func excerpt[T ~string | ~[]byte](s T) string {
	h, cut := head(string(s))
	if !cut {
		return h
	}
	return fmt.Sprintf("%s… (%d bytes)", h, len(s))
}

// quoted is s as %q writes it, cut as excerpt cuts it: "head…" (N bytes), as
// the library quotes ('head…' (N bytes)) and the Java policy.
func quoted(s string) string {
	h, cut := head(s)
	if !cut {
		return strconv.Quote(h)
	}
	return fmt.Sprintf("%s (%d bytes)", strconv.Quote(h+"…"), len(s))
}
