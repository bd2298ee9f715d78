package polylb_test

import (
	"errors"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	polylb "github.com/polylb/polylb/bindings/go"
)

// wantStatus checks err is an *Error with the given status, that errors.Is
// matches the sentinel, and that the message says something.
func wantStatus(t *testing.T, what string, err error, sentinel *polylb.Error) *polylb.Error {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, sentinel.Status)
		return nil
	}
	var e *polylb.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: %T %v, want *polylb.Error", what, err, err)
		return nil
	}
	if e.Status != sentinel.Status || !errors.Is(err, sentinel) {
		t.Errorf("%s: status %v (%v), want %v", what, e.Status, err, sentinel.Status)
	}
	if e.Message == "" || !strings.Contains(err.Error(), sentinel.Status.String()) {
		t.Errorf("%s: unhelpful error %q", what, err)
	}
	return e
}

// badConfig is a config polylb.New must refuse with ErrInvalidConfig, and
// what the message must mention.
type badConfig struct{ config, mentions string }

func assertBadConfigs(t *testing.T, cases []badConfig) {
	t.Helper()
	for _, c := range cases {
		lb, err := polylb.New(c.config)
		if lb != nil {
			t.Errorf("%q: got a balancer", c.config)
			lb.Close()
		}
		e := wantStatus(t, c.config, err, polylb.ErrInvalidConfig)
		if e != nil && !strings.Contains(e.Message, c.mentions) {
			t.Errorf("%q: message %q does not mention %q", c.config, e.Message, c.mentions)
		}
	}
}

func TestBadConfig(t *testing.T) {
	assertBadConfigs(t, []badConfig{
		{"loadBalance=roundrobin", "did you mean 'loadbalance'"}, // Dubbo's classic silent typo
		{"hash.node=160", "'hash.nodes'"},
		{"loadbalance=roundrobbin", "'roundrobin'"},
		{"loadbalance=nope", "nope"},
		{"loadbalance=consistenthash&hash.nodes=3", "hash.nodes"}, // empty ring
		{"hash.nodes=abc", "hash.nodes"},
		{"seed=-1", "seed"},
		{"timeout=0", "timeout"},
		{"loadbalance", "loadbalance"},
		{"seed=1&seed=2", "twice"},
	})
	_, err := polylb.New("loadbalance=\xff")
	wantStatus(t, "invalid UTF-8 config", err, polylb.ErrInvalidUTF8)
}

// The library bounds what it quotes of the text at fault, not its message:
// these pass 1 KB, and a message cut to a 1 KB buffer lost what was wrong
// (Java's, Rust's and C++'s messages are whole).
func TestLongConfigErrorKeepsTheWholeMessage(t *testing.T) {
	for _, c := range []struct{ config, reason string }{
		{"loadbalance=" + strings.Repeat("\u00e9", 600), "is an unknown strategy; known: random,"},
		{strings.Repeat("\u00e9", 600) + "=1", "(known keys: loadbalance,"},
		{strings.Repeat("x", 10000) + "=1", "(known keys: loadbalance,"},
	} {
		_, err := polylb.New(c.config)
		e := wantStatus(t, "long config", err, polylb.ErrInvalidConfig)
		if e == nil {
			continue
		}
		m := e.Message
		if !strings.Contains(m, c.reason) || !(strings.HasSuffix(m, "orca") || strings.HasSuffix(m, "orca.errorPenalty)")) || len(m) <= 1024 || !utf8.ValidString(m) {
			t.Errorf("config of %d bytes: message of %d bytes, want the whole text with %q; ends %q", len(c.config), len(m), c.reason, m[max(0, len(m)-80):])
		}
	}
}

