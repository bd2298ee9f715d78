//go:build cgo

package polylb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// statsDecoder reads the stats document in one pass, each field straight into
// its place (Extra for the fields no struct names). encoding/json's Decoder
// token API builds an error for every scalar it reads inside an object (its
// scanner ends each value at the next comma), which made a token-by-token read
// no faster than a json.Unmarshal per level. The document is checked valid
// first (json.Valid), so reading it needs only to find where strings, numbers
// and nested values end. It follows encoding/json where the document could
// differ from the library's: a null leaves a field as it is, a repeated key's
// last value wins, a key matches a field whatever its case (the exact name
// first), a string that is not UTF-8 gets U+FFFD for each bad byte, and a
// value of the wrong type is an error naming the field.
type statsDecoder struct {
	data []byte
	pos  int
}

// decodeWhole runs read over data, which must hold one JSON value.
func decodeWhole(data []byte, read func(*statsDecoder) error) error {
	if !json.Valid(data) {
		var v any
		return json.Unmarshal(data, &v) // encoding/json's own syntax error
	}
	return read(&statsDecoder{data: data})
}

// The names each level's switch knows, read from the structs' json tags (one
// list of names, the tags, as json.Marshal of these structs writes them).
var (
	statsNames   = jsonNames(reflect.TypeFor[Stats]())
	invokerNames = jsonNames(reflect.TypeFor[InvokerStats]())
	methodNames  = jsonNames(reflect.TypeFor[MethodStats]())
)

func jsonNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// named is the field name that key matches as encoding/json matches keys: a
// name equal to it but for case (only a key that no name equals comes here).
func named(key string, names []string) (string, bool) {
	for _, name := range names {
		if strings.EqualFold(key, name) {
			return name, true
		}
	}
	return "", false
}

func (d *statsDecoder) stats(s *Stats) error {
	var field func(key string) error
	field = func(key string) error {
		switch key {
		case "strategy":
			return d.str(key, &s.Strategy)
		case "invokers":
			s.Invokers = emptied(s.Invokers)
			return d.array(key, func() error {
				s.Invokers = append(s.Invokers, InvokerStats{})
				return d.invoker(&s.Invokers[len(s.Invokers)-1])
			}, func() { s.Invokers = nil })
		}
		if name, ok := named(key, statsNames); ok {
			return field(name)
		}
		return d.extra(key, &s.Extra)
	}
	return d.object("stats", field)
}

func (d *statsDecoder) invoker(s *InvokerStats) error {
	var field func(key string) error
	field = func(key string) error {
		switch key {
		case "id":
			return d.uint(key, &s.ID)
		case "address":
			return d.str(key, &s.Address)
		case "zone":
			return d.str(key, &s.Zone)
		case "weight":
			return d.int(key, &s.Weight)
		case "effective_weight":
			return d.int(key, &s.EffectiveWeight)
		case "active":
			return d.int(key, &s.Active)
		case "selected":
			return d.uint(key, &s.Selected)
		case "succeeded":
			return d.uint(key, &s.Succeeded)
		case "failures":
			return d.uint(key, &s.Failures)
		case "timeouts":
			return d.uint(key, &s.Timeouts)
		case "methods":
			s.Methods = emptied(s.Methods)
			return d.array(key, func() error {
				s.Methods = append(s.Methods, MethodStats{})
				return d.method(&s.Methods[len(s.Methods)-1])
			}, func() { s.Methods = nil })
		}
		if name, ok := named(key, invokerNames); ok {
			return field(name)
		}
		return d.extra(key, &s.Extra)
	}
	return d.object("invoker", field)
}

func (d *statsDecoder) method(s *MethodStats) error {
	var field func(key string) error
	field = func(key string) error {
		switch key {
		case "method":
			return d.str(key, &s.Method)
		case "active":
			return d.int(key, &s.Active)
		case "selected":
			return d.uint(key, &s.Selected)
		case "succeeded":
			return d.uint(key, &s.Succeeded)
		case "failures":
			return d.uint(key, &s.Failures)
		case "timeouts":
			return d.uint(key, &s.Timeouts)
		}
		if name, ok := named(key, methodNames); ok {
			return field(name)
		}
		return d.extra(key, &s.Extra)
	}
	return d.object("method", field)
}

