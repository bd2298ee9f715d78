package polylbhttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/polylb/polylb/bindings/go/polylbhttp"
)

func Example() {
	big, small := startExampleServer("big"), startExampleServer("small") // in production: your endpoints
	defer big.Close()
	defer small.Close()

	transport, err := polylbhttp.New("loadbalance=roundrobin", []polylbhttp.Endpoint{
		{URL: big.URL, Weight: 200},
		{URL: small.URL}, // weight 100
	})
	if err != nil {
		log.Fatal(err)
	}
	defer transport.Close()
	client := &http.Client{Transport: transport}

	var answers []string
	for i := 0; i < 6; i++ {
		// "orders" is a name only: each request goes to an endpoint's host.
		resp, err := client.Get("http://orders/orders/42")
		if err != nil {
			log.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body) // the request ends at io.EOF
		resp.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		answers = append(answers, string(body))
	}
	fmt.Println(answers)

	stats, err := transport.Balancer().Stats()
	if err != nil {
		log.Fatal(err)
	}
	for _, inv := range stats.Invokers {
		fmt.Printf("weight %d: succeeded %d, in flight %d\n", inv.Weight, inv.Succeeded, inv.Active)
	}
	// Output:
	// [big small big big small big]
	// weight 200: succeeded 4, in flight 0
	// weight 100: succeeded 2, in flight 0
}

// startExampleServer answers every request with its name.
func startExampleServer(name string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, name)
	}))
}
