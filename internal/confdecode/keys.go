package confdecode

import (
	"encoding"
	"reflect"
	"strings"
	"time"
)

// Key is one key of a configuration struct as a file writes it, found by walking its yaml tags.
type Key struct {
	// Name is the dotted path ("kafka.sasl.mechanism"); a list of blocks is written with [] ("clusters[].name",
	// "lag.groups[].match").
	Name string
	// Field is the struct field the key decodes into; Owner is the struct type that declares it.
	Field reflect.StructField
	Owner reflect.Type
	// Index is the field's path from the walked type (reflect.Value.FieldByIndex), nil under a list.
	Index []int
	// Deprecated is the key that replaces this one (the field's `deprecated` tag), "" for a current key.
	Deprecated string
}

// LeafType is t without pointers.
func LeafType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

// IsBlock reports whether t is decoded as a block of keys (a struct the decoder walks), not as one value.
func IsBlock(t reflect.Type) bool {
	t = LeafType(t)
	return t.Kind() == reflect.Struct && t != reflect.TypeOf(time.Time{}) && !reflect.PointerTo(t).Implements(textUnmarshaler)
}

// Walk returns every key of the struct type t under prefix ("" for none), each block before its keys, in field
// order.
func Walk(t reflect.Type, prefix string) []Key {
	var out []Key
	walk(t, prefix, []int{}, func(k Key) { out = append(out, k) })
	return out
}

func walk(t reflect.Type, prefix string, index []int, fn func(Key)) {
	t = LeafType(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		var idx []int
		if index != nil {
			idx = append(append([]int{}, index...), i)
		}
		fn(Key{Name: key, Field: f, Owner: t, Index: idx, Deprecated: f.Tag.Get("deprecated")})
		ft := LeafType(f.Type)
		switch {
		case IsBlock(ft):
			walk(ft, key, idx, fn)
		case ft.Kind() == reflect.Slice && IsBlock(ft.Elem()):
			walk(ft.Elem(), key+"[]", nil, fn)
		}
	}
}

// DefaultedStrings returns the string keys (under prefix) of defaulted, a struct whose zero value its SetDefaults
// filled, that are not empty: the keys whose empty value a file must not set (CheckEmpty). Keys under lists are
// left out.
func DefaultedStrings(defaulted any, prefix string) []string {
	v := reflect.ValueOf(defaulted)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var out []string
	for _, k := range Walk(v.Type(), prefix) {
		if k.Index != nil && k.Field.Type.Kind() == reflect.String && v.FieldByIndex(k.Index).String() != "" {
			out = append(out, k.Name)
		}
	}
	return out
}
