package polylbdubbo

import (
	"fmt"
	"math"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"

	polylb "github.com/polylb/polylb/bindings/go"
	"github.com/polylb/polylb/bindings/go/internal/utf8text"
)

// URL parameters the adapter reads besides dubbo-go's own (weight, warmup,
// timestamp, remote.timestamp, hash.nodes, hash.arguments, loadbalance).
const (
	// StrategyKey names the strategy for the extension "polylb" (method
	// level first, then service level; default "random").
	StrategyKey = "polylb.strategy"
	// ConfigKey holds extra polylb configuration appended to the balancer's
	// config string, e.g. "seed=42" or "peakewma.choices=0" (method level
	// first). Several keys are joined by '&' (%26 inside a URL).
	ConfigKey = "polylb.config"

	zoneKey          = "zone"
	hashNodesKey     = "hash.nodes"
	hashArgumentsKey = "hash.arguments"
	defaultHashNodes = 160
	defaultStrategy  = "random"
)

// Strategies lists polylb's strategies; each is registered as
// "polylb-<strategy>" (and "polylb" reads polylb.strategy).
var Strategies = []string{
	"random", "roundrobin", "leastactive", "shortestresponse", "consistenthash",
	"adaptive", "p2c", "peakewma", "boundedhash", "maglev", "rendezvous", "orca",
}

// dubbo-go splits hash.arguments with this pattern (constant.CommaSplitPattern).
var commaSplit = regexp.MustCompile(constant.CommaSplitPattern)

// identity is a provider's stable identity across registry refreshes:
// protocol://ip:port/path. dubbo-go replaces Invoker objects when a provider's
// URL changes; the identity (and so polylb's id, with the provider's counters
// and round-robin position) stays. A registry of a multi-registry reference
// (its URL carries the reference's as SubURL, see stateKey) is its whole URL:
// two registries may share an address (two namespaces or groups of one
// registry server), and a registry's URL does not change while the reference
// lives.
func identity(u *common.URL) string {
	if u.SubURL != nil {
		return u.String()
	}
	return u.Protocol + "://" + u.Ip + ":" + u.Port + "/" + strings.TrimPrefix(u.Path, "/")
}

// methodParam is a parameter as dubbo-go's balancers read it: "methods.<m>.<key>"
// first, then "<key>", then def.
func methodParam(u *common.URL, method, key, def string) string {
	if v := u.GetMethodParam(method, key, ""); v != "" {
		return v
	}
	return u.GetParam(key, def)
}

// providerInvoker is polylb's view of one provider for calls of method ("":
// the service level), read from its URL the way dubbo-go's
// loadbalance.GetWeight reads it:
//   - weight: "methods.<method>.weight" when it is a number, else "weight",
//     else a registry's "registry.weight" when the URL has
//     "registry.label=true", else 100; a negative weight is dubbo-go's default
//     100 (Java Dubbo would clamp it to 0);
//   - zone: "zone" ("" none), for polylb.config's zone=<consumer's zone>
//     (as the Java adapter reads it), each byte that is not UTF-8 written as
//     \xNN (utf8text.Escape);
//   - warm-up: the provider's start (providerStart) and "warmup" (seconds,
//     default 600 s, which is polylb's default; milliseconds from a Java
//     Dubbo provider, told by its start in ms, as Java Dubbo writes and reads
//     both); none without a start, none for warmup <= 0 and none for a start
//     in the future (dubbo-go: full weight).
func providerInvoker(id uint64, u *common.URL, now time.Time, method string) polylb.Invoker {
	inv := polylb.NewInvoker(id, ringAddress(u))
	inv.Zone = utf8text.Escape(u.GetParam(zoneKey, ""))
	inv.Weight = weightOf(u, method)
	if inv.Weight == 0 {
		return inv
	}
	start, javaMs := providerStart(u)
	if start <= 0 || start > now.UnixMilli() {
		return inv // StartTimeMs 0: no warm-up
	}
	inv.StartTimeMs = start
	// As dubbo-go reads it: a value that is not a number is the default.
	warmup, err := strconv.ParseInt(u.GetParam(constant.WarmupKey, ""), 10, 64)
	if err != nil {
		warmup, javaMs = constant.DefaultWarmup, false // 600 s, Java Dubbo's default too
	}
	if warmup <= 0 {
		inv.WarmupMs = 0 // dubbo-go: uptime < warmup never holds, so no warm-up
	} else if javaMs {
		// A Java provider's own warmup, in ms as its timestamp: Java Dubbo
		// writes and reads both in ms.
		inv.WarmupMs = int32(min(warmup, math.MaxInt32))
	} else if warmup > math.MaxInt32/1000 {
		// The longest warm-up polylb takes, decided before multiplying: seconds × 1000
		// overflows int64 from 2^63 / 1000 on (9223372036854776 s wrapped to 192 ms).
		inv.WarmupMs = math.MaxInt32
	} else {
		inv.WarmupMs = int32(warmup * 1000)
	}
	return inv
}

