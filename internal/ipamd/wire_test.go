package ipamd

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// wireStrings are the strings the wire tests draw from: plain, empty,
// quotes and backslashes, control characters, HTML, multi-byte and
// invalid UTF-8.
var wireStrings = []string{"", "eth0", "c-0123456789abcdef", "de\"fa\\ult", "a\nb\tc\rd\x00e\x1f", "<web>&co", "pöd-名前-\u2028", "bad\xffutf8\xc3", "null", "{\"x\":1}"}

func randString(r *rand.Rand) string { return wireStrings[r.IntN(len(wireStrings))] }

func randKey(r *rand.Rand) Key {
	return Key{Network: randString(r), ContainerID: randString(r), IfName: randString(r)}
}

func randAllocation(r *rand.Rand) Allocation {
	al := Allocation{Key: randKey(r), Pool: randString(r), Namespace: randString(r), Pod: randString(r), PodUID: randString(r)}
	switch r.IntN(3) {
	case 0: // nil IPs
	case 1:
		al.IPs = []IP{}
	default:
		for i := range 1 + r.IntN(3) {
			a := netip.AddrFrom4([4]byte{10, byte(i), byte(r.IntN(256)), byte(r.IntN(256))})
			if r.IntN(2) == 0 {
				a = netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(r.IntN(256))})
			}
			al.IPs = append(al.IPs, IP{Address: netip.PrefixFrom(a, a.BitLen()-8), Gateway: a.Prev()})
		}
		if r.IntN(4) == 0 {
			al.IPs = append(al.IPs, IP{}) // zero values encode as ""
		}
	}
	return al
}

// The plugin's hand-written request encoder and token-walking answer
// decoder agree with encoding/json, which the agent uses, on every field.
func TestWireAgreesWithEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 3000 {
		req := Request{Op: []string{OpAdd, OpDel, OpCheck, OpGC, OpStatus, randString(r)}[r.IntN(6)], TimeoutMs: int64(r.IntN(3) * 10000)}
		if r.IntN(2) == 0 {
			req.Add = &AddRequest{Key: randKey(r), Namespace: randString(r), Pod: randString(r), PodUID: randString(r)}
		}
		if r.IntN(2) == 0 {
			k := randKey(r)
			req.Key = &k
		}
		if r.IntN(3) == 0 {
			req.GC = &GCRequest{Network: randString(r)}
			if r.IntN(4) > 0 {
				req.GC.Valid = []Key{}
				for range r.IntN(4) {
					req.GC.Valid = append(req.GC.Valid, randKey(r))
				}
			}
		}
		hand := appendRequest(nil, req)
		var fromHand, fromJSON Request
		if err := json.Unmarshal(hand, &fromHand); err != nil {
			t.Fatalf("request %d: %s is not JSON: %v", i, hand, err)
		}
		std, _ := json.Marshal(req)
		if err := json.Unmarshal(std, &fromJSON); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fromHand, fromJSON) {
			t.Fatalf("request %d:\nhand %s\njson %s", i, hand, std)
		}

		var resp Response
		switch r.IntN(4) {
		case 0:
			resp.Error = &ErrorBody{Kind: randString(r), Message: randString(r)}
		case 1:
			al := randAllocation(r)
			resp.Allocation = &al
		case 2:
			resp.GC = &GCResponse{}
			if r.IntN(4) > 0 {
				resp.GC.Freed = []Allocation{}
				for range r.IntN(4) {
					resp.GC.Freed = append(resp.GC.Freed, randAllocation(r))
				}
			}
		}
		b, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var want Response
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		got, err := decodeResponse(b)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("answer %d %s:\ngot  %+v, %v\nwant %+v", i, b, got, err, want)
		}
	}
}

// Unknown keys, nulls and whitespace are read as encoding/json reads them;
// broken answers are errors.
func TestDecodeResponseOddAnswers(t *testing.T) {
	for _, in := range []string{
		`{}`,
		` { "error" : null , "allocation" : null } `,
		`{"new":{"a":[1,{"b":null}],"c":true},"allocation":{"containerID":"c","ips":null,"extra":[1,2]},"gc":{"freed":null}}`,
		`{"allocation":{"ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1","mtu":1500}],"pod":null}}`,
	} {
		var want Response
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		got, err := decodeResponse([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\ngot  %+v, %v\nwant %+v", in, got, err, want)
		}
	}
	for _, in := range []string{``, `{`, `{"allocation":`, `{"allocation":{"ips":[{"address":"nope"}]}}`, `{"error":{"kind":3}}`, `[]`, `{} {}`, `{"allocation":{}`} {
		if _, err := decodeResponse([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// FuzzDecodeResponse: any bytes give an answer or an error, never a panic,
// and whatever encoding/json makes of a Response reads back the same.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"allocation":{"containerID":"c","ifName":"eth0","pool":"default","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}}`))
	f.Add([]byte(`{"error":{"kind":"no-block","message":"full"}}`))
	f.Add([]byte(`{"gc":{"freed":[{"containerID":"a","ifName":"b","pool":"p","ips":[]}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeResponse(b)
		if err != nil {
			return
		}
		again, _ := json.Marshal(got)
		var want Response
		if err := json.Unmarshal(again, &want); err != nil {
			t.Fatal(err)
		}
		if back, err := decodeResponse(again); err != nil || !reflect.DeepEqual(back, want) {
			t.Fatalf("%s: read back %+v, %v; want %+v", again, back, err, want)
		}
	})
}

// wire.go writes and reads these fields by name; a field added to a wire
// type fails here until wire.go (and this list) know it.
func TestWireKnowsEveryField(t *testing.T) {
	want := map[reflect.Type]string{
		reflect.TypeFor[Request]():    "op timeoutMs add key gc",
		reflect.TypeFor[AddRequest](): "network containerID ifName namespace pod podUID",
		reflect.TypeFor[GCRequest]():  "network valid",
		reflect.TypeFor[Response]():   "error allocation gc",
		reflect.TypeFor[ErrorBody]():  "kind message",
		reflect.TypeFor[Allocation](): "network containerID ifName pool namespace pod podUID ips",
		reflect.TypeFor[IP]():         "address gateway",
		reflect.TypeFor[GCResponse](): "freed",
	}
	for typ, names := range want {
		var got []string
		var walk func(reflect.Type)
		walk = func(st reflect.Type) {
			for f := range st.Fields() {
				if f.Anonymous {
					walk(f.Type)
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				got = append(got, name)
			}
		}
		walk(typ)
		if strings.Join(got, " ") != names {
			t.Errorf("%s has JSON fields %q; wire.go handles %q", typ, strings.Join(got, " "), names)
		}
	}
}
