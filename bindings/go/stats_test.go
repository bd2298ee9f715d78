package polylb_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Every field of the document reaches Go once: a named field with its value,
// or Extra with its raw value. Checked against encoding/json's generic decode
// of the same document, on the documents of every strategy with every option
// (after picks, failures, provider metrics and warm-up) and on hand-written
// ones the library does not write but a caller of json.Unmarshal may pass:
// escapes, nulls, nested extras, white space, repeated keys.
func TestStatsDecodeKeepsEveryField(t *testing.T) {
	var docs [][]byte
	for _, strategy := range []string{"random", "roundrobin", "leastactive", "shortestresponse",
		"consistenthash", "adaptive", "p2c", "peakewma", "boundedhash", "maglev", "rendezvous", "orca"} {
		for _, options := range []string{"", "&zone=a&outlier.consecutiveFailures=2&outlier.failureRate=50",
			"&slowstart.windowMs=60000"} {
			if options == "&slowstart.windowMs=60000" && !strings.Contains("p2c peakewma boundedhash", strategy) {
				continue
			}
			docs = append(docs, exercisedStats(t, "loadbalance="+strategy+options))
		}
	}
	docs = append(docs,
		[]byte(`{"strategy":"x","invokers":[{"id":1,"address":"a\"b\\c\n\u00e9\ud83d\ude00","zone":null,"weight":-5,
			"extra":{"n":[1,{"s":"]}"}],"t":true},"methods":[{"method":"m\t","active":null,"x":[[]]}]},null],"top":[{}]}`),
		[]byte("  {\"invokers\":null , \"strategy\" : \"y\" ,\"strategy\":\"z\"}\n"),
		[]byte(`{"strategy":"w","invokers":[]}`),
	)
	for _, doc := range docs {
		var indented bytes.Buffer
		if err := json.Indent(&indented, doc, "", "\t"); err != nil {
			t.Fatalf("%v: %s", err, doc)
		}
		for _, doc := range [][]byte{doc, indented.Bytes()} {
			var typed polylb.Stats
			if err := json.Unmarshal(doc, &typed); err != nil {
				t.Fatalf("%v: %s", err, doc)
			}
			var generic map[string]any
			if err := json.Unmarshal(doc, &generic); err != nil {
				t.Fatal(err)
			}
			sameFields(t, "stats", generic, typed, typed.Extra)
			rows, _ := generic["invokers"].([]any)
			if len(rows) != len(typed.Invokers) {
				t.Fatalf("%d invokers, want %d: %s", len(typed.Invokers), len(rows), doc)
			}
			for i, row := range rows {
				inv := typed.Invokers[i]
				row, _ := row.(map[string]any)
				sameFields(t, fmt.Sprintf("invoker %d", i), row, inv, inv.Extra)
				methods, _ := row["methods"].([]any)
				if len(methods) != len(inv.Methods) {
					t.Fatalf("invoker %d: %d methods, want %d: %s", i, len(inv.Methods), len(methods), doc)
				}
				for j, m := range methods {
					m, _ := m.(map[string]any)
					sameFields(t, fmt.Sprintf("invoker %d method %d", i, j), m, inv.Methods[j], inv.Methods[j].Extra)
				}
			}
		}
	}
}

// Bad documents are errors, as encoding/json's are, never a panic.
func TestStatsDecodeRejectsBadDocuments(t *testing.T) {
	for _, doc := range []string{``, `{`, `{"strategy":1}`, `{"invokers":{}}`, `{"invokers":[{"id":-1}]}`,
		`{"invokers":[{"id":1.5}]}`, `{"invokers":[{"weight":"1"}]}`, `{"invokers":[{"methods":[{"selected":true}]}]}`,
		`{"invokers":[{"methods":[5]}]}`, `[]`, `"stats"`, `{} {}`, `{"strategy":"a",}`, `{"a":"\x01"}`} {
		var s polylb.Stats
		if err := json.Unmarshal([]byte(doc), &s); err == nil {
			t.Errorf("%q: no error, got %+v", doc, s)
		}
	}
}