func TestBadInvokerSets(t *testing.T) {
	lb := newBalancer(t, "", weighted(1, 2))
	negative := weighted(1, -1)
	wantStatus(t, "negative weight", lb.Update(negative), polylb.ErrNegativeWeight)
	wantStatus(t, "duplicate id", lb.Update([]polylb.Invoker{provider(1), provider(2), provider(1)}), polylb.ErrDuplicateID)
	wantStatus(t, "id above INT64_MAX", lb.Update([]polylb.Invoker{provider(1 << 63)}), polylb.ErrIDOutOfRange)
	bad := provider(3)
	bad.Address = "10.0.0.3:\xff"
	wantStatus(t, "invalid UTF-8 address", lb.Update([]polylb.Invoker{bad}), polylb.ErrInvalidUTF8)
	bad = provider(3)
	bad.Zone = "\xfe"
	wantStatus(t, "invalid UTF-8 zone", lb.Update([]polylb.Invoker{bad}), polylb.ErrInvalidUTF8)

	// A rejected set changes nothing.
	if s := stats(t, lb); len(s.Invokers) != 2 || s.Invokers[1].Weight != 2 {
		t.Errorf("set changed by a rejected update: %+v", s.Invokers)
	}
	// The detailed message names the culprit.
	err := lb.Update([]polylb.Invoker{provider(7), provider(7)})
	if !strings.Contains(err.Error(), "7") {
		t.Errorf("duplicate-id message does not name the id: %v", err)
	}
}