// ringAddress places a provider on the hashing strategies' rings, tables and
// scores as Java Dubbo's URL.getAddress() does, so that a Go and a Java
// consumer send a key to the same provider: host:port with an IPv6 host in
// brackets ([::1]:20880; dubbo-go's Ip drops them, and ip:port was ::1:20880),
// and the host alone for a URL without a port (dubbo-go then leaves Ip and
// Port empty, and ip:port was ":" for every such provider). The port is Java
// Dubbo's int: decimal without leading zeros (":020880" is 20880), and a port
// of 0 is no port (getAddress() gives the host alone, "[::1]" for IPv6).
func ringAddress(u *common.URL) string {
	if u.Port == "" {
		if u.Ip != "" {
			return u.Ip
		}
		return u.Location
	}
	port, err := strconv.Atoi(u.Port)
	if err != nil {
		return net.JoinHostPort(u.Ip, u.Port)
	}
	if port <= 0 {
		if strings.Contains(u.Ip, ":") {
			return "[" + u.Ip + "]"
		}
		return u.Ip
	}
	return net.JoinHostPort(u.Ip, strconv.Itoa(port))
}

// weightOf is the provider's weight for calls of method ("": the service
// level) before warm-up: dubbo-go's GetWeight without its warm-up step.
func weightOf(u *common.URL, method string) int32 {
	// As dubbo-go's GetMethodParamInt64: a method-level number, even a
	// negative one, hides the service's weight.
	w := int64(math.MinInt64)
	if method != "" {
		w = u.GetMethodParamInt(method, constant.WeightKey, math.MinInt64)
	}
	if w == math.MinInt64 {
		w = u.GetParamInt(constant.WeightKey, -1)
	}
	if w < 0 && u.GetParamBool(constant.RegistryKey+"."+constant.RegistryLabelKey, false) {
		w = u.GetParamInt(constant.RegistryKey+"."+constant.WeightKey, constant.DefaultWeight)
	}
	if w < 0 {
		w = constant.DefaultWeight
	}
	return int32(min(w, math.MaxInt32))
}

// methodsWithWeights appends to names the methods u gives a weight of their
// own ("methods.<m>.weight").
func methodsWithWeights(u *common.URL, names map[string]bool) {
	const prefix, suffix = "methods.", "." + constant.WeightKey
	u.RangeParams(func(key, _ string) bool {
		if strings.HasPrefix(key, prefix) && strings.HasSuffix(key, suffix) && len(key) > len(prefix)+len(suffix) {
			names[key[len(prefix):len(key)-len(suffix)]] = true
		}
		return true
	})
}

// providerStart is the provider's start in Unix ms, 0 when unknown, and
// whether the URL gave it in ms (a Java Dubbo provider, whose warmup is then
// in ms too) rather than in seconds (a dubbo-go provider).
// dubbo-go's own balancers read "remote.timestamp", which dubbo-go 3.3.1
// never fills in with a time (URL.MergeURL sets it, to "", only when the
// provider's URL has no "timestamp"), so under them no provider warms up.
// The adapter reads the start the registry gave: the merged URL keeps the
// provider's own "timestamp" (MergeURL keeps the provider's parameters), and
// a "remote.timestamp" present says the provider had none (its "timestamp"
// is then the consumer's), unless someone set it to a time. A Java Dubbo
// provider's timestamp is in ms, dubbo-go's in seconds.
func providerStart(u *common.URL) (int64, bool) {
	raw, remote := "", false
	u.RangeParams(func(key, value string) bool {
		if key == constant.RemoteTimestampKey {
			raw, remote = value, true // present, even empty
			return false
		}
		return true
	})
	if !remote {
		raw = u.GetParam(constant.TimestampKey, "")
	}
	ts, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || ts <= 0 {
		return 0, false
	}
	if ts < 100_000_000_000 { // seconds (1e11 s is the year 5138; 1e11 ms is 1973)
		return ts * 1000, false
	}
	return ts, true
}

// methodConfig is what a method's calls need from the first provider's URL:
// polylb's config string and, for the hashing strategies, the argument
// indexes of the key.
type methodConfig struct {
	config   string
	hashArgs []int // nil: the strategy takes no key
	// weighted: the strategy reads weights, so a method's own weights
	// (methods.<m>.weight) need a balancer of their own. consistenthash's
	// ring ignores weights, as Dubbo's does.
	weighted bool
	// sequenced: the strategy's picks follow a sequence that every select
	// advances (roundrobin), so a retry or fork selects as dubbo-go's
	// DoSelect does: over the list, reselecting only when it lands on a
	// provider the invocation tried (see serviceState.attempt).
	sequenced bool
}

// isHashing: the strategy picks by a key (hash.arguments).
func isHashing(strategy string) bool {
	return hasRing(strategy) || strategy == "maglev" || strategy == "rendezvous"
}

// hasRing: the strategy places its invokers on Dubbo's ring, hash.nodes
// points each. maglev's lookup table (maglev.tableSize, set through
// polylb.config) does not read hash.nodes, nor does rendezvous, which has
// neither ring nor table, so it is passed to neither.
func hasRing(strategy string) bool {
	return strategy == "consistenthash" || strategy == "boundedhash"
}