// exercisedStats is the stats document of a balancer with config after a few
// hundred calls of every outcome over two methods, provider metrics and an
// invoker warming up.
func exercisedStats(t *testing.T, config string) []byte {
	t.Helper()
	invokers := weighted(100, 200, 300)
	invokers[0].Zone, invokers[1].Zone = "a", "b"
	invokers[2].StartTimeMs = time.Now().Add(-time.Second).UnixMilli()
	lb := newBalancer(t, config+"&seed=7", invokers)
	for _, name := range []string{"", "sayHello"} {
		m := method(t, lb, name)
		for i := 0; i < 300; i++ {
			id, err := lb.Select(m, []byte(fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			lb.ReportProviderMetrics(m, id, time.Now(), 0.25, time.Millisecond)
			outcome := []polylb.Outcome{polylb.Success, polylb.Failure, polylb.Timeout, polylb.Cancelled}[i%4]
			if i%7 == 0 {
				continue // left in flight
			}
			if err := lb.Report(m, id, time.Duration(i)*time.Microsecond, outcome); err != nil {
				t.Fatal(err)
			}
		}
	}
	doc, err := lb.StatsJSON(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// sameFields checks that each field of want is typed's named field (by json
// tag) with the same value, or in extra with the same value, and that extra
// holds nothing else.
func sameFields(t *testing.T, what string, want map[string]any, typed any, extra map[string]json.RawMessage) {
	t.Helper()
	v := reflect.ValueOf(typed)
	named := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
			named[tag] = v.Field(i)
		}
	}
	for key, value := range want {
		if field, ok := named[key]; ok {
			if key == "invokers" || key == "methods" || value == nil {
				continue // compared row by row; a null leaves the zero value
			}
			got, _ := json.Marshal(field.Interface())
			var gotValue any
			json.Unmarshal(got, &gotValue)
			if !reflect.DeepEqual(gotValue, value) {
				t.Errorf("%s: %q is %v, want %v", what, key, gotValue, value)
			}
			continue
		}
		raw, ok := extra[key]
		if !ok {
			t.Errorf("%s: %q (%v) neither named nor in Extra", what, key, value)
			continue
		}
		var gotValue any
		if err := json.Unmarshal(raw, &gotValue); err != nil || !reflect.DeepEqual(gotValue, value) {
			t.Errorf("%s: Extra[%q] is %s, want %v", what, key, raw, value)
		}
	}
	for key := range extra {
		if _, ok := want[key]; !ok {
			t.Errorf("%s: Extra has %q, not in the document", what, key)
		}
	}
}

// What json.Unmarshal makes of the named fields, for comparison: the same
// fields without the one-pass decoder.
type plainStats struct {
	Strategy string
	Invokers []struct {
		ID      uint64
		Address string
		Zone    string
		Weight  int64
		Methods []struct {
			Method   string
			Selected uint64
		}
	}
}

// The one-pass decoder reads named fields as json.Unmarshal does on any
// document json.Unmarshal accepts, not only on the library's: a key matches
// its field whatever its case, and a string that is not UTF-8 gets U+FFFD for
// each bad byte.
func TestStatsDecodeMatchesEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		"{\"strategy\":\"a\xffb\",\"invokers\":[{\"address\":\"\xe9t\xc3\",\"methods\":[{\"method\":\"\xed\xa0\x80\"}]}]}",
		`{"Strategy":"x","INVOKERS":[{"ID":3,"Address":"h:1","zONE":"z","Weight":7,"Methods":[{"METHOD":"m","Selected":2}]}]}`,
		`{"strategy":"a","STRATEGY":"b","invokers":[{"id":1,"Id":2}]}`,
	} {
		var want plainStats
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		var got polylb.Stats
		if err := json.Unmarshal([]byte(doc), &got); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if got.Strategy != want.Strategy || len(got.Invokers) != len(want.Invokers) {
			t.Fatalf("%q: got %+v, want %+v", doc, got, want)
		}
		for i, w := range want.Invokers {
			g := got.Invokers[i]
			if g.ID != w.ID || g.Address != w.Address || g.Zone != w.Zone || g.Weight != w.Weight ||
				len(g.Methods) != len(w.Methods) {
				t.Fatalf("%q: invoker %d is %+v, want %+v", doc, i, g, w)
			}
			for j, wm := range w.Methods {
				if gm := g.Methods[j]; gm.Method != wm.Method || gm.Selected != wm.Selected {
					t.Errorf("%q: method %d is %+v, want %+v", doc, j, gm, wm)
				}
			}
			if len(g.Extra) != 0 {
				t.Errorf("%q: invoker %d: named fields in Extra: %v", doc, i, g.Extra)
			}
		}
		if len(got.Extra) != 0 {
			t.Errorf("%q: named fields in Extra: %v", doc, got.Extra)
		}
	}
}

// An empty array is an empty slice and null a nil one, as json.Unmarshal
// makes them: an invoker never picked had nil Methods where encoding/json (and
// every other binding) gives an empty list.
func TestStatsDecodeEmptyArraysAsEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{"strategy":"a","invokers":[]}`,
		`{"strategy":"a","invokers":null}`,
		`{"strategy":"a","invokers":[{"id":1,"methods":[]},{"id":2,"methods":null},{"id":3}]}`,
	} {
		var want plainStats
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		var got polylb.Stats
		if err := json.Unmarshal([]byte(doc), &got); err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if (got.Invokers == nil) != (want.Invokers == nil) {
			t.Errorf("%q: Invokers nil %v, want nil %v", doc, got.Invokers == nil, want.Invokers == nil)
		}
		for i, w := range want.Invokers {
			if g := got.Invokers[i]; (g.Methods == nil) != (w.Methods == nil) {
				t.Errorf("%q: invoker %d: Methods nil %v, want nil %v", doc, i, g.Methods == nil, w.Methods == nil)
			}
		}
	}
}