func TestSelectErrors(t *testing.T) {
	lb := newBalancer(t, "loadbalance=random&seed=42", nil)
	m := method(t, lb, "sayHello")
	_, err := lb.Select(m, nil)
	wantStatus(t, "select before any update", err, polylb.ErrNoProvider)

	if err := lb.Update(weighted(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	_, err = lb.SelectAmong(m, nil, []uint64{1, 42}, nil)
	wantStatus(t, "unknown candidate", err, polylb.ErrUnknownCandidate)
	_, err = lb.SelectAmong(m, nil, []uint64{1, 2}, []uint64{2, 1})
	wantStatus(t, "every candidate excluded", err, polylb.ErrNoCandidate)
	_, err = lb.SelectAmong(m, nil, nil, []uint64{1, 2, 3})
	wantStatus(t, "the whole set excluded", err, polylb.ErrNoCandidate)
	_, err = lb.Select(polylb.Method(999), nil)
	wantStatus(t, "unknown method", err, polylb.ErrUnknownMethod)
	_, err = lb.SelectAmong(polylb.Method(999), nil, []uint64{1}, nil)
	wantStatus(t, "unknown method among", err, polylb.ErrUnknownMethod)

	if err := lb.Update(nil); err != nil {
		t.Fatalf("an empty set is allowed: %v", err)
	}
	_, err = lb.Select(m, nil)
	wantStatus(t, "select from an empty set", err, polylb.ErrNoProvider)
	_, err = lb.SelectAmong(m, nil, nil, []uint64{1})
	wantStatus(t, "select among an empty set", err, polylb.ErrNoProvider)
}

func TestReportErrors(t *testing.T) {
	lb := newBalancer(t, "loadbalance=adaptive", weighted(1, 2))
	m := method(t, lb, "sayHello")
	wantStatus(t, "unknown outcome", lb.Report(m, 1, time.Millisecond, polylb.Outcome(4)), polylb.ErrUnknownOutcome)
	wantStatus(t, "negative outcome", lb.Report(m, 1, time.Millisecond, polylb.Outcome(-1)), polylb.ErrUnknownOutcome)
	wantStatus(t, "unknown method", lb.Report(polylb.Method(999), 1, 0, polylb.Success), polylb.ErrUnknownMethod)
	wantStatus(t, "negative elapsed", lb.Report(m, 1, -time.Millisecond, polylb.Success), polylb.ErrInvalidArgument)
	// Shorter than a microsecond, a negative time must not truncate to an accepted 0.
	wantStatus(t, "negative elapsed under 1 µs", lb.Report(m, 1, -500*time.Nanosecond, polylb.Success), polylb.ErrInvalidArgument)
	wantStatus(t, "negative rt under 1 µs", lb.ReportProviderMetrics(m, 1, time.Now(), 1, -time.Nanosecond), polylb.ErrInvalidArgument)
	wantStatus(t, "NaN load", lb.ReportProviderMetrics(m, 1, time.Now(), math.NaN(), time.Millisecond), polylb.ErrInvalidArgument)
	wantStatus(t, "negative load", lb.ReportProviderMetrics(m, 1, time.Now(), -1, time.Millisecond), polylb.ErrInvalidArgument)
	wantStatus(t, "metrics, unknown method", lb.ReportProviderMetrics(polylb.Method(999), 1, time.Now(), 1, 0), polylb.ErrUnknownMethod)
	// The library returns a bare code; the binding names the argument.
	for _, c := range []struct {
		err  error
		want string
	}{
		{lb.Report(m, 1, -time.Millisecond, polylb.Success), "elapsed = -1ms"},
		{lb.ReportProviderMetrics(m, 1, time.Now(), math.NaN(), time.Millisecond), "cpuLoad = NaN (want finite and >= 0)"},
		{lb.ReportProviderMetrics(m, 1, time.Now(), 1, -time.Second), "rt = -1s (want >= 0)"},
		{lb.ReportProviderMetrics(m, 1, time.UnixMilli(-5), 1, time.Second), "providerTime = "},
		{lb.ReportLoad(1, -1, 0, 0.5), "qps = -1 (want finite and >= 0)"},
	} {
		var e *polylb.Error
		if !errors.As(c.err, &e) || !strings.Contains(e.Message, c.want) {
			t.Errorf("got %v, want an *Error naming %q", c.err, c.want)
		}
	}

	// Reports for ids not in the set are accepted and ignored.
	if err := lb.Report(m, 12345, time.Millisecond, polylb.Success); err != nil {
		t.Errorf("report for an unknown id: %v", err)
	}
	if err := lb.ReportProviderMetrics(m, 12345, time.Now(), 1, time.Millisecond); err != nil {
		t.Errorf("metrics for an unknown id: %v", err)
	}
	// And a report without a select never drives active below 0.
	if err := lb.Report(m, 1, time.Millisecond, polylb.Success); err != nil {
		t.Fatal(err)
	}
	if inv, _ := stats(t, lb).Invoker(1); inv.Active != 0 {
		t.Errorf("active %d after an unmatched report", inv.Active)
	}
}

func TestMethodNames(t *testing.T) {
	lb := newBalancer(t, "", nil)
	if m := method(t, lb, ""); m != polylb.ServiceLevel {
		t.Errorf(`Method("") = %d, want ServiceLevel`, m)
	}
	a, b := method(t, lb, "sayHello"), method(t, lb, "sayBye")
	if a == b || a == polylb.ServiceLevel || method(t, lb, "sayHello") != a {
		t.Errorf("ids: sayHello %d, sayBye %d, sayHello again %d", a, b, method(t, lb, "sayHello"))
	}
	// The lookup returns a status only; the binding words it as the library
	// words an address (the same in Python and Java).
	for name, want := range map[string]string{
		"say\xffHello":           "invalid utf-8 sequence of 1 bytes from index 3",
		"say\xe2\x82":            "incomplete utf-8 byte sequence from index 3",
		"\U0001f600\xed\xa0\x80": "invalid utf-8 sequence of 1 bytes from index 4",
		"\xf0\x90\x80A":          "invalid utf-8 sequence of 3 bytes from index 0",
	} {
		_, err := lb.Method(name)
		if e := wantStatus(t, "invalid UTF-8 method", err, polylb.ErrInvalidUTF8); e != nil &&
			e.Message != "method name is not valid UTF-8: "+want {
			t.Errorf("Method(%q): message %q, want the flaw %q", name, e.Message, want)
		}
	}
}

// TestUTF8FlawsAreWordedAsTheLibraryWordsThem compares the binding's words for
// a bad method name with the library's for the same bytes as an address, over
// byte strings rich in the edges of UTF-8 (fixed seed).
func TestUTF8FlawsAreWordedAsTheLibraryWordsThem(t *testing.T) {
	lb := newBalancer(t, "", nil)
	edges := []byte{0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
		0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF}
	draw := rand.New(rand.NewSource(20261206))
	for checked := 0; checked < 3000; {
		data := make([]byte, 1+draw.Intn(6))
		for i := range data {
			data[i] = edges[draw.Intn(len(edges))]
		}
		if utf8.Valid(data) {
			continue
		}
		checked++
		var library, binding *polylb.Error
		if !errors.As(lb.Update([]polylb.Invoker{{ID: 1, Address: string(data)}}), &library) {
			t.Fatalf("%q: the update was accepted", data)
		}
		_, err := lb.Method(string(data))
		if !errors.As(err, &binding) {
			t.Fatalf("%q: the method lookup gave %v", data, err)
		}
		flaw := strings.TrimPrefix(library.Message, "invoker #0 address is not valid UTF-8: ")
		if binding.Message != "method name is not valid UTF-8: "+flaw {
			t.Fatalf("%q: the binding says %q, the library %q", data, binding.Message, library.Message)
		}
	}
}

func TestMethodLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("interns 2^20 names")
	}
	lb := newBalancer(t, "", nil)
	const limit = 1 << 20 // the library's documented maximum, "" included
	for i := 1; i < limit; i++ {
		if _, err := lb.Method(strconv.Itoa(i)); err != nil {
			t.Fatalf("method %d: %v", i, err)
		}
	}
	_, err := lb.Method("one-too-many")
	wantStatus(t, "method limit", err, polylb.ErrLimitExceeded)
}