// object reads one object (or null), calling field with each key once the
// decoder stands before its value; field must read the value.
func (d *statsDecoder) object(what string, field func(key string) error) error {
	if d.null() {
		return nil
	}
	if d.data[d.pos] != '{' {
		return fmt.Errorf("polylb: stats: %s is not an object", what)
	}
	d.pos++
	for {
		d.space()
		switch d.data[d.pos] {
		case '}':
			d.pos++
			return nil
		case ',':
			d.pos++
			d.space()
		}
		key, _ := d.text()
		d.space()
		d.pos++ // ':'
		d.space()
		if err := field(key); err != nil {
			return err
		}
	}
}

// array reads one array, calling elem before each element; null calls null.
// emptied is s with no elements, never nil: encoding/json makes [] an empty
// slice and null a nil one (array's null callback).
func emptied[T any](s []T) []T {
	if s == nil {
		return []T{} // no allocation: a zero-length slice points at no array
	}
	return s[:0]
}

func (d *statsDecoder) array(key string, elem func() error, null func()) error {
	if d.null() {
		null()
		return nil
	}
	if d.data[d.pos] != '[' {
		return fmt.Errorf("polylb: stats: %q is not an array", key)
	}
	d.pos++
	for {
		d.space()
		switch d.data[d.pos] {
		case ']':
			d.pos++
			return nil
		case ',':
			d.pos++
			d.space()
		}
		if err := elem(); err != nil {
			return err
		}
	}
}

func (d *statsDecoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// null reads a null if one is next (after white space).
func (d *statsDecoder) null() bool {
	d.space()
	if d.data[d.pos] == 'n' {
		d.pos += len("null")
		return true
	}
	return false
}

// text reads a string, which must be next.
func (d *statsDecoder) text() (string, error) {
	start := d.pos
	escaped, ascii := false, true
	d.pos++
	for d.data[d.pos] != '"' {
		switch c := d.data[d.pos]; {
		case c == '\\':
			escaped = true
			d.pos++
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.pos++
	}
	d.pos++
	raw := d.data[start:d.pos]
	// encoding/json replaces each byte that is not UTF-8 with U+FFFD.
	if !escaped && (ascii || utf8.Valid(raw)) {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// scalar reads a number, true or false: up to the next delimiter.
func (d *statsDecoder) scalar() []byte {
	start := d.pos
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return d.data[start:d.pos]
		}
		d.pos++
	}
	return d.data[start:]
}

// value reads any value and returns its bytes.
func (d *statsDecoder) value() []byte {
	start := d.pos
	switch d.data[d.pos] {
	case '"':
		_, _ = d.text() // only its end is wanted
	case '{', '[':
		depth := 0
		for {
			switch d.data[d.pos] {
			case '"':
				_, _ = d.text()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			d.pos++
			if depth == 0 {
				break
			}
		}
	default:
		d.scalar()
	}
	return d.data[start:d.pos]
}

func (d *statsDecoder) str(key string, out *string) error {
	if d.null() {
		return nil
	}
	if d.data[d.pos] != '"' {
		return fmt.Errorf("polylb: stats: %q is not a string", key)
	}
	s, err := d.text()
	if err != nil {
		return fmt.Errorf("polylb: stats: %q: %w", key, err)
	}
	*out = s
	return nil
}

// number reads a number, reporting false for a null.
func (d *statsDecoder) number(key string) (string, bool, error) {
	if d.null() {
		return "", false, nil
	}
	if c := d.data[d.pos]; c != '-' && (c < '0' || c > '9') {
		return "", false, fmt.Errorf("polylb: stats: %q is not a number", key)
	}
	return string(d.scalar()), true, nil
}

func (d *statsDecoder) int(key string, out *int64) error {
	n, ok, err := d.number(key)
	if !ok {
		return err
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return fmt.Errorf("polylb: stats: %q: %w", key, err)
	}
	*out = v
	return nil
}

func (d *statsDecoder) uint(key string, out *uint64) error {
	n, ok, err := d.number(key)
	if !ok {
		return err
	}
	v, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return fmt.Errorf("polylb: stats: %q: %w", key, err)
	}
	*out = v
	return nil
}

// extra keeps the value of a field no struct names, undecoded (a copy: the
// document's buffer is not kept).
func (d *statsDecoder) extra(key string, into *map[string]json.RawMessage) error {
	raw := json.RawMessage(bytes.Clone(d.value()))
	if *into == nil {
		*into = make(map[string]json.RawMessage)
	}
	(*into)[key] = raw
	return nil
}
