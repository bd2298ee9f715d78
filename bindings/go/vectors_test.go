package polylb_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Dubbo conformance vectors: outputs of Dubbo's own load balancers (see
// research/dubbo-spec.md). The files are read from the repository's copy
// (tests/vectors), from the shared folder beside the checkout when present,
// and from $POLYLB_VECTORS (a file or a directory), so a larger set can be
// run without changing the tests.

type vectorFile struct {
	ConsistentHash *struct {
		Keys  []string          `json:"keys"`
		Cases []json.RawMessage `json:"cases"`
	} `json:"consistent_hash"`
	RoundRobin *struct {
		Sequences []struct {
			Weights []int32 `json:"weights"`
			Picks   []int   `json:"picks"`
		} `json:"sequences"`
		// Only the [position, index] pairs whose pick is not index 0 (see
		// longSequence).
		LongSequences []map[string]json.RawMessage `json:"long_sequences"`
	} `json:"round_robin"`
	Warmup *struct {
		NowMs        int64 `json:"now_ms"`
		ViaGetWeight []struct {
			Weight      *int64 `json:"weight"`
			WarmupMs    *int64 `json:"warmup_ms"`
			TimestampMs *int64 `json:"timestamp_ms"`
			Expected    int64  `json:"expected"`
		} `json:"via_getWeight"`
	} `json:"warmup"`
}

type consistentHashCase struct {
	Name          string   `json:"name"`
	HashNodes     *int     `json:"hash_nodes"`
	HashArguments string   `json:"hash_arguments"`
	Keys          []string `json:"keys"`
	// Either one provider list, or a before/after pair on one balancer (a
	// removal: the ring is rebuilt for the new set).
	Providers       []string `json:"providers"`
	Picks           []string `json:"picks"`
	ProvidersBefore []string `json:"providers_before"`
	PicksBefore     []string `json:"picks_before"`
	ProvidersAfter  []string `json:"providers_after"`
	PicksAfter      []string `json:"picks_after"`
}

func vectorFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	add := func(path string) {
		info, err := os.Stat(path)
		if err != nil {
			return
		}
		if !info.IsDir() {
			files = append(files, path)
			return
		}
		found, _ := filepath.Glob(filepath.Join(path, "*.json"))
		files = append(files, found...)
	}
	add(filepath.Join("..", "..", "tests", "vectors"))
	add(filepath.Join("..", "..", "..", "shared", "vectors"))
	if extra := os.Getenv("POLYLB_VECTORS"); extra != "" {
		add(extra)
	}
	if len(files) == 0 {
		t.Fatal("no vector files: expected ../../tests/vectors/*.json (or set POLYLB_VECTORS)")
	}
	return files
}

func loadVectors(t *testing.T) map[string]vectorFile {
	t.Helper()
	all := map[string]vectorFile{}
	for _, path := range vectorFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v vectorFile
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		all[path] = v
	}
	return all
}

func TestVectorsConsistentHash(t *testing.T) {
	checked := 0
	for path, v := range loadVectors(t) {
		if v.ConsistentHash == nil {
			continue
		}
		for _, raw := range v.ConsistentHash.Cases {
			var c consistentHashCase
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			// Each key is the call's single argument; the caller hashes what
			// hash.arguments names (polylb hashes the key it is given, as the
			// adapters build it).
			arguments := c.HashArguments
			if arguments == "" {
				arguments = "0"
			}
			indexes, ok := hashArgumentIndexes(arguments)
			if !ok {
				t.Fatalf("%s: case %s: hash.arguments=%q makes Dubbo throw", path, c.Name, arguments)
			}
			nodes := 160
			if c.HashNodes != nil {
				nodes = *c.HashNodes
			}
			keys := c.Keys
			if keys == nil {
				keys = v.ConsistentHash.Keys
			}
			lb := newBalancer(t, fmt.Sprintf("loadbalance=consistenthash&hash.nodes=%d", nodes), nil)
			m := method(t, lb, "sayHello")
			phases := [][2][]string{{c.Providers, c.Picks}}
			if c.Providers == nil {
				phases = [][2][]string{{c.ProvidersBefore, c.PicksBefore}, {c.ProvidersAfter, c.PicksAfter}}
			}
			for _, phase := range phases {
				providers, picks := phase[0], phase[1]
				invokers := make([]polylb.Invoker, len(providers))
				for i, address := range providers {
					invokers[i] = polylb.NewInvoker(uint64(i+1), address)
				}
				if err := lb.Update(invokers); err != nil {
					t.Fatalf("%s: case %s: %v", path, c.Name, err)
				}
				if len(picks) != len(keys) {
					t.Fatalf("%s: case %s: %d picks for %d keys", path, c.Name, len(picks), len(keys))
				}
				for i, key := range keys {
					id, err := lb.Select(m, []byte(dubboKey([]string{key}, indexes)))
					if err != nil {
						t.Fatalf("%s: case %s, key %q: %v", path, c.Name, key, err)
					}
					if got := invokers[id-1].Address; got != picks[i] {
						t.Errorf("%s: case %s, key %q: picked %s, Dubbo picks %s", path, c.Name, key, got, picks[i])
					}
					checked++
				}
			}
		}
	}
	if checked < 120 {
		t.Errorf("checked only %d consistent-hash picks", checked)
	}
}

