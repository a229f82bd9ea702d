package main

import (
	"reflect"

	"github.com/tidemark/tidemark/internal/confdecode"
	"github.com/tidemark/tidemark/internal/confload"
)

// defaultedStringKeys are the string keys whose empty value setDefaults replaces: the string fields of a zero
// runConfig that setDefaults leaves non-empty. Their empty value in a file is an error, not a request for the default.
func defaultedStringKeys() []string {
	var c runConfig
	c.setDefaults()
	return confdecode.DefaultedStrings(&c, "")
}

var (
	// listKeys are runConfig's keys whose value is a list of scalars: split on commas when they come from the
	// environment.
	listKeys         = confload.ListKeys(reflect.TypeOf(runConfig{}))
	defaultedStrings = defaultedStringKeys()
)
