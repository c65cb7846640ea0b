package web_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"regexp"

	"github.com/walq/walq"
	"github.com/walq/walq/web"
)

// cardNumber finds what looks like a payment card number in a body.
var cardNumber = regexp.MustCompile(`\b\d{4}( ?\d{4}){3}\b`)

// FormatBody sees every body the dashboard serves, raw downloads
// included: a redactor there keeps a field out of every page and
// download (a search in bodies still matches the stored bytes; see
// Options.FormatBody).
func ExampleOptions_formatBody() {
	dir, err := os.MkdirTemp("", "walq-web-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	q, err := walq.Open(dir, walq.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	payments, err := q.OpenQueue("payments", walq.QueueOptions{})
	if err != nil {
		log.Fatal(err)
	}
	payments.Put(context.Background(), []byte(`{"card":"4111 1111 1111 1111","amount":12}`))
	src, err := web.Queues(q, payments)
	if err != nil {
		log.Fatal(err)
	}

	dash, err := web.New(src, web.Options{
		Access: web.ReadOnlyAccess,
		// Shown and downloaded bodies never carry a card number.
		FormatBody: func(queue string, item walq.ItemView, body []byte) []byte {
			return cardNumber.ReplaceAll(body, []byte("[card]"))
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer dash.Close()

	srv := httptest.NewServer(dash)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/q/payments/item/1/raw")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Header.Get("Content-Disposition"))
	fmt.Println(string(raw))
	// Output:
	// attachment; filename="payments-item-1.bin"
	// {"card":"[card]","amount":12}
}
