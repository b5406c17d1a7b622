package localnode

import "testing"

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"A": "1", "POD_IP": "127.1.0.9"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	cases := map[string]string{
		"plain":           "plain",
		"$(A)":            "1",
		"x$(A)y$(POD_IP)": "x1y127.1.0.9",
		"$$(A)":           "$(A)",
		"$(MISSING)":      "$(MISSING)",
		"$(unterminated":  "$(unterminated",
		"cost: $5":        "cost: $5",
		"trailing $":      "trailing $",
	}
	for in, want := range cases {
		if got := expandVarsWith(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIPPoolUniqueAndReleased(t *testing.T) {
	p := newIPPool()
	seen := map[string]bool{}
	for i := 0; i < 300; i++ {
		ip, err := p.allocate()
		if err != nil {
			t.Fatal(err)
		}
		if seen[ip] {
			t.Fatalf("address %s handed out twice", ip)
		}
		seen[ip] = true
	}
	p.release("127.1.0.1")
	p.limit = 300 // every other address is taken: the released one must come back
	ip, err := p.allocate()
	if err != nil || ip != "127.1.0.1" {
		t.Fatalf("allocate after release = %s, %v", ip, err)
	}
	if _, err := p.allocate(); err == nil {
		t.Fatal("a full pool handed out an address")
	}
}