// readMethodConfig builds the config for calls of method, fixed being the
// extension's strategy ("" for the extension "polylb").
func readMethodConfig(u *common.URL, method, fixed string) (methodConfig, error) {
	if err := checkAdapterKeys(u, method); err != nil {
		return methodConfig{}, err
	}
	strategy := fixed
	if strategy == "" {
		strategy = methodParam(u, method, StrategyKey, defaultStrategy)
	}
	var b strings.Builder
	b.WriteString("loadbalance=")
	b.WriteString(strategy)
	mc := methodConfig{weighted: strategy != "consistenthash", sequenced: strategy == "roundrobin"}
	if hasRing(strategy) {
		nodes := methodParam(u, method, hashNodesKey, strconv.Itoa(defaultHashNodes))
		b.WriteString("&hash.nodes=")
		b.WriteString(nodes)
	}
	if isHashing(strategy) {
		raw := methodParam(u, method, hashArgumentsKey, "0")
		for _, field := range commaSplit.Split(raw, -1) {
			i, err := strconv.Atoi(field)
			if err != nil {
				return methodConfig{}, fmt.Errorf("polylb: %s=%q of %s.%s: %q is not an argument index",
					hashArgumentsKey, raw, u.ServiceKey(), method, field)
			}
			mc.hashArgs = append(mc.hashArgs, i)
		}
	}
	if extra := methodParam(u, method, ConfigKey, ""); extra != "" {
		b.WriteByte('&')
		b.WriteString(extra)
	}
	mc.config = b.String()
	return mc, nil
}

// adapterKeyNames are the adapter's keys, as polylb.<name> or
// methods.<method>.polylb.<name>.
var adapterKeyNames = []string{"strategy", "config"}

// checkAdapterKeys refuses a URL parameter that is a near miss of one of the
// adapter's keys (within two edits of polylb.strategy or polylb.config, case
// aside, also after a methods.<m>. prefix): misspelt, it would leave the
// default in place without a word (polylb.strateg=roundrobin balancing at
// random). Only near misses: a provider on a later adapter may carry keys
// this one does not know, and the library checks its own keys inside
// polylb.config. The Java adapter's check, with its message.
func checkAdapterKeys(u *common.URL, method string) error {
	const prefix = "polylb."
	var bad, suggestion string
	u.RangeParams(func(key, _ string) bool {
		at := 0
		if !strings.HasPrefix(key, prefix) {
			dot := strings.Index(key, "."+prefix)
			if dot < 0 {
				return true
			}
			at = dot + 1
		}
		name := key[at+len(prefix):]
		for _, known := range adapterKeyNames {
			// The smallest such key, so the error is the same whatever the map's order.
			if name != known && editDistance(strings.ToLower(name), known) <= 2 && (bad == "" || key < bad) {
				bad, suggestion = key, key[:at]+prefix+known
			}
		}
		return true
	})
	if bad == "" {
		return nil
	}
	return fmt.Errorf("polylb: unknown URL parameter '%s' for %s.%s; did you mean '%s'? "+
		"(the adapter reads %s and %s, also as methods.<method>.%s and methods.<method>.%s)",
		bad, u.ServiceKey(), method, suggestion, StrategyKey, ConfigKey, StrategyKey, ConfigKey)
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diagonal := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			above := row[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			row[j] = min(row[j]+1, row[j-1]+1, diagonal+cost)
			diagonal = above
		}
	}
	return row[len(b)]
}

// hashKey is the consistent-hash key of a call, built as Java Dubbo builds
// it: the arguments at the configured indexes, each as text, concatenated
// without separator (indexes out of range skipped), a generic call
// ($invoke / $invokeAsync) unwrapped to its real arguments. Text is Go's
// fmt.Sprint except that nil is "null" (Java's String.valueOf) and that
// pointers are followed to their values (appendArgText): strings, integers and
// booleans give Java's text, other types may not (see README).
func hashKey(inv base.Invocation, indexes []int) []byte {
	args := arguments(inv)
	var key []byte
	for _, i := range indexes {
		if i < 0 || i >= len(args) {
			continue
		}
		switch a := args[i].(type) {
		case nil:
			key = append(key, "null"...)
		case string:
			key = append(key, a...)
		case int:
			key = strconv.AppendInt(key, int64(a), 10)
		case int32:
			key = strconv.AppendInt(key, int64(a), 10)
		case int64:
			key = strconv.AppendInt(key, a, 10)
		default:
			key = appendArgText(key, a)
		}
	}
	return key
}

// arguments are the call's arguments, a generic call's real ones unwrapped
// (dubbo-go passes [method, types, args] to "$invoke").
func arguments(inv base.Invocation) []any {
	args := inv.Arguments()
	name := inv.MethodName()
	if (name != constant.Generic && name != constant.GenericAsync) || len(args) != 3 {
		return args
	}
	v := reflect.ValueOf(args[2])
	if v.Kind() != reflect.Slice {
		return args
	}
	out := make([]any, v.Len())
	for i := range out {
		out[i] = v.Index(i).Interface()
	}
	return out
}
