// Package config reads service settings from environment variables with
// defaults, collecting every bad value into one error so a misconfigured
// service says everything that is wrong at start.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Env reads variables through Lookup (os.LookupEnv by default). Errors are
// collected; call Err once after reading every field.
type Env struct {
	Lookup func(string) (string, bool)
	errs   []error
}

// FromOS returns an Env over the process environment.
func FromOS() *Env { return &Env{Lookup: os.LookupEnv} }

// FromMap returns an Env over m, for tests.
func FromMap(m map[string]string) *Env {
	return &Env{Lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func (e *Env) get(key string) (string, bool) {
	v, ok := e.Lookup(key)
	if !ok || strings.TrimSpace(v) == "" {
		return "", false
	}
	return strings.TrimSpace(v), true
}

func (e *Env) fail(key, v, want string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q: want %s", key, v, want))
}

// String returns the value of key, or def when unset.
func (e *Env) String(key, def string) string {
	if v, ok := e.get(key); ok {
		return v
	}
	return def
}

// Optional returns the value of key, def when unset, and "" when set to
// the empty string (how a setting is switched off, e.g. an admin address).
func (e *Env) Optional(key, def string) string {
	v, ok := e.Lookup(key)
	if !ok {
		return def
	}
	return strings.TrimSpace(v)
}

// Required returns the value of key and records an error when it is unset.
func (e *Env) Required(key string) string {
	v, ok := e.get(key)
	if !ok {
		e.errs = append(e.errs, fmt.Errorf("%s is required", key))
	}
	return v
}

// List splits a comma-separated value; def when unset.
func (e *Env) List(key string, def []string) []string {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Int returns an integer within [min, max].
func (e *Env) Int(key string, def, min, max int) int {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		e.fail(key, v, fmt.Sprintf("an integer in [%d, %d]", min, max))
		return def
	}
	return n
}

// Duration returns a Go duration ("250ms", "24h") within [min, max].
func (e *Env) Duration(key string, def, min, max time.Duration) time.Duration {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < min || d > max {
		e.fail(key, v, fmt.Sprintf("a duration in [%s, %s]", min, max))
		return def
	}
	return d
}

// Bool returns a boolean ("true", "false", "1", "0").
func (e *Env) Bool(key string, def bool) bool {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(key, v, "true or false")
		return def
	}
	return b
}

// OneOf returns the value of key, which must be one of allowed; def when
// unset.
func (e *Env) OneOf(key, def string, allowed ...string) string {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	if !slices.Contains(allowed, v) {
		e.fail(key, v, "one of "+strings.Join(allowed, ", "))
		return def
	}
	return v
}

// Err returns every problem found so far, joined, or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }
