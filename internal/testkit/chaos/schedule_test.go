package chaos

import (
	"reflect"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	const st = 6 * time.Second
	cases := []struct {
		name  string
		kinds []Kind
		n     int
	}{
		{"all kinds, four rounds", AllKinds, 4 * len(AllKinds)},
		{"short kinds, one round", ShortKinds, len(ShortKinds)},
		{"a partial round", AllKinds, len(AllKinds) + 3},
		{"one kind", []Kind{RedisWipe}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Schedule(42, c.kinds, c.n, st)
			if !reflect.DeepEqual(a, Schedule(42, c.kinds, c.n, st)) {
				t.Fatal("the same seed gave another schedule")
			}
			if len(a) != c.n {
				t.Fatalf("%d faults, want %d", len(a), c.n)
			}
			for i, f := range a {
				if f.N != i+1 {
					t.Fatalf("fault %d numbered %d", i, f.N)
				}
				if f.Instance < 0 || f.Instance >= instances || f.Node < 1 || f.Node > 3 || f.Gap <= 0 {
					t.Fatalf("%v: target or gap out of range", f)
				}
				if f.Kind.isStop() && f.Hold <= st {
					t.Fatalf("%v: a zombie pause must outlast the session timeout %s", f, st)
				}
				if f.Hold < 0 || f.Hold > st+10*time.Second {
					t.Fatalf("%v: hold out of range", f)
				}
			}
			// Every full round holds every kind exactly once.
			for r := 0; (r+1)*len(c.kinds) <= len(a); r++ {
				seen := map[Kind]int{}
				for _, f := range a[r*len(c.kinds) : (r+1)*len(c.kinds)] {
					seen[f.Kind]++
				}
				for _, k := range c.kinds {
					if seen[k] != 1 {
						t.Fatalf("round %d has %s %d times: %v", r, k, seen[k], seen)
					}
				}
			}
		})
	}
}

func TestScheduleSeedsDiffer(t *testing.T) {
	a := Schedule(1, AllKinds, len(AllKinds), time.Second)
	b := Schedule(2, AllKinds, len(AllKinds), time.Second)
	if reflect.DeepEqual(a, b) {
		t.Fatal("seeds 1 and 2 gave the same schedule")
	}
}

func TestShortKindsCoverTheIssue(t *testing.T) {
	have := map[Kind]bool{}
	services := map[string]bool{}
	for _, k := range ShortKinds {
		if !knownKind(k) {
			t.Fatalf("unknown kind %s", k)
		}
		have[k] = true
		if s := k.service(); s != "" && !k.isStop() {
			services[s] = true
		}
	}
	for _, s := range []string{"sequencer", "persister", "pusher", "gateway"} {
		if !services[s] {
			t.Errorf("chaos:short kills no %s", s)
		}
	}
	for _, k := range []Kind{GatewayMidSend, KafkaCoordinator, RedisWipe, PostgresRestart} {
		if !have[k] {
			t.Errorf("chaos:short lacks %s", k)
		}
	}
	stops := 0
	for k := range have {
		if k.isStop() {
			stops++
		}
	}
	if stops == 0 {
		t.Error("chaos:short has no zombie (SIGSTOP) fault")
	}
}

func TestOptionsValidation(t *testing.T) {
	ok := Options{Brokers: []string{"a:1", "b:2", "c:3"}}
	cases := []struct {
		name string
		edit func(*Options)
		ok   bool
	}{
		{"defaults", func(*Options) {}, true},
		{"one broker", func(o *Options) { o.Brokers = o.Brokers[:1] }, false},
		{"unknown kind", func(o *Options) { o.Kinds = []Kind{"kill_everything"} }, false},
		{"short send phase", func(o *Options) { o.Duration = time.Second }, false},
		{"too few users", func(o *Options) { o.Users = 2 }, false},
		{"negative faults", func(o *Options) { o.MaxFaults = -1 }, false},
		{"session timeout too long", func(o *Options) { o.SessionTimeout = time.Hour }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ok
			o.Brokers = append([]string(nil), ok.Brokers...)
			c.edit(&o)
			err := o.defaults()
			if (err == nil) != c.ok {
				t.Fatalf("defaults() = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

// TestEraseEveryDefaults: erasures are on by default, off when negative,
// and off with plaintext bodies (nothing to erase without keys).
func TestEraseEveryDefaults(t *testing.T) {
	for _, c := range []struct {
		name      string
		every     time.Duration
		plaintext bool
		want      time.Duration
	}{
		{"default", 0, false, 5 * time.Second},
		{"given", 2 * time.Second, false, 2 * time.Second},
		{"off", -1, false, 0},
		{"plaintext", 2 * time.Second, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Brokers: []string{"a:1", "b:2", "c:3"}, EraseEvery: c.every, Plaintext: c.plaintext}
			if err := o.defaults(); err != nil || o.EraseEvery != c.want {
				t.Fatalf("EraseEvery %s (err %v), want %s", o.EraseEvery, err, c.want)
			}
		})
	}
}
