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

// testPool is a pool whose address locks live in the test's own folder, so
// that a dev cluster running on the machine meanwhile changes nothing.
func testPool(t *testing.T, block byte, dir string) *ipPool {
	p := newIPPool(block)
	p.dir = dir
	return p
}

func TestIPPoolUniqueAndReleased(t *testing.T) {
	p := testPool(t, 1, t.TempDir())
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

func TestIPPoolBlocksDoNotOverlap(t *testing.T) {
	dir := t.TempDir()
	a, b := testPool(t, 1, dir), testPool(t, 2, dir)
	ipA, errA := a.allocate()
	ipB, errB := b.allocate()
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if ipA != "127.1.0.1" || ipB != "127.2.0.1" {
		t.Fatalf("first addresses of blocks 1 and 2 = %s, %s; want 127.1.0.1, 127.2.0.1", ipA, ipB)
	}
}

// Two pools of the same block (two dev clusters on one machine) never hand
// out the same address, and one's release makes it the other's.
func TestIPPoolsShareTheMachine(t *testing.T) {
	dir := t.TempDir()
	a, b := testPool(t, 1, dir), testPool(t, 1, dir)
	ipA, err := a.allocate()
	if err != nil {
		t.Fatal(err)
	}
	ipB, err := b.allocate()
	if err != nil {
		t.Fatal(err)
	}
	if ipA == ipB {
		t.Fatalf("two pools both handed out %s", ipA)
	}
	a.release(ipA)
	b.limit, b.next = 1, 0 // b may now only try 127.1.0.1, which a released
	if ip, err := b.allocate(); err != nil || ip != ipA {
		t.Fatalf("after the other pool released %s: got %s, %v", ipA, ip, err)
	}
}
