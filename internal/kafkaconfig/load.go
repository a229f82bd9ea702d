package kafkaconfig

import (
	"errors"

	"github.com/tidemark/tidemark/internal/confdecode"
)

// LoadYAML returns the kafka: block of the YAML document doc (a `tidemark run` configuration, whose other sections
// are not read, or a file holding only that block), read by the rules every Tidemark command reads it with: parsed
// and decoded by confdecode (unknown keys and values of the wrong type are errors naming the full key, `tls: true`
// is TLS with the system roots), a key with a default not set empty, defaults filled, then Validate. The errors are
// the ones `tidemark run` and `tidemark lag` give for the same block, without their "config: " prefix.
func LoadYAML(doc []byte) (Config, error) {
	var c Config
	k, err := confdecode.Parse(doc)
	if err != nil {
		return c, err
	}
	if !k.Exists("kafka") {
		return c, errors.New("no kafka: block")
	}
	if errs := confdecode.CheckEmpty(k, DefaultedKeys("kafka")); len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	if err := confdecode.Decode(confdecode.Subtree(k, "kafka"), "kafka", &c); err != nil {
		return c, err
	}
	c.SetDefaults()
	return c, c.ValidateAt("kafka")
}

// DefaultedKeys are the string keys of the block (under prefix) that SetDefaults fills: setting one empty is an
// error, not a request for its default.
func DefaultedKeys(prefix string) []string {
	var c Config
	c.SetDefaults()
	return confdecode.DefaultedStrings(&c, prefix)
}
