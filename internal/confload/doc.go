// Package confload layers a configuration's sources for the tidemark commands: a YAML file read up to a cap, then
// environment variables (a key's dots written as double underscores after a prefix, plus aliases that fill a key
// only when nothing else sets it), then the changed flags of a pflag.FlagSet (Loader.Load). It also decodes a
// subtree into a struct with confdecode's one-line-per-key errors (Decode), derives key lists from a configuration
// struct's yaml tags (ListKeys, DeprecatedKeys) and prints the effective configuration with its secrets redacted
// (Dump).
//
// Main types: Loader (the sources and their rules) and CappedReader (a reader that fails past a byte cap, so a
// mistaken path such as /dev/zero fails at once).
package confload
