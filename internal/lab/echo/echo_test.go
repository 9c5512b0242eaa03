package echo

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerNamesPodAndNode(t *testing.T) {
	rec := httptest.NewRecorder()
	handler(Config{Pod: "echo-1", Namespace: "default", Node: "node-1"}).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	if !strings.HasPrefix(string(body), "pod=default/echo-1 node=node-1 client=") {
		t.Fatalf("body = %q", body)
	}
	if rec.Header().Get("X-Node") != "node-1" {
		t.Fatalf("X-Node = %q", rec.Header().Get("X-Node"))
	}
}