func TestVectorsRoundRobin(t *testing.T) {
	checked := 0
	for path, v := range loadVectors(t) {
		if v.RoundRobin == nil {
			continue
		}
		for _, seq := range v.RoundRobin.Sequences {
			lb := newBalancer(t, "loadbalance=roundrobin", weighted(dubboWeights(seq.Weights)...))
			m := method(t, lb, "sayHello")
			for k, want := range seq.Picks {
				// Dubbo's vectors freeze the clock: every select at one instant.
				id, err := lb.SelectAt(m, nil, virtualNow)
				if err != nil {
					t.Fatal(err)
				}
				if got := int(id) - 1; got != want {
					t.Fatalf("%s: weights %v, pick %d: index %d, Dubbo %d", path, seq.Weights, k, got, want)
				}
				checked++
			}
		}
	}
	if checked < 120 {
		t.Errorf("checked only %d round-robin picks", checked)
	}
}

// dubboWeights maps URL weights to invoker weights as the adapters do: Dubbo's
// getWeight clamps a negative weight to 0, polylb rejects it.
func dubboWeights(weights []int32) []int32 {
	out := make([]int32, len(weights))
	for i, w := range weights {
		out[i] = max(w, 0)
	}
	return out
}

// longSequence reads one of round_robin.long_sequences as the Rust harness
// does (the public file shows no example): its weights, the one array of
// integer pairs [position, index] whose pick is not index 0, and its length
// (the one other integer field, else the last pair's position + 1). Every
// other position picks index 0.
func longSequence(t *testing.T, fields map[string]json.RawMessage) ([]int32, []int) {
	t.Helper()
	var weights []int32
	if err := json.Unmarshal(fields["weights"], &weights); err != nil {
		t.Fatalf("long sequence weights: %v", err)
	}
	var pairs [][]int64
	length := -1
	for name, raw := range fields {
		if name == "weights" {
			continue
		}
		var p [][]int64
		if err := json.Unmarshal(raw, &p); err == nil && len(p) > 0 && pairs == nil {
			ok := true
			for _, pair := range p {
				ok = ok && len(pair) == 2
			}
			if ok {
				pairs = p
				continue
			}
		}
		var n int
		if err := json.Unmarshal(raw, &n); err == nil && n >= 0 {
			length = n
		}
	}
	if length < 0 {
		for _, p := range pairs {
			length = max(length, int(p[0])+1)
		}
	}
	want := make([]int, max(length, 0))
	for _, p := range pairs {
		want[p[0]] = int(p[1])
	}
	return weights, want
}

func TestVectorsRoundRobinLong(t *testing.T) {
	for path, v := range loadVectors(t) {
		if v.RoundRobin == nil {
			continue
		}
		for _, fields := range v.RoundRobin.LongSequences {
			weights, want := longSequence(t, fields)
			lb := newBalancer(t, "loadbalance=roundrobin", weighted(dubboWeights(weights)...))
			m := method(t, lb, "sayHello")
			for k, w := range want {
				id, err := lb.SelectAt(m, nil, virtualNow)
				if err != nil {
					t.Fatal(err)
				}
				if got := int(id) - 1; got != w {
					t.Fatalf("%s: long sequence, weights %v, pick %d: index %d, Dubbo %d", path, weights, k, got, w)
				}
			}
		}
	}
}

