//go:build cgo

package polylb

import "strconv"

// utf8Flaw words the first flaw of s, which is not UTF-8, as the library
// (Rust's Utf8Error) words an address's or a config's, for the one lookup that
// returns a status without a message: a method name. An invalid sequence ends
// where the library's does (Unicode's maximal subpart: the bytes that could
// still begin a character), so the index and length agree in every binding.
func utf8Flaw(s string) string {
	for i := 0; i < len(s); {
		first := s[i]
		if first < 0x80 {
			i++
			continue
		}
		width, low, high := sequenceOf(first)
		if width == 0 {
			return invalidSequence(1, i)
		}
		for k := 1; k < width; k++ {
			if i+k == len(s) {
				return "incomplete utf-8 byte sequence from index " + strconv.Itoa(i)
			}
			b := s[i+k]
			// Only the second byte has a narrower range (no overlong forms,
			// surrogates or code points past U+10FFFF).
			if k > 1 {
				low, high = 0x80, 0xBF
			}
			if b < low || b > high {
				return invalidSequence(k, i)
			}
		}
		i += width
	}
	return "valid utf-8"
}

// sequenceOf gives the length of the sequence a lead byte starts and the range
// its second byte must be in; width 0 for a byte that starts none.
func sequenceOf(first byte) (width int, low, high byte) {
	switch {
	case first >= 0xC2 && first <= 0xDF:
		return 2, 0x80, 0xBF
	case first == 0xE0:
		return 3, 0xA0, 0xBF
	case first == 0xED:
		return 3, 0x80, 0x9F
	case first >= 0xE1 && first <= 0xEF:
		return 3, 0x80, 0xBF
	case first == 0xF0:
		return 4, 0x90, 0xBF
	case first >= 0xF1 && first <= 0xF3:
		return 4, 0x80, 0xBF
	case first == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

func invalidSequence(length, at int) string {
	return "invalid utf-8 sequence of " + strconv.Itoa(length) + " bytes from index " + strconv.Itoa(at)
}