func TestErrorValues(t *testing.T) {
	err := error(&polylb.Error{Status: polylb.StatusNoProvider, Message: "no provider: the invoker set is empty"})
	if !errors.Is(err, polylb.ErrNoProvider) || errors.Is(err, polylb.ErrNoCandidate) {
		t.Error("errors.Is matches by status only")
	}
	if got := err.Error(); got != "polylb: no provider: the invoker set is empty (PLB_ERR_NO_PROVIDER)" {
		t.Errorf("Error() = %q", got)
	}
	if errors.Is(polylb.ErrClosed, polylb.ErrNoProvider) {
		t.Error("ErrClosed is not a library status")
	}
	// A typed nil *Error target matches nothing (and does not panic).
	var none *polylb.Error
	if errors.Is(err, none) {
		t.Error("errors.Is matched a nil *Error")
	}
	for s := polylb.StatusOK; s <= polylb.StatusLimitExceeded; s++ {
		if strings.HasPrefix(s.String(), "PLB_STATUS(") || s.Text() == "" {
			t.Errorf("status %d: name %q, text %q", s, s.String(), s.Text())
		}
	}
	if polylb.Status(99).String() != "PLB_STATUS(99)" || polylb.Status(99).Text() == "" {
		t.Errorf("unknown status: %q / %q", polylb.Status(99).String(), polylb.Status(99).Text())
	}
}

// A virtual clock that starts at the Unix epoch is virtual from its first
// microsecond: only the zero time.Time means the library's clock.
func TestTimesAtTheEpochAreVirtual(t *testing.T) {
	inv := polylb.NewInvoker(1, "10.0.0.1:20880")
	inv.Weight = 100
	inv.StartTimeMs = 1
	inv.WarmupMs = 600_000
	lb := newBalancer(t, "loadbalance=random", []polylb.Invoker{inv})
	for _, at := range []time.Time{time.Unix(0, 0), time.Unix(0, 999), time.Unix(0, 1000)} {
		s, err := lb.StatsAt(at)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := s.Invoker(1)
		if !ok {
			t.Fatal("invoker 1 missing from stats")
		}
		// At the epoch the provider has not started: Dubbo's warm-up gives weight 1. At the
		// library's clock it would be long warm (100).
		if got.EffectiveWeight != 1 {
			t.Errorf("StatsAt(%v): effective weight %d, want 1 (virtual time, not the wall clock)", at.UTC(), got.EffectiveWeight)
		}
	}
}

