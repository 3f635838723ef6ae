// kstatus: the status sigs.k8s.io/cli-utils' kstatus library computes for objects, the library
// Flux's health checks and `kubectl wait`-style tooling use. The tests run it on live objects
// (`kubectl get -o json ... | kstatus`) so our conditions are judged by the consumer itself, not
// by our reading of its documentation. Built by tests/env/k8s-bin.sh; never part of the product.
//
// Input: one JSON object, or a List (`kubectl get -o json` of several). Output: a line per object,
// "<kind>/<name> <status> <message>".
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("kstatus", version)
		return
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus: reading stdin:", err)
		os.Exit(2)
	}
	var obj map[string]interface{}
	// apimachinery's decoding (integers as int64), as a client's unstructured objects have them
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus: not a JSON object:", err)
		os.Exit(2)
	}
	items := []interface{}{obj}
	if kind, _ := obj["kind"].(string); strings.HasSuffix(kind, "List") {
		list, _ := obj["items"].([]interface{})
		items = list
	}
	for _, it := range items {
		m, ok := it.(map[string]interface{})
		if !ok {
			fmt.Fprintln(os.Stderr, "kstatus: an item is not an object")
			os.Exit(2)
		}
		u := &unstructured.Unstructured{Object: m}
		res, err := status.Compute(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s/%s: %v\n", u.GetKind(), u.GetName(), err)
			os.Exit(1)
		}
		fmt.Printf("%s/%s %s %s\n", u.GetKind(), u.GetName(), res.Status, res.Message)
	}
}