// TestVectorsWarmup maps each vector's Dubbo URL parameters to invoker fields
// as the Java adapter does, then reads the effective weight from Stats at the
// vector's clock:
//   - weight absent → 100; negative → 0 (Dubbo clamps, polylb rejects);
//   - timestamp absent → 0 (unknown start: no warm-up);
//   - warmup absent → -1 (polylb's default, 600000 as Dubbo's); a negative
//     warmup → 0, because Dubbo reads warmup <= 0 as "no warm-up" while a
//     negative warmup_ms means "default" to polylb.
func TestVectorsWarmup(t *testing.T) {
	checked := 0
	for path, v := range loadVectors(t) {
		if v.Warmup == nil {
			continue
		}
		now := time.UnixMilli(v.Warmup.NowMs)
		// One balancer, one invoker per vector: a single Stats call checks all.
		invokers := make([]polylb.Invoker, len(v.Warmup.ViaGetWeight))
		for i, c := range v.Warmup.ViaGetWeight {
			inv := provider(uint64(i + 1))
			if c.Weight != nil {
				inv.Weight = int32(max(*c.Weight, 0))
			}
			if c.TimestampMs != nil {
				inv.StartTimeMs = *c.TimestampMs
			}
			if c.WarmupMs != nil {
				inv.WarmupMs = int32(max(*c.WarmupMs, 0))
			}
			invokers[i] = inv
		}
		lb := newBalancer(t, "", invokers)
		s, err := lb.StatsAt(now)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range v.Warmup.ViaGetWeight {
			got, ok := s.Invoker(uint64(i + 1))
			if !ok {
				t.Fatalf("%s: invoker %d missing from stats", path, i+1)
			}
			if got.EffectiveWeight != c.Expected {
				t.Errorf("%s: case %d (%s): effective weight %d, Dubbo %d", path, i, describe(c.Weight, c.WarmupMs, c.TimestampMs), got.EffectiveWeight, c.Expected)
			}
			checked++
		}
	}
	if checked < 40 {
		t.Errorf("checked only %d warm-up weights", checked)
	}
}

func describe(values ...*int64) string {
	var parts []string
	for i, v := range values {
		name := []string{"weight", "warmup_ms", "timestamp_ms"}[i]
		if v == nil {
			parts = append(parts, name+"=null")
		} else {
			parts = append(parts, fmt.Sprintf("%s=%d", name, *v))
		}
	}
	return strings.Join(parts, " ")
}

// Java's \s is ASCII's six blanks; Go's \s lacks \v.
var hashArgumentSeparator = regexp.MustCompile(`[ \t\n\v\f\r]*,+[ \t\n\v\f\r]*`)

// hashArgumentIndexes reads hash.arguments as Dubbo does: split on commas
// with the blanks around them (trailing empty pieces dropped, as Java's split
// does), each piece a Java int; false where Dubbo throws.
func hashArgumentIndexes(text string) ([]int, bool) {
	pieces := hashArgumentSeparator.Split(text, -1)
	// Trailing empty pieces go only from a split that matched, all of them: ","
	// gives no index (the empty key), "" stays "" (and throws).
	if len(pieces) > 1 {
		for len(pieces) > 0 && pieces[len(pieces)-1] == "" {
			pieces = pieces[:len(pieces)-1]
		}
	}
	indexes := make([]int, 0, len(pieces))
	for _, piece := range pieces {
		i, err := strconv.ParseInt(piece, 10, 32)
		if err != nil {
			return nil, false
		}
		indexes = append(indexes, int(i))
	}
	return indexes, true
}

// dubboKey is the key Dubbo hashes: the named arguments that exist,
// concatenated.
func dubboKey(args []string, indexes []int) string {
	var key strings.Builder
	for _, i := range indexes {
		if i >= 0 && i < len(args) {
			key.WriteString(args[i])
		}
	}
	return key.String()
}

func TestHashArgumentsAreReadAsDubboReadsThem(t *testing.T) {
	for text, want := range map[string][]int{"0": {0}, "0 , 1,,2": {0, 1, 2}, "0,,": {0}, "-1,+1": {-1, 1}, "0,\v1": {0, 1}, ",": {}, ",,": {}, " , ": {}} {
		if got, ok := hashArgumentIndexes(text); !ok || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%q: %v %v, want %v", text, got, ok, want)
		}
	}
	for _, throws := range []string{"x", " 0", "0 ", ",0", "0, ,1", "", "0,\u00a01", "2147483648"} {
		if got, ok := hashArgumentIndexes(throws); ok {
			t.Errorf("%q: %v, want Dubbo's exception", throws, got)
		}
	}
	for _, c := range []struct {
		args    []string
		indexes []int
		want    string
	}{{[]string{"user-3", "9"}, []int{0, 1}, "user-39"}, {[]string{"k"}, []int{0, 0}, "kk"}, {[]string{"k"}, []int{1, -1}, ""}} {
		if got := dubboKey(c.args, c.indexes); got != c.want {
			t.Errorf("dubboKey(%q, %v) = %q, want %q", c.args, c.indexes, got, c.want)
		}
	}
}