// Times whose Unix microseconds do not fit an int64 (beyond about ±292,000 years;
// time.Unix(math.MaxInt64, 0) is a common "never") are the library's latest and
// earliest times, not the wrapped-around product time.Time.UnixMicro gives: far in
// the future a provider is warm, far in the past it has not started.
func TestTimesBeyondInt64MicrosecondsSaturate(t *testing.T) {
	inv := polylb.NewInvoker(1, "10.0.0.1:20880")
	inv.Weight = 100
	inv.StartTimeMs = 1_700_000_000_000
	inv.WarmupMs = 600_000
	lb := newBalancer(t, "loadbalance=random", []polylb.Invoker{inv})
	const maxSec, maxUs int64 = math.MaxInt64 / 1_000_000, math.MaxInt64 % 1_000_000 // 9223372036854 s 775807 µs
	for _, tc := range []struct {
		at     time.Time
		weight int64
	}{
		{time.Unix(maxSec, maxUs*1000), 100},     // exactly math.MaxInt64 µs
		{time.Unix(maxSec, (maxUs+1)*1000), 100}, // one µs past: wrapped to math.MinInt64
		{time.Unix(maxSec+1, 0), 100},            // wrapped to a large negative time
		{time.Unix(math.MaxInt64, 0), 100},
		{time.Unix(-maxSec-1, 224_192_000), 1}, // exactly math.MinInt64 µs
		{time.Unix(-maxSec-1, 224_191_000), 1}, // one µs earlier: wrapped to math.MaxInt64
		{time.Unix(-maxSec-2, 0), 1},
		{time.Unix(math.MinInt64, 0), 1},
	} {
		s, err := lb.StatsAt(tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Invoker(1); got.EffectiveWeight != tc.weight {
			t.Errorf("StatsAt(%d s %d ns): effective weight %d, want %d", tc.at.Unix(), tc.at.Nanosecond(), got.EffectiveWeight, tc.weight)
		}
		if _, err := lb.SelectAt(0, nil, tc.at); err != nil {
			t.Errorf("SelectAt(%d s): %v", tc.at.Unix(), err)
		}
	}
}

// A provider clock beyond what int64 milliseconds hold is the latest time, not the
// wrapped product of time.Time.UnixMilli (time.Unix(math.MaxInt64, 0) gave -1000 ms,
// refused as a negative provider time).
func TestProviderTimesBeyondInt64MillisecondsSaturate(t *testing.T) {
	lb := newBalancer(t, "loadbalance=adaptive", []polylb.Invoker{
		polylb.NewInvoker(1, "10.0.0.1:20880"), polylb.NewInvoker(2, "10.0.0.2:20880"),
	})
	now := time.Unix(1_700_000_000, 0)
	for _, provider := range []time.Time{time.Unix(math.MaxInt64/1000, 807_000_000), time.Unix(math.MaxInt64, 0)} {
		if err := lb.ReportProviderMetricsAt(0, 1, provider, 0.5, time.Millisecond, now); err != nil {
			t.Errorf("provider time %d s: %v", provider.Unix(), err)
		}
	}
	err := lb.ReportProviderMetricsAt(0, 1, time.Unix(math.MinInt64, 0), 0.5, time.Millisecond, now)
	if !errors.Is(err, polylb.ErrInvalidArgument) {
		t.Errorf("provider time in the far past: %v, want ErrInvalidArgument", err)
	}
}
