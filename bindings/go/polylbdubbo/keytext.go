package polylbdubbo

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// maxKeyDepth bounds how deep appendArgText follows pointers and fields: a
// value that points back into itself (a cyclic list) still ends.
const maxKeyDepth = 32

// appendArgText appends a hash-key argument's text: fmt.Sprint's, except that
// pointers are followed to what they point to. fmt prints a pointer below the
// top level as its address, which differs between equal values (a *string, a
// struct with a pointer field, as nested hessian objects are): keyed by it, one
// user's calls would spread over every provider. Values without pointers print
// exactly as fmt prints them.
func appendArgText(key []byte, a any) []byte {
	if v := reflect.ValueOf(a); v.Kind() == reflect.Pointer && v.IsNil() {
		return append(key, "null"...) // a nil pointer is Java's null, as an untyped nil is
	}
	if !mayHoldPointer(reflect.TypeOf(a), map[reflect.Type]bool{}) {
		return fmt.Append(key, a)
	}
	return appendValueText(key, reflect.ValueOf(a), 0)
}

// mayHoldPointer: whether a value of t can print an address under fmt (an
// interface may hold anything).
func mayHoldPointer(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == nil || seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.Chan, reflect.Func, reflect.Interface:
		return true
	case reflect.Array, reflect.Slice:
		return mayHoldPointer(t.Elem(), seen)
	case reflect.Map:
		return mayHoldPointer(t.Key(), seen) || mayHoldPointer(t.Elem(), seen)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if mayHoldPointer(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// appendValueText prints v as fmt's %v does, pointers followed: a String or
// Error method where fmt would call one, structs as {a b}, slices and arrays as
// [a b], maps as map[k:v] in key order, and a channel or function (no value
// to print) as its type.
func appendValueText(key []byte, v reflect.Value, depth int) []byte {
	if depth > maxKeyDepth {
		return append(key, "..."...)
	}
	if !v.IsValid() {
		return append(key, "<nil>"...)
	}
	if wire, ok := protoWire(v); ok {
		return append(key, wire...)
	}
	if text, ok := methodText(v); ok {
		return append(key, text...)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(key, "<nil>"...)
		}
		return appendValueText(key, v.Elem(), depth+1)
	case reflect.Struct:
		return appendItemsText(key, '{', '}', v.NumField(), v.Field, depth)
	case reflect.Array, reflect.Slice:
		return appendItemsText(key, '[', ']', v.Len(), v.Index, depth)
	case reflect.Map:
		return appendMapText(key, v, depth)
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return append(key, v.Type().String()...)
	}
	return fmt.Append(key, v)
}

// appendItemsText prints n items, item(0) … item(n-1), between open and close,
// separated by spaces (fmt's struct and slice forms).
func appendItemsText(key []byte, open, close byte, n int, item func(int) reflect.Value, depth int) []byte {
	key = append(key, open)
	for i := 0; i < n; i++ {
		if i > 0 {
			key = append(key, ' ')
		}
		key = appendValueText(key, item(i), depth+1)
	}
	return append(key, close)
}

// appendMapText prints a map's entries in the order of their keys (numbers by
// value, anything else by its text), as fmt sorts them.
func appendMapText(key []byte, v reflect.Value, depth int) []byte {
	type entry struct {
		k       reflect.Value
		kText   []byte
		numeric bool
	}
	entries := make([]entry, 0, v.Len())
	for it := v.MapRange(); it.Next(); {
		k := it.Key()
		numeric := false
		switch k.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
			reflect.Float32, reflect.Float64:
			numeric = true
		}
		entries = append(entries, entry{k, appendValueText(nil, k, depth+1), numeric})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.numeric && b.numeric {
			return cmp.Compare(number(a.k), number(b.k))
		}
		return cmp.Compare(string(a.kText), string(b.kText))
	})
	key = append(key, "map["...)
	for i, e := range entries {
		if i > 0 {
			key = append(key, ' ')
		}
		key = append(key, e.kText...)
		key = append(key, ':')
		key = appendValueText(key, v.MapIndex(e.k), depth+1)
	}
	return append(key, ']')
}

func number(v reflect.Value) float64 {
	switch {
	case v.CanInt():
		return float64(v.Int())
	case v.CanUint():
		return float64(v.Uint())
	}
	return v.Float()
}

// methodText is the text of v's Error or String method, where fmt would use
// one (an accessible value, not a nil pointer); a method that panics is
// passed over, as fmt passes it over.
func methodText(v reflect.Value) (text string, ok bool) {
	if !v.CanInterface() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return "", false
	}
	defer func() {
		if recover() != nil {
			text, ok = "", false
		}
	}()
	switch m := v.Interface().(type) {
	case error:
		return m.Error(), true
	case fmt.Stringer:
		return m.String(), true
	}
	return "", false
}

// protoWire is the deterministic wire form of a protobuf message (a Triple
// call's request), APIv2 or legacy APIv1. Not its String(): prototext puts a
// second space between fields in some binaries and not in others (protobuf-go
// varies it by a hash of the executable, so that no one relies on its text),
// and consumers built apart would send one request to different providers.
func protoWire(v reflect.Value) (wire []byte, ok bool) {
	if !v.CanInterface() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil, false
	}
	var m proto.Message
	switch x := v.Interface().(type) {
	case proto.Message:
		m = x
	case protoadapt.MessageV1:
		m = protoadapt.MessageV2Of(x)
	default:
		return nil, false
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, false // an invalid message (a required field unset): its text, as before
	}
	return wire, true
}
