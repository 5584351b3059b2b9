package main

import (
	"flag"
	"os"
)

// secretFlag defines a string flag for a secret (a signing key, a token)
// whose default is the environment variable env. Usage text never shows
// the value: flag prints a default with the Value's String, which is
// empty for a secret, so `seqflow token -h` in a shell holding the
// gateway's secret does not print it.
func secretFlag(fs *flag.FlagSet, name, env, usage string) *string {
	s := &secretValue{v: os.Getenv(env)}
	fs.Var(s, name, usage)
	return &s.v
}

// secretValue is a flag.Value that keeps its value out of String.
type secretValue struct{ v string }

func (s *secretValue) String() string     { return "" }
func (s *secretValue) Set(v string) error { s.v = v; return nil }
